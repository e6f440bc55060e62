"""The ground of every config section: strict frozen models, the NO_EFFECT mark, shared helpers."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, model_validator




MAX_VOCAB = 1_000_000  # beyond any tokenizer trained in practice (256k is large); far beyond, the trainer aborts
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# A setting that never changes what its stage produces (where or how fast it runs, how it is watched, what it
# logs): left out of the stage's version (tasks/versions.py), so changing it reruns nothing. Every other
# field counts. tests/tasks/test_versions.py lists the fields so marked; a new one is a deliberate choice.
NO_EFFECT = {"changes_result": False}


def embedding_rows(n_tokens: int, multiple: int) -> int:
    """The model's embedding rows for a vocabulary of n_tokens (learned + reserved), rounded up to `multiple`."""
    return -(-n_tokens // multiple) * multiple


def changes_result(field_info) -> bool:
    """Whether a config field (a pydantic FieldInfo) counts for its stage's version: all but those marked NO_EFFECT."""
    extra = field_info.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("changes_result") is False)


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says what to fix."""


def problem_of(error: dict) -> str:
    """What one pydantic error says, in the words a config's reader needs (the key's place is said apart)."""
    if error["type"] == "extra_forbidden":
        return "unknown key; remove it or check its spelling"
    if error["type"] == "missing":
        return "required key is missing"
    return error["msg"].removeprefix("Value error, ")


class Strict(BaseModel):
    # inf / nan are refused in every float field (a learning rate of .inf validated before)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, data):
        """YAML's `true` is not a number: `steps: true` would otherwise train 1 step."""
        if isinstance(data, dict):
            bad = [k for k, v in data.items() if isinstance(v, bool) and k in cls.model_fields
                   and _is_number(cls.model_fields[k].annotation)]
            if bad:
                raise ValueError(f"{', '.join(bad)}: a number is required, got true/false")
        return data


def _is_number(annotation) -> bool:
    args = getattr(annotation, "__args__", None)
    if args and type(None) in args:  # int | None, float | None
        return any(_is_number(a) for a in args if a is not type(None))
    return annotation in (int, float)

