"""Saving and resuming the training state: DeepSpeed's checkpoint plus the data position and RNG states."""
from __future__ import annotations

import pickle
import random
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import torch

from model import checkpoint as ckpt
from model.comm import Comm
from model.data import SamplerState
from model.guard import fault_point
from model.llama import count_parameters
from model.mirror import Mirror
from model.reshape import Layout, ResumePoint, ensure_universal, resume_point


class ResumeMismatch(RuntimeError):
    """The newest checkpoint does not belong to this dataset or model: resuming would be wrong."""


def rng_state() -> dict:
    """Every RNG's state in types the weights-only loader reads back (tensors, numbers, strings, tuples)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)}}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached_gaussian"]))
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def restore_rng(path: Path) -> None:
    """This rank's RNG states from a checkpoint; a file the weights-only loader refuses (older format, or
    tampered) is reported and skipped: the weights and the data position still resume exactly."""
    try:
        set_rng_state(torch.load(path, weights_only=True))
    except (pickle.UnpicklingError, RuntimeError, KeyError, TypeError, ValueError) as err:
        print(f"warning: RNG states in {path} not restored ({type(err).__name__}: {str(err)[:200]}); "
              f"training resumes with fresh RNG states", file=sys.stderr, flush=True)


def save(engine, spec, step: int, position: SamplerState, tracker, comm: Comm, mirror: Mirror | None = None) -> str:
    """Every rank writes its part and a marker; after a barrier rank 0 marks the tag complete."""
    ckpt_dir = spec.out_dir / "checkpoints"
    tag = f"step_{step:08d}"
    meta = {"step": step, "data_position": position.to_dict(), "manifest_version": spec.manifest_version,
            "model": asdict(spec.model), "world_size": comm.world, "zero_stage": zero_stage(spec), "seed": spec.train.seed,
            "global_batch": spec.train.micro_batch_size * spec.train.grad_accum * comm.world}
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state=meta, save_latest=False)
    torch.save(rng_state(), ckpt_dir / tag / f"rng_rank{comm.rank}.pt")
    fault_point("kill_during_save", comm.rank)
    ckpt.mark_rank_done(ckpt_dir, tag, comm.rank)
    comm.barrier()
    if comm.rank == 0:
        ckpt.mark_complete(ckpt_dir, tag, comm.world, meta)
        tracker.event({"event": "checkpoint", "step": step, "tag": tag, "path": str(ckpt_dir / tag)})
        if mirror:
            mirror.submit(ckpt_dir, tag)
        removed = ckpt.apply_retention(ckpt_dir, spec.train.keep_last, spec.train.keep_every,
                                       mirror.in_flight() if mirror else set(), spec.train.keep_abandoned)
        if removed:
            tracker.event({"event": "checkpoints_removed", "step": step, "tags": removed})
    comm.barrier()
    return tag


def room_to_save(spec, model: torch.nn.Module, tracker, comm: Comm, step: int) -> bool:
    """Rank 0 checks free space against the last checkpoint's size (or an estimate); all ranks get its answer."""
    ok = 1.0
    if comm.rank == 0:
        ckpt_dir = spec.out_dir / "checkpoints"
        pruned = ckpt.prune_abandoned(ckpt_dir, spec.train.keep_abandoned)  # room first, from what retention removes anyway
        if pruned:
            tracker.event({"event": "checkpoints_removed", "step": step, "tags": pruned})
        last = ckpt.latest_complete(ckpt_dir)
        # fp32 weights + Adam's two moments + bf16/fp32 copy: ~16 bytes a parameter before the first save
        need = ckpt.checkpoint_bytes(ckpt_dir, last) if last else 16 * count_parameters(model)
        fits, free = ckpt.room_for_checkpoint(ckpt_dir, need)
        if not fits:
            ok = 0.0
            aside = sum(ckpt.checkpoint_bytes(ckpt_dir, t) for t in ckpt.abandoned_tags(ckpt_dir))
            print(f"warning: skipping the checkpoint at step {step}: {free / 1e9:.2f} GB free under {ckpt_dir}, "
                  f"a checkpoint needs about {need / 1e9:.2f} GB; free disk space or lower train.checkpoint.keep_last"
                  + (f" or train.recovery.keep_abandoned (set-aside checkpoints hold {aside / 1e9:.2f} GB)"
                     if aside else ""), file=sys.stderr, flush=True)
            tracker.event({"event": "checkpoint_skipped", "step": step, "reason": "low_disk", "free_bytes": free,
                           "needed_bytes": need})
    return comm.agree([ok], "min")[0] > 0


def zero_stage(spec) -> int:
    return int(spec.deepspeed.get("zero_optimization", {}).get("stage", 0))


def find_resume_point(spec, comm: Comm) -> ResumePoint | None:
    """The named or newest complete checkpoint and how this layout loads it; None: start from the beginning.
    Called before DeepSpeed is initialized, which must know whether it loads a universal checkpoint. When the
    layout changed, rank 0 converts the checkpoint while the others wait."""
    ckpt_dir = spec.out_dir / "checkpoints"
    tag = spec.train.resume_tag or ckpt.latest_complete(ckpt_dir)
    untrusted = {} if spec.train.resume_tag else ckpt.untrusted_tags(ckpt_dir)
    if tag is None and untrusted:  # never restart a long run from scratch over checkpoints it cannot read
        raise ResumeMismatch(f"no checkpoint under {ckpt_dir} can be resumed from: "
                             + "; ".join(untrusted.values()) + "; restore their COMPLETE files or move them away")
    if comm.rank == 0:
        for bad, problem in untrusted.items():
            if ckpt.tag_step(bad) > ckpt.tag_step(tag):
                print(f"warning: checkpoint {bad} is not resumed from: {problem}; resuming from {tag}, the newest "
                      f"one that holds", file=sys.stderr, flush=True)
    if tag is None:
        return None
    point = resume_point(ckpt_dir, tag, checked_meta(spec, ckpt_dir, tag), Layout(comm.world, zero_stage(spec)))
    if point.reshaped:
        error = None
        if comm.rank == 0:
            print(f"checkpoint {tag} was saved with {point.saved.describe()}, this run has {point.now.describe()}: "
                  f"loading it through its universal form", flush=True)
            try:
                ensure_universal(ckpt_dir, tag)
            except Exception as err:  # the others wait in the agreement below: they must hear of it, not hang
                error = err
        if comm.agree([1.0 if error else 0.0], "max")[0]:
            raise RuntimeError(f"could not convert checkpoint {ckpt_dir / tag} to its universal form: "
                               f"{type(error).__name__ if error else 'see rank 0'}: {error or ''}") from error
    return point


def resume(engine, spec, comm: Comm, point: ResumePoint | None) -> tuple[int, SamplerState]:
    """The step and data position to start from: `point` (see find_resume_point), else the beginning."""
    ckpt_dir = spec.out_dir / "checkpoints"
    if point is None:
        return 0, with_skips(SamplerState(order=spec.data.data_order), spec.overrides.skip_ranges)
    meta = point.meta
    try:
        path, _ = engine.load_checkpoint(str(ckpt_dir), tag=point.load_tag)
    except Exception as err:  # a corrupt or cut file: retrying the same checkpoint would fail the same way
        raise unusable(ckpt_dir, point.tag, comm, f"{type(err).__name__}: {str(err)[:300]}") from err
    if path is None:  # DeepSpeed returns (None, None) on a missing tag and would train from scratch
        raise RuntimeError(f"DeepSpeed could not load complete checkpoint {ckpt_dir / point.load_tag}")
    own_step = getattr(engine, "global_steps", meta["step"])
    if not point.reshaped and own_step != meta["step"]:
        raise unusable(ckpt_dir, point.tag, comm, f"DeepSpeed's own step is {own_step}, its COMPLETE file says "
                       f"{meta['step']}")
    rng_file = ckpt_dir / point.tag / f"rng_rank{comm.rank}.pt"
    if point.saved.world_size == comm.world and rng_file.is_file():
        restore_rng(rng_file)
    if comm.rank == 0:
        print(f"resumed from {point.tag} at step {meta['step']}", flush=True)
    return meta["step"], with_skips(checked_position(meta, ckpt_dir / point.tag, spec), spec.overrides.skip_ranges)


class CheckpointUnusable(RuntimeError):
    """The checkpoint chosen to resume from did not load; it is marked, and the next launch takes an earlier one."""


def unusable(ckpt_dir: Path, tag: str, comm: Comm, why: str) -> CheckpointUnusable:
    marker = ckpt.mark_unusable(ckpt_dir, tag, f"rank {comm.rank}: {why}")
    return CheckpointUnusable(f"checkpoint {ckpt_dir / tag} did not load on rank {comm.rank} ({why}); marked "
                              f"unusable ({marker}): the next launch resumes from the newest checkpoint before it")


def checked_position(meta: dict, ckpt_path: Path, spec) -> SamplerState:
    """The checkpoint's data position, refused when it was counted in another data order than the run's:
    the same position would name other samples, and data would silently repeat or be left out."""
    state = SamplerState.from_dict(meta["data_position"])
    if state.order != spec.data.data_order:
        raise ResumeMismatch(f"checkpoint {ckpt_path} counts data positions in the {state.order!r} order, the run "
                             f"is set to train.data.order={spec.data.data_order!r}; set train.data.order: {state.order} "
                             f"to finish this run in the order it started with, or start a new run_root")
    return state


def checked_meta(spec, ckpt_dir: Path, tag: str) -> dict:
    """The checkpoint's metadata, once it is known to be complete and of this dataset and model."""
    if not ckpt.is_complete(ckpt_dir, tag):
        raise ResumeMismatch(f"train.checkpoint.resume_tag={tag!r} is not a complete checkpoint under {ckpt_dir}; "
                             f"complete ones: {ckpt.complete_tags(ckpt_dir)}")
    try:
        meta = ckpt.read_meta(ckpt_dir, tag)
    except ckpt.CheckpointError as err:
        raise ResumeMismatch(f"checkpoint {tag} cannot be resumed from: {err}; complete ones that hold: "
                             f"{ckpt.complete_tags(ckpt_dir)}") from None
    if meta["manifest_version"] != spec.manifest_version:
        raise ResumeMismatch(f"checkpoint {ckpt_dir / tag} was trained on dataset version {meta['manifest_version']}, "
                             f"the tokens are now version {spec.manifest_version}; use a new run_root, or restore "
                             f"the inputs, tokenizer and tokenize settings it was trained on")
    if meta.get("model", asdict(spec.model)) != asdict(spec.model):
        changed = sorted(f"{k}: {meta['model'].get(k)} -> {v}" for k, v in asdict(spec.model).items()
                         if meta["model"].get(k) != v)
        raise ResumeMismatch(f"checkpoint {ckpt_dir / tag} was trained with a different model ({', '.join(changed)}); "
                             f"use a new run_root or restore the model settings")
    return meta


def with_skips(state: SamplerState, ranges) -> SamplerState:
    """The checkpoint's data position plus the skip-ahead ranges of the spec (set by the recovery flow)."""
    merged = sorted({(int(a), int(b)) for a, b in [*state.skipped, *ranges]})
    return SamplerState(state.consumed_samples, merged, state.order, state.decay_from)
