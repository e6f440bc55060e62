"""Which AdamW implementation DeepSpeed builds, decided on the rank, where DeepSpeed is installed.

DeepSpeed's default for "AdamW" on GPUs is its FusedAdam, a CUDA op that a
pip-installed DeepSpeed compiles on first use (nvcc, ninja and matching CUDA
headers on every node, a minute or two, and a lock in ~/.cache/torch_extensions
that a killed rank can leave behind). torch's own AdamW has a fused CUDA kernel
that needs no compiler and runs as fast, so it is the default unless a prebuilt
FusedAdam is installed (DS_BUILD_FUSED_ADAM=1 at install time).
"""
from __future__ import annotations

import copy
from typing import Literal

Choice = Literal["auto", "torch_fused", "deepspeed_fused"]


def fused_adam_prebuilt() -> bool:
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("fused_adam"))


def with_optimizer(ds_config: dict, choice: Choice, accelerator: str, prebuilt: bool | None = None) -> tuple[dict, str]:
    """The DeepSpeed config with its AdamW pinned to one implementation, and a line that says which."""
    cfg = copy.deepcopy(ds_config)
    params = cfg["optimizer"]["params"]
    if accelerator == "cpu":
        params["torch_adam"] = True  # DeepSpeed's CPU Adam is a compiled op too
        return cfg, "torch AdamW (CPU)"
    if prebuilt is None:
        prebuilt = fused_adam_prebuilt()
    if choice == "deepspeed_fused" or (choice == "auto" and prebuilt):
        return cfg, "DeepSpeed FusedAdam (" + ("prebuilt" if prebuilt else "JIT-compiled with nvcc on first use") + ")"
    params.update(torch_adam=True, fused=True)
    return cfg, "torch AdamW, fused CUDA kernel (no compiler needed)"
