"""Checkpoint files are unpickled with torch's weights-only loader: a tampered file on shared storage runs no code.

Our own loads pass weights_only=True. DeepSpeed's (resume, merging ZeRO
partitions for the export) pass weights_only=False; TORCH_FORCE_WEIGHTS_ONLY_LOAD
makes them safe as well, with the three DeepSpeed classes its checkpoints hold
allowed. The three were found by loading checkpoints of every ZeRO stage in fp32
and bf16 (tests/model/test_safe_load.py keeps that true).
"""
from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from typing import Iterator

import torch

FORCE = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
DEEPSPEED_CHECKPOINT_CLASSES = ("deepspeed.runtime.fp16.loss_scaler.LossScaler",
                                "deepspeed.runtime.zero.config.ZeroStageEnum",
                                "deepspeed.utils.tensor_fragment.fragment_address")


def allow_deepspeed_classes() -> None:
    """Let the weights-only loader rebuild the plain DeepSpeed objects its checkpoints hold (no code of theirs runs)."""
    classes = []
    for dotted in DEEPSPEED_CHECKPOINT_CLASSES:
        module, name = dotted.rsplit(".", 1)
        try:
            classes.append(getattr(importlib.import_module(module), name))
        except (ImportError, AttributeError):
            continue  # DeepSpeed absent or renamed: its checkpoints then fail to load, loudly, not unsafely
    torch.serialization.add_safe_globals(classes)


def force_weights_only() -> None:
    """For the rest of this process (the training program): every torch.load is weights-only."""
    os.environ[FORCE] = "1"
    allow_deepspeed_classes()


@contextmanager
def weights_only_loads() -> Iterator[None]:
    """Within: every torch.load is weights-only, DeepSpeed's included (for a process that does more than load)."""
    previous = os.environ.get(FORCE)
    force_weights_only()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(FORCE, None)
        else:
            os.environ[FORCE] = previous
