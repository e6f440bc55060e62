"""The pipeline configuration: strict, frozen pydantic models loaded from YAML.

Every stage reads only its own section. The same models are the Prefect flow
parameters, so the UI renders them as forms. An unknown key, a wrong type or a
bad value is an error that names the key; all problems are reported at once.
"""
from __future__ import annotations

import os
import sysconfig
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

Channel = Literal["zh", "en", "code"]


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says what to fix."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SourceConfig(Strict):
    """One input of the cleaning stage."""

    path: str = Field(description="fsspec URL or glob (local path, s3://..., memory://...). "
                      "'{stdlib}' expands to this Python's standard library directory.")
    format: Literal["auto", "jsonl", "jsonl.gz", "parquet", "text"] = Field(
        "auto", description="auto: from the file suffix (.jsonl, .jsonl.gz, .parquet, anything else is text)")
    text_field: str = Field("text", description="column/key holding the document text (jsonl, parquet)")
    id_field: str | None = Field(None, description="column/key holding a document id; None: file:row")
    text_unit: Literal["file", "line"] = Field("file", description="text files: one document per file or per line")
    channel_hint: Channel | None = Field(None, description="force this channel instead of detecting it")
    name: str | None = Field(None, description="source name used in stats and shard source ids; default: the path")

    def resolved_path(self) -> str:
        return self.path.replace("{stdlib}", sysconfig.get_paths()["stdlib"])

    @property
    def source_name(self) -> str:
        return self.name or self.path


class CleanConfig(Strict):
    sources: list[SourceConfig] = Field(min_length=1)
    min_chars: int = Field(40, ge=0, description="drop documents shorter than this after normalization")
    max_chars: int = Field(2_000_000, gt=0, description="drop documents longer than this")
    min_words_en: int = Field(8, ge=0, description="en: minimum number of words")
    max_symbol_ratio: float = Field(0.3, ge=0, le=1, description="max share of chars that are neither letters, digits, CJK, whitespace nor common punctuation")
    max_duplicate_line_ratio: float = Field(0.3, ge=0, le=1, description="max share of lines that repeat another line")
    min_cjk_ratio_zh: float = Field(0.3, ge=0, le=1, description="zh: minimum share of CJK characters")
    max_code_line_chars: int = Field(1000, gt=0, description="code: drop files whose longest line is longer (minified/generated)")
    lexicons: list[str] = Field(default_factory=list, description="extra dirty-word lists (one term per line), added to the built-in ones")
    max_lexicon_hits_per_kchar: float = Field(2.0, ge=0, description="drop a document with more dirty-term hits per 1000 chars")
    min_lexicon_hits: int = Field(2, ge=1, description="... and at least this many hits in all")
    batch_size: int = Field(2000, gt=0, description="documents per output batch")


class TokenizerConfig(Strict):
    vocab_size: int = Field(8000, ge=300, description="learned vocabulary incl. special tokens, excl. the reserved block")
    reserved_tokens: int = Field(64, ge=0, description="reserved special tokens kept free for later work")
    min_frequency: int = Field(2, ge=1)
    max_training_chars: int = Field(200_000_000, gt=0, description="cap on characters fed to the trainer")
    held_out_docs: int = Field(200, ge=1, description="documents per channel kept aside for the report")
    pad_to_multiple: int = Field(128, ge=1, description="model embedding rows = vocab + reserved, rounded up to this")


class TokenizeConfig(Strict):
    shard_max_tokens: int = Field(50_000_000, gt=0, description="start a new shard past this many tokens")
    batch_docs: int = Field(1000, gt=0, description="documents per encode_batch call")


class PreflightConfig(Strict):
    min_free_gb: float = Field(5.0, ge=0, description="fail when the run root has less free disk")
    allreduce_ranks: int = Field(2, ge=1, description="ranks of the all-reduce probe (gloo on CPU, nccl on GPU)")
    allreduce_mb: float = Field(8.0, gt=0, description="all-reduce probe message size in MiB")
    min_allreduce_gbps: float = Field(0.05, ge=0, description="fail below this bus bandwidth (GB/s)")
    nccl_tests_dir: str | None = Field(None, description="directory of nccl-tests binaries; None: search PATH")
    nvbandwidth_path: str | None = Field(None, description="nvbandwidth binary; None: search PATH")
    ignore_failures: bool = Field(False, description="train even when a check fails (recorded in the report)")


class ModelConfig(Strict):
    dim: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0, description="grouped-query attention: key/value heads (divides n_heads)")
    ffn_hidden: int = Field(gt=0, description="SwiGLU hidden size")
    max_seq_len: int = Field(gt=0)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim={self.dim} must be divisible by model.n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads={self.n_heads} must be divisible by model.n_kv_heads={self.n_kv_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("model.dim / model.n_heads must be even for RoPE")
        return self


class TrainConfig(Strict):
    seq_len: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0, description="samples per rank per micro step")
    grad_accum: int = Field(1, gt=0)
    steps: int = Field(gt=0, description="optimizer steps")
    lr: float = Field(3e-4, gt=0)
    min_lr: float = Field(3e-5, ge=0)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2, 3] = 1
    precision: Literal["fp32", "bf16"] = "bf16"
    activation_checkpointing: bool = False
    accelerator: Literal["cpu", "cuda"] = Field("cuda", description="cpu: DS_ACCELERATOR=cpu with gloo")
    num_gpus: int = Field(1, gt=0, description="ranks per node (CPU processes when accelerator=cpu)")
    hostfile: str | None = Field(None, description="DeepSpeed hostfile for multi-node runs; None: this node only")
    master_port: int | None = Field(None, gt=1024, lt=65536, description="rendezvous port; None: a free port on the launching node")
    save_every: int = Field(100, gt=0, description="checkpoint every N steps (and at the end)")
    log_every: int = Field(1, gt=0)
    seed: int = 1234
    timeout_minutes: float = Field(30.0, gt=0, description="collective timeout of the process group")

    @model_validator(mode="after")
    def _lr_order(self) -> "TrainConfig":
        if self.min_lr > self.lr:
            raise ValueError(f"train.min_lr={self.min_lr} is above train.lr={self.lr}; lower train.min_lr")
        return self


class TrackingConfig(Strict):
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None: $MLFLOW_TRACKING_URI, else sqlite:///<run_root>/mlflow.db")
    experiment: str = "pretrain"


class PipelineConfig(Strict):
    name: str = Field(description="run name, shown in Prefect and MLflow")
    run_root: str = Field(description="directory every stage writes under; relative paths are taken from the working directory")
    clean: CleanConfig
    tokenizer: TokenizerConfig = TokenizerConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    preflight: PreflightConfig = PreflightConfig()
    model: ModelConfig
    train: TrainConfig
    tracking: TrackingConfig = TrackingConfig()

    @model_validator(mode="after")
    def _seq_fits_model(self) -> "PipelineConfig":
        if self.train.seq_len > self.model.max_seq_len:
            raise ValueError(f"train.seq_len={self.train.seq_len} exceeds model.max_seq_len="
                             f"{self.model.max_seq_len}; raise model.max_seq_len or lower train.seq_len")
        return self

    def run_root_path(self) -> Path:
        return Path(os.path.expanduser(self.run_root)).resolve()


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key; remove it or check its spelling")
        elif e["type"] == "missing":
            lines.append(f"  {where}: required key is missing")
        else:
            lines.append(f"  {where}: {e['msg']}")
    return "\n".join(lines)


def parse_config(data: object, origin: str = "<config>") -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{origin}: {err.error_count()} problem(s):\n{_describe(err)}") from None


def load_config(path: str | os.PathLike) -> PipelineConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass --config with a YAML file such as configs/tiny.yaml")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(err, 'problem', err)}") from None
    return parse_config(data, str(path))


def resolve_config(config: PipelineConfig | str | dict) -> PipelineConfig:
    """Flow parameters may be a config, a dict from the UI form, or a YAML path."""
    if isinstance(config, PipelineConfig):
        return config
    if isinstance(config, dict):
        return parse_config(config)
    return load_config(config)
