"""Learning-rate schedules as pure functions of the step."""
from __future__ import annotations

import math


def cosine_lr(step: int, *, lr: float, min_lr: float, warmup: int, total: int) -> float:
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def decay_start(total: int, decay_frac: float, decay_steps: int | None = None) -> int:
    """The first step of warmup-stable-decay's decay (the last `decay_steps`, else the last `decay_frac` of the
    steps): the data mixture's decay phase starts there too."""
    return max(0, total - decay_steps) if decay_steps is not None else int(total * (1 - decay_frac))


def wsd_lr(step: int, *, lr: float, min_lr: float, warmup: int, total: int, decay_frac: float = 0.2,
           decay_steps: int | None = None) -> float:
    """Warmup-stable-decay: linear warmup, constant, linear decay over the last decay_frac (or decay_steps)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    first_decay = decay_start(total, decay_frac, decay_steps)
    if step < first_decay:
        return lr
    progress = min(1.0, (step - first_decay) / max(1, total - first_decay))
    return lr - (lr - min_lr) * progress
