"""Decay branches: an anneal from any complete stable-phase checkpoint of a run, in a folder of its own.

As OLMo-core's anneals: the branch starts at the checkpoint's step with its
weights, optimizer state and data position, at the learning rate the run had
there, and decays it linearly to `min_lr` over the tokens asked for, drawing the
decay's mix from its first step. The run's own files are never written: the
branch links the checkpoint's files into <run_root>/anneal/<name>/checkpoints
and trains there, so several branches can start from one run, while it trains.
"""
from __future__ import annotations

import math
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from model import checkpoint as ckpt
from model.schedule import decay_start
from model.steps import lr_at
from pretrain.config import PipelineConfig, TrainConfig
from tasks.common.outputs import read_json, write_json
from tasks.train.spec import train_spec

ANNEAL_DIR = "anneal"
BRANCH_FILE = "branch.json"


def parse_mix(text: str | None) -> dict[str, float] | None:
    """`zh=0.3,en=0.5,code=0.2` -> shares; ValueError naming the part that is not `pool=number`."""
    if not text:
        return None
    mix = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            mix[name.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"--mix part {part!r} is not pool=share; write e.g. zh=0.3,en=0.5,code=0.2") from None
    return mix


def branch_dir(cfg: PipelineConfig, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"branch name {name!r} must be a plain folder name")
    return cfg.run_root_path() / ANNEAL_DIR / name


def branch_settings(cfg: PipelineConfig, tag: str, tokens: int, mix: dict[str, float] | None, min_lr: float
                    ) -> tuple[TrainConfig, dict]:
    """The branch's train settings and what it branches from; ValueError when the checkpoint is in the run's own
    decay or a mix names no pools."""
    t = cfg.train
    ckpt_dir = cfg.run_root_path() / "train" / "checkpoints"
    tag = ckpt.complete_tag(ckpt_dir, tag)
    meta = ckpt.read_meta(ckpt_dir, tag)
    step, global_batch = meta["step"], meta["global_batch"]
    own_decay = decay_start(t.steps, t.optimizer.decay_frac, t.optimizer.decay_steps)
    if t.optimizer.schedule == "wsd" and step > own_decay:
        raise ValueError(f"{ckpt_dir / tag} (step {step}) is inside the run's own decay; branch from a stable-phase "
                         f"checkpoint (step <= {own_decay})")
    if mix and t.data.mixture is None:
        raise ValueError("--mix names pools of the run's mixture, and this run has none; set train.data.mixture "
                         "(by: channel or source, its weights) in the config, or anneal on the run's own data")
    steps = max(1, math.ceil(tokens / (global_batch * t.batch.seq_len)))
    lr = lr_at(step, train_spec(t))  # where the run was: cosine or wsd, warmup included
    mixture = t.data.mixture.model_copy(update={"decay_weights": mix}) if mix else t.data.mixture
    settings = t.changed(steps=step + steps, schedule="wsd", decay_steps=steps, lr=lr, min_lr=min_lr, warmup_steps=0,
                         mixture=mixture, resume_tag=None, mirror_url=None)  # the branch's newest
    settings = TrainConfig.model_validate(settings.model_dump())  # the run's own checks, on the branch's values
    source = {"run_root": str(cfg.run_root_path()), "checkpoint": str(ckpt_dir / tag), "tag": tag, "step": step,
              "tokens": steps * global_batch * t.batch.seq_len, "steps": steps, "lr": lr, "min_lr": min_lr, "mix": mix}
    return settings, source


def link_checkpoint(source: Path, into: Path) -> None:
    """The checkpoint's files in the branch, as hard links (no copy on one file system; the run's files are only
    read), else copies."""
    for path in sorted(source.rglob("*")):
        target = into / path.relative_to(source)
        if path.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)


def prepare_branch(cfg: PipelineConfig, name: str, tag: str | None, tokens: int, mix: dict[str, float] | None,
                   min_lr: float = 0.0) -> tuple[TrainConfig, Path, dict]:
    """The branch folder with the checkpoint linked in (once: a retried branch resumes from its own checkpoints)."""
    out = branch_dir(cfg, name)
    settings, source = branch_settings(cfg, tag, tokens, mix, min_lr)
    recorded = out / BRANCH_FILE
    if recorded.is_file():
        before = read_json(recorded)
        if before["source"] != source:
            raise ValueError(f"branch {name!r} exists from {before['source']['checkpoint']} with other settings; "
                             f"name the new branch differently")
    else:
        link_checkpoint(Path(source["checkpoint"]), out / "checkpoints" / source["tag"])
        write_json(recorded, {"name": name, "source": source, "train": asdict(train_spec(settings))})
    return settings, out, source


def run_anneal(cfg: PipelineConfig, name: str, tag: str | None, tokens: int, mix: dict[str, float] | None,
               min_lr: float = 0.0, env: dict[str, str] | None = None, log_line=print) -> dict:
    """Train the branch, export its last checkpoint, and score it on the run's held-out samples."""
    from model.checkpoint_eval import evaluate_checkpoint
    from tasks.eval.task_files import score_task_files
    from tasks.train.export import export_run_checkpoint
    from tasks.train.run import run_train

    root = cfg.run_root_path()
    settings, out, source = prepare_branch(cfg, name, tag, tokens, mix, min_lr)
    trained = run_train(cfg.model, settings, root / "tokenizer", root / "tokens", out, env or {}, log_line)
    final = trained["latest_checkpoint"]
    exported = export_run_checkpoint(out, root / "tokenizer", out / "hf" / final, final)
    scores = evaluate_checkpoint(out, final, cfg.eval.device, cfg.eval.batch_size,
                                 cfg.eval.max_samples_per_channel) if settings.data.eval_samples_per_channel else None
    if scores is not None and cfg.eval.task_files:
        scores["tasks"] = score_task_files(cfg, final, out)
    result = {"name": name, "source": source, "branch_dir": str(out), "final_checkpoint": str(out / "checkpoints" / final),
              "final_step": trained["latest_step"], "hf_export": exported["export_dir"], "eval": scores}
    write_json(out / "result.json", result)
    return result
