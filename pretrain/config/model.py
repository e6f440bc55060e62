"""The model section: the Llama-style architecture."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pretrain.config.base import NO_EFFECT, Strict


class ModelConfig(Strict):
    preset: Literal["debug", "125m", "500m", "1.5b"] | None = Field(
        None, description="fill the architecture from a preset (pretrain/presets.py); fields given here override it", json_schema_extra=NO_EFFECT)
    dim: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0, description="grouped-query attention: key/value heads (divides n_heads)")
    ffn_hidden: int = Field(gt=0, description="SwiGLU hidden size")
    max_seq_len: int = Field(gt=0)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            from pretrain.presets import PRESETS

            if data["preset"] not in PRESETS:
                raise ValueError(f"model.preset={data['preset']!r} is not one of {sorted(PRESETS)}")
            data = {**PRESETS[data["preset"]], **data}
        return data

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim={self.dim} must be divisible by model.n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads={self.n_heads} must be divisible by model.n_kv_heads={self.n_kv_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("model.dim / model.n_heads must be even for RoPE")
        return self

