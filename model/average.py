"""The mean of several checkpoints' weights: checkpoint averaging (OLMo 2 averages the weights of its anneals).

States stream in one at a time and are summed in float64, so N inputs cost the memory of two models and the mean
does not depend on their order beyond float64 rounding.
"""
from __future__ import annotations

from typing import Iterable

import torch


def mean_state(states: Iterable[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The element-wise mean (float32) of model states with the same names and shapes; ValueError naming the first
    difference otherwise."""
    total: dict[str, torch.Tensor] | None = None
    count = 0
    for k, state in enumerate(states):
        if total is None:
            total = {name: t.detach().to(torch.float64).clone() for name, t in state.items()}
        else:
            check_same_layout(total, state, k)
            for name, t in state.items():
                total[name] += t.detach().to(torch.float64)
        count += 1
    if total is None:
        raise ValueError("nothing to average: no model states given")
    return {name: (t / count).to(torch.float32) for name, t in total.items()}


def check_same_layout(first: dict[str, torch.Tensor], other: dict[str, torch.Tensor], index: int) -> None:
    missing, extra = sorted(first.keys() - other.keys()), sorted(other.keys() - first.keys())
    if missing or extra:
        raise ValueError(f"input {index} has other weights than input 0 (missing {missing[:3]}, extra {extra[:3]}): "
                         f"only checkpoints of the same model architecture can be averaged")
    for name, t in other.items():
        if t.shape != first[name].shape:
            raise ValueError(f"input {index}'s {name} is {tuple(t.shape)}, input 0's {tuple(first[name].shape)}: "
                             f"only checkpoints of the same model architecture can be averaged")
