"""The whole config: its sections, the ones each command needs, and loading it from YAML with every problem
named at once."""
from __future__ import annotations

import os
import re
from pathlib import Path

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from pretrain.config.base import SAFE_NAME, ConfigError, Strict, problem_of
from pretrain.config.clean import CleanConfig
from pretrain.config.evaluation import EvalConfig, ScalingConfig
from pretrain.config.model import ModelConfig
from pretrain.config.preflight import PreflightConfig
from pretrain.config.tokens import TokenizeConfig, TokenizerConfig
from pretrain.config.train import TrainConfig, moved_key_hint
from pretrain.stages import PIPELINE


class TrackingConfig(Strict):
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None: $MLFLOW_TRACKING_URI, else sqlite:///<run_root>/mlflow.db")
    experiment: str = "pretrain"


class PipelineConfig(Strict):
    name: str = Field(description="run name, shown in Prefect and MLflow and used in their queries and in file "
                      "names: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100")
    run_root: str = Field(description="directory every stage writes under; relative paths are taken from the working directory")
    clean: CleanConfig | None = Field(None, description="needed by the clean stage (and `run`)")
    tokenizer: TokenizerConfig = TokenizerConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    preflight: PreflightConfig = PreflightConfig()
    model: ModelConfig | None = Field(None, description="needed by the preflight, train and scaling stages")
    train: TrainConfig | None = Field(None, description="needed by the preflight, train and scaling stages")
    eval: EvalConfig = EvalConfig()
    scaling: ScalingConfig = ScalingConfig()
    tracking: TrackingConfig = TrackingConfig()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not re.fullmatch(SAFE_NAME, name):
            raise ValueError(f"{name!r} is not a safe run name (it goes into MLflow queries, Prefect keys and file "
                             f"names); use letters, digits, '.', '_' and '-', starting with a letter or digit")
        return name

    @model_validator(mode="after")
    def _seq_fits_model(self) -> "PipelineConfig":
        if self.train and self.model and self.train.batch.seq_len > self.model.max_seq_len:
            raise ValueError(f"train.batch.seq_len={self.train.batch.seq_len} exceeds model.max_seq_len="
                             f"{self.model.max_seq_len}; raise model.max_seq_len or lower train.batch.seq_len")
        return self

    def run_root_path(self) -> Path:
        return Path(os.path.expanduser(self.run_root)).resolve()

    def require(self, command: str) -> "PipelineConfig":
        """This config, if it has every section the command reads; a ConfigError naming the missing ones otherwise."""
        missing = [s for s in SECTIONS_NEEDED.get(command, ()) if getattr(self, s) is None]
        if missing:
            raise ConfigError(f"`{command}` needs the config section(s) {', '.join(missing)}, which this config "
                              f"does not have; add them (configs/tiny.yaml shows each)")
        return self


# The sections a command cannot run without; the others have defaults. Stages that need none of these
# (tokenizer, tokenize, eval) run from a config with name, run_root and their own section alone.
SECTIONS_NEEDED = {**{s.name: s.needs for s in PIPELINE if s.needs}, "run": ("clean", "model", "train"),
                   "anneal": ("model", "train"), "average": ("model", "train"), "scaling": ("model", "train")}


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        moved = moved_key_hint(e["loc"], e.get("input"))
        lines.append(f"  {where}: {moved or problem_of(e)}")
    return "\n".join(lines)


def parse_config(data: object, origin: str = "<config>") -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{origin}: {err.error_count()} problem(s):\n{_describe(err)}") from None


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; explicit keys may override it
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first on line {seen[key] + 1}); "
                    f"remove one of them", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


# YAML 1.2 booleans: only true/false. YAML 1.1 (PyYAML's default) also reads on/off/yes/no as booleans,
# so `mode: off` would arrive as False and be refused.
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                      list("tTfF"))


def load_config(path: str | os.PathLike) -> PipelineConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass --config with a YAML file such as configs/tiny.yaml")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(err, 'problem', err)}") from None
    return parse_config(data, str(path))


def resolve_config(config: PipelineConfig | str | dict, command: str | None = None) -> PipelineConfig:
    """Flow parameters may be a config, a dict from the UI form, or a YAML path; checked for what `command` needs."""
    if isinstance(config, PipelineConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = parse_config(config)
    else:
        cfg = load_config(config)
    return cfg.require(command) if command else cfg
