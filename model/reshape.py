"""Resuming on another number of ranks or another ZeRO stage, through DeepSpeed's universal checkpoint.

A ZeRO-1/2/3 checkpoint holds the optimizer state cut into one flat partition
per rank; DeepSpeed refuses to load it on another data-parallel world size
("Automatic adjustment of ZeRO's optimizer state partitioning with a new world
size is not currently supported"), and a stage-3 checkpoint is not a stage-1
one. The universal form keeps each parameter whole (fp32 weights, both Adam
moments, the step), so any layout can cut it again. When the layout changed,
rank 0 converts the checkpoint once into <tag>/universal (deleted with the
tag); every rank then loads it with `checkpoint.load_universal`.

The data position needs nothing of this: it counts samples, not ranks
(model/data.py). The RNG states are per rank and restored only when the world
size is the one they were saved with.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

from model import checkpoint as ckpt

UNIVERSAL_DIR = "universal"
UNIVERSAL_DONE = "UNIVERSAL_COMPLETE"


class ReshapeUnsupported(RuntimeError):
    """The checkpoint cannot be loaded in this layout (ZeRO-0 holds no partitions to convert, nor wants them)."""


@dataclass(frozen=True)
class Layout:
    world_size: int
    zero_stage: int

    def describe(self) -> str:
        return f"{self.world_size} ranks, ZeRO-{self.zero_stage}"


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a launch resumes from and how: `load_tag` is the tag itself, or its universal form."""
    tag: str
    meta: dict
    saved: Layout
    now: Layout

    @property
    def reshaped(self) -> bool:
        return self.saved != self.now

    @property
    def load_tag(self) -> str:
        return f"{self.tag}/{UNIVERSAL_DIR}" if self.reshaped else self.tag


def saved_layout(ckpt_dir: Path, tag: str, meta: dict) -> Layout:
    """The layout a checkpoint was written in. Checkpoints older than the zero_stage field: the stage from its files
    (stage 3 keeps the weights in zero_pp_rank_*_model_states.pt, stages 1-2 only optimizer states there)."""
    stage = meta.get("zero_stage")
    if stage is None:
        files = [p.name for p in (Path(ckpt_dir) / tag).iterdir()]
        if any(n.startswith(("zero_pp_rank_", "bf16_zero_pp_rank_")) and n.endswith("_model_states.pt") for n in files):
            stage = 3
        elif any("zero_pp_rank_" in n and n.endswith("optim_states.pt") for n in files):
            stage = 1  # 1 and 2 cut the state alike; the conversion does not tell them apart either
        else:
            stage = 0
    return Layout(int(meta["world_size"]), int(stage))


def resume_point(ckpt_dir: Path, tag: str, meta: dict, now: Layout) -> ResumePoint:
    """How to resume `tag` in layout `now`; ReshapeUnsupported when only a ZeRO-0 checkpoint could say how."""
    saved = saved_layout(ckpt_dir, tag, meta)
    if saved.zero_stage == now.zero_stage == 0:
        return ResumePoint(tag, meta, now, now)  # every rank holds the whole state: any world size loads it
    point = ResumePoint(tag, meta, saved, now)
    if point.reshaped and 0 in (saved.zero_stage, now.zero_stage):
        raise ReshapeUnsupported(
            f"checkpoint {Path(ckpt_dir) / tag} was saved with {saved.describe()}; resuming it with "
            f"{now.describe()} needs ZeRO partitions on both sides. Set train.cluster.zero_stage: {saved.zero_stage} "
            f"for this run (ZeRO-1, 2 and 3 convert into each other on any number of ranks)")
    return point


def ensure_universal(ckpt_dir: Path, tag: str) -> Path:
    """<tag>/universal, converted now unless a finished conversion is there. One process calls this (rank 0)."""
    target = Path(ckpt_dir) / tag / UNIVERSAL_DIR
    if (target / UNIVERSAL_DONE).is_file():
        return target
    work = target.with_name(f"{UNIVERSAL_DIR}.tmp-{os.getpid()}")
    shutil.rmtree(work, ignore_errors=True)
    convert(Path(ckpt_dir) / tag, work)
    model_states_for_every_stage(work)
    optimizer_state_for_every_stage(work)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(work, target)
    (Path(ckpt_dir) / tag / "latest_universal").unlink(missing_ok=True)  # DeepSpeed's pointer; our tags say where
    ckpt.write_atomic(target / UNIVERSAL_DONE, tag)
    return target


STAGE_1_2_STATES = "mp_rank_00_model_states.pt"
STAGE_3_STATES = "zero_pp_rank_0_mp_rank_00_model_states.pt"


def model_states_for_every_stage(universal: Path) -> None:
    """The universal form keeps the model-states file of the stage it came from, but DeepSpeed looks for the one of
    the stage that loads it, and loads its `module` strictly: whole weights for ZeRO-1/2 (then overwritten from
    zero/, so they need only be right in shape), empty partitions for ZeRO-3. Write both from the one there. A
    conversion of ZeRO-3 also leaves each state a flat tensor, where ZeRO-1/2 read {"param": <shaped tensor>}."""
    import torch

    stage12, stage3 = universal / STAGE_1_2_STATES, universal / STAGE_3_STATES
    state = torch.load(stage12 if stage12.is_file() else stage3, map_location="cpu", weights_only=True)
    shapes = {name: tuple(shape) for group in state["param_shapes"] for name, shape in group.items()}
    for name, shape in shapes.items():
        for key in ("fp32", "exp_avg", "exp_avg_sq"):
            path = universal / "zero" / name / f"{key}.pt"
            loaded = torch.load(path, map_location="cpu", weights_only=True)
            if not isinstance(loaded, dict):
                torch.save({"param": loaded.view(shape), "cat_dim": 0}, path)
    whole = {name: (torch.load(universal / "zero" / name / "fp32.pt", weights_only=True)["param"]
                    if name in shapes else value) for name, value in state["module"].items()}
    if not stage12.is_file():
        torch.save({**state, "module": whole}, stage12)
    if not stage3.is_file():
        empty = {name: value.new_empty(0) if name in shapes else value for name, value in whole.items()}
        torch.save({**state, "module": empty}, stage3)


def optimizer_state_for_every_stage(universal: Path) -> None:
    """zero/optimizer_state.pt as both loaders read it. ZeRO-1/2 read the step of Adam from zero/<param>/step.pt and
    need ds_version; ZeRO-3 reads it from optimizer_state_dict.state[0].step. Each conversion writes only what its
    own stage reads, so a cross-stage resume would restart Adam's bias correction at step 0 (or not load)."""
    import torch
    from deepspeed import __version__ as ds_version

    path = universal / "zero" / "optimizer_state.pt"
    sd = torch.load(path, map_location="cpu", weights_only=True)
    params = [p for p in (universal / "zero").iterdir() if p.is_dir()]
    if "optimizer_state_dict" in sd:  # from ZeRO-3
        step = sd["optimizer_state_dict"]["state"][0]["step"]
        for folder in params:
            if not (folder / "step.pt").is_file():
                torch.save(step, folder / "step.pt")
    else:  # from ZeRO-1/2
        step = torch.load(params[0] / "step.pt", weights_only=True)
        sd["optimizer_state_dict"] = {"state": {0: {"step": step}}, "param_groups": sd["param_groups"]}
    sd.setdefault("ds_version", ds_version)
    torch.save(sd, path)


def convert(tag_dir: Path, out: Path) -> None:
    """DeepSpeed's ds_to_universal in this process, one worker (the ranks are busy waiting; no pool to fork)."""

    from deepspeed.checkpoint.ds_to_universal import main as ds_to_universal

    # checkpoints record no universal_checkpoint_info (Megatron's client state does); a plain model needs none
    ds_to_universal(SimpleNamespace(input_folder=str(tag_dir), output_folder=str(out), num_extract_workers=1,
                                    num_merge_workers=1, keep_temp_folder=False, strict=True,
                                    inject_missing_state=True))
