"""Learning-rate schedules as pure functions of the step."""
from __future__ import annotations

import math


def cosine_lr(step: int, *, lr: float, min_lr: float, warmup: int, total: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def wsd_lr(step: int, *, lr: float, min_lr: float, warmup: int, total: int, decay_frac: float = 0.2) -> float:
    """Warmup-stable-decay: linear warmup, constant, linear decay over the last decay_frac."""
    if step < warmup:
        return lr * (step + 1) / warmup
    decay_start = int(total * (1 - decay_frac))
    if step < decay_start:
        return lr
    progress = min(1.0, (step - decay_start) / max(1, total - decay_start))
    return lr - (lr - min_lr) * progress
