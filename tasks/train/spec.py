"""The config, turned once into what the training program reads: the typed spec and the DeepSpeed config."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from model.anomaly import DetectorSettings
from model.data import read_manifest
from model.llama import ModelArgs
from model.protocol import SPEC_FILE
from model.redact import redact_url
from model.schedule import decay_start
from model.spec import DataSpec, Overrides, Spec, TrainSpec, picked
from pretrain.config import ModelConfig, TrainConfig
from tasks.common.outputs import read_json, require_complete


def deepspeed_config(t: TrainConfig) -> dict:
    opt = t.optimizer
    cfg = {
        "train_micro_batch_size_per_gpu": t.batch.micro_batch_size,
        "gradient_accumulation_steps": t.batch.grad_accum,
        "gradient_clipping": opt.grad_clip,
        "optimizer": {"type": "AdamW", "params": {"lr": opt.lr, "betas": [0.9, 0.95], "eps": 1e-8,
                                                  "weight_decay": opt.weight_decay}},
        "zero_optimization": zero_settings(t),
        "bf16": {"enabled": t.compute.precision == "bf16"},
        "steps_per_print": 10**9,  # the program prints its own progress
        "wall_clock_breakdown": False,
    }
    if t.cluster.accelerator == "cpu":
        cfg["zero_allow_untested_optimizer"] = True
    return cfg  # which AdamW implementation is decided on the ranks (model/optimizer.py), where DeepSpeed runs


def zero_settings(t: TrainConfig) -> dict:
    """The ZeRO section of a settled config (no `auto` left: tasks/train/comm_plan.py settles them)."""
    c = t.cluster
    if "auto" in (c.zero_stage, t.batch.grad_accum, c.bucket_size):
        raise ValueError("train settings still hold `auto`; settle them with tasks.train.comm_plan.plan_launch first")
    zero = {"stage": c.zero_stage, "reduce_bucket_size": c.bucket_size, "allgather_bucket_size": c.bucket_size,
            "overlap_comm": c.overlap_comm}  # on gloo it saves nothing, but reduces in the hooks as on GPUs
    if c.zero_stage == 3:
        zero["stage3_prefetch_bucket_size"] = c.bucket_size
    return zero


def model_args(m: ModelConfig, tokenizer_report: dict) -> ModelArgs:
    return picked(ModelArgs, m, vocab_size=tokenizer_report["embedding_rows"])


def data_spec(t: TrainConfig, tokens_dir: Path) -> DataSpec:
    mixture, opt = t.data.mixture, t.optimizer
    decay = mixture.decay_weights if mixture else None
    return picked(DataSpec, SimpleNamespace(**t.flat()), tokens_dir=str(tokens_dir), data_order=t.data.order,
                  pool_by=mixture.by if mixture else "all", weights=dict(mixture.weights) if mixture else None,
                  decay_weights=dict(decay) if decay else None,
                  decay_step=decay_start(t.steps, opt.decay_frac, opt.decay_steps) if decay else None)


def train_spec(t: TrainConfig) -> TrainSpec:
    # the ranks get URL passwords from the secrets file, not from the spec
    mirror = t.checkpoint.mirror_url
    return picked(TrainSpec, SimpleNamespace(**t.flat()), keep_abandoned=t.recovery.keep_abandoned,
                  optimizer=t.optimizer.implementation, mirror_url=redact_url(mirror) if mirror else None)


def detector_settings(t: TrainConfig) -> DetectorSettings | None:
    return picked(DetectorSettings, t.anomaly) if t.anomaly.enabled else None


def build_spec(model: ModelConfig, train: TrainConfig, tokenizer_dir: Path, tokens_dir: Path, out_dir: Path,
               overrides: Overrides = Overrides(), comm_prediction: dict | None = None) -> Spec:
    require_complete(tokens_dir, "tokenize")
    require_complete(tokenizer_dir, "tokenizer")
    return Spec(model_args(model, read_json(tokenizer_dir / "report.json")), train_spec(train),
                data_spec(train, tokens_dir), detector_settings(train), overrides, deepspeed_config(train),
                out_dir, read_manifest(tokens_dir)["version"], comm_prediction)


def write_spec(model: ModelConfig, train: TrainConfig, tokenizer_dir: Path, tokens_dir: Path, out_dir: Path,
               overrides: Overrides = Overrides(), comm_prediction: dict | None = None) -> Path:
    spec = build_spec(model, train, tokenizer_dir, tokens_dir, out_dir, overrides, comm_prediction)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SPEC_FILE
    path.write_text(spec.to_json())
    return path
