"""The pipeline configuration: strict, frozen pydantic models loaded from YAML, one module per section.

Every stage reads only its own section. The same models are the Prefect flow
parameters, so the UI renders them as forms. An unknown key, a wrong type or a
bad value is an error that names the key; all problems are reported at once.
Import from here (`from pretrain.config import TrainConfig`); the modules are
base (Strict, NO_EFFECT), clean, tokens (tokenizer and tokenize), preflight,
model, train, evaluation (eval and scaling) and pipeline (the whole config,
loading and checking it).
"""
from pretrain.config.base import (  # noqa: F401
    MAX_VOCAB, SAFE_NAME, NO_EFFECT, embedding_rows, changes_result, ConfigError, Strict)
from pretrain.config.clean import (  # noqa: F401
    SourceConfig, RuleMode, MODE_DOC, NormalizeConfig, LengthSettings, GarbageSettings, GopherQualitySettings,
    GopherRepetitionSettings, C4Settings, FineWebSettings, ChineseSettings, CodeSettings, DirtySettings, EvalSet,
    DecontamSettings, RulesConfig, DedupConfig, ExecutorConfig, CleanConfig)
from pretrain.config.tokens import (  # noqa: F401
    PruneConfig, TokenizerConfig, TokenizeConfig)
from pretrain.config.preflight import (  # noqa: F401
    PreflightConfig)
from pretrain.config.model import (  # noqa: F401
    ModelConfig)
from pretrain.config.train import (  # noqa: F401
    HOST_NAME, check_host, HostConfig, MixtureConfig, AnomalyConfig, RecoveryConfig, mirror_target, BatchConfig,
    OptimizerConfig, ComputeConfig, ClusterConfig, CheckpointConfig, WatchConfig, TrainDataConfig, TrainConfig,
    SECTION_OF, nested_train, merged_train, MOVED_KEYS, moved_key_hint)
from pretrain.config.evaluation import (  # noqa: F401
    LmEvalConfig, EvalConfig, ScalingConfig)
from pretrain.config.pipeline import (  # noqa: F401
    TrackingConfig, PipelineConfig, SECTIONS_NEEDED, parse_config, UniqueKeyLoader, load_config, resolve_config)
