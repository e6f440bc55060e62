"""What the training program reads, typed: built once from the config by the train stage, written to spec.json,
read back on every rank. Values come from the config; nothing here repeats one of its defaults.

Run-time overrides (skip ranges, a lowered learning rate, a profiling run) are not the user's settings: the
monitored training and preflight hand them to one launch as `Overrides`.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from model.anomaly import DetectorSettings
from model.llama import ModelArgs


@dataclass(frozen=True)
class DataSpec:
    """How sampler positions map to samples: every reader of positions (training, skip reports, eval) builds the
    dataset and sampler from this."""
    tokens_dir: str
    seq_len: int
    seed: int
    data_order: str                     # feistel | numpy_shuffle
    eval_samples_per_channel: int
    stage_data_dir: str | None          # node-local copy of the shards; None: read in place
    pool_by: str                        # all | channel | source
    weights: dict[str, float] | None    # the mixture's shares per pool; None: one pool
    decay_weights: dict[str, float] | None = None  # the shares from decay_step on; None: weights throughout
    decay_step: int | None = None       # the schedule's first decay step, when decay_weights are set


@dataclass(frozen=True)
class TrainSpec:
    """The step loop's settings."""
    steps: int
    micro_batch_size: int
    grad_accum: int
    lr: float
    min_lr: float
    warmup_steps: int
    schedule: str
    decay_frac: float
    decay_steps: int | None             # wsd: the decay's length in steps (anneal branches); None: decay_frac
    z_loss: float                       # weight of log(Z)^2 per token in the trained loss (0: off)
    log_every: int
    comm_profile_every: int
    eval_every: int
    save_every: int
    save_final: bool
    seed: int
    accelerator: str
    optimizer: str
    activation_checkpointing: bool
    compile: bool
    compile_backend: str
    sdpa_backend: str
    timeout_minutes: float
    hang_timeout_s: float | None
    slow_phase_timeout_s: float
    first_step_timeout_s: float
    straggler_ratio: float
    straggler_reports: int
    keep_last: int
    keep_every: int
    keep_abandoned: int
    resume_tag: str | None
    mirror_url: str | None              # without its password: the ranks read that from the secrets file
    peak_tflops_per_gpu: float | None


@dataclass(frozen=True)
class Overrides:
    """What one launch changes on top of the user's settings (the defaults: nothing)."""
    skip_ranges: tuple[tuple[int, int], ...] = ()   # sampler positions [start, end) never trained on
    lr_scale: float = 1.0                           # multiplies the schedule (lowered by escalation)
    profile_steps: int = 0                          # preflight: profile this many steps and stop, no checkpoint


@dataclass(frozen=True)
class Spec:
    model: ModelArgs
    train: TrainSpec
    data: DataSpec
    anomaly: DetectorSettings | None    # None: detection off
    overrides: Overrides
    deepspeed: dict
    out_dir: Path
    manifest_version: str
    comm_prediction: dict | None = None  # the communication plan's chosen row (tasks/train/comm_plan.py)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "out_dir": str(self.out_dir)}, indent=2)

    @classmethod
    def load(cls, path: Path) -> Spec:
        """A spec.json; KeyError or TypeError when it is not one this version wrote (the train stage rewrites it)."""
        raw = json.loads(Path(path).read_text())
        over = raw["overrides"]
        return cls(ModelArgs(**raw["model"]), TrainSpec(**raw["train"]), DataSpec(**raw["data"]),
                   DetectorSettings(**raw["anomaly"]) if raw["anomaly"] is not None else None,
                   Overrides(tuple(tuple(r) for r in over["skip_ranges"]), over["lr_scale"], over["profile_steps"]),
                   raw["deepspeed"], Path(raw["out_dir"]), raw["manifest_version"], raw.get("comm_prediction"))


def picked(cls, source, **given):
    """An instance of dataclass `cls` whose fields are read by name from `source` (a config section), except those
    `given`: settings are copied by their names, never by hand."""
    return cls(**{f.name: given[f.name] if f.name in given else getattr(source, f.name) for f in fields(cls)})
