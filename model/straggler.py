"""Which rank is slow: each rank's own time per step, compared across ranks where the step's figures meet.

In synchronous data parallel training every rank's step takes as long as the
slowest one's, so wall time names no one. What differs is the part of the step
no rank waits for another in: reading its batch and its forward passes
(the backward and optimizer step hold the gradient collectives, where the fast
ranks wait). With ZeRO-3 the forward gathers parameters, so waits leak in.
On a GPU the forward is timed with CUDA events, read only on steps whose
figures go to the host anyway (model/steps.py). Reading them waits for the
last forward to end, just before the step's agreement is queued: a host wait
on those steps, not a GPU bubble (the backward and optimizer step are queued
by then), and none on the others.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch


@dataclass
class LocalTime:
    """One step's own time on this rank: host seconds reading data, plus forward intervals (host or CUDA)."""
    data_s: float = 0.0
    forward: list = field(default_factory=list)  # (start, end): perf_counter floats, or CUDA events

    def span(self, device: torch.device):
        if device.type == "cuda":
            return _CudaSpan(self)
        return _HostSpan(self)

    def seconds(self) -> float:
        total = self.data_s
        for start, end in self.forward:
            if isinstance(start, float):
                total += end - start
            else:
                end.synchronize()  # the host waits for the forward's end; the GPU has the backward queued
                total += start.elapsed_time(end) / 1000
        return total


class _HostSpan:
    def __init__(self, owner: LocalTime):
        self.owner = owner

    def __enter__(self):
        self.start = time.perf_counter()

    def __exit__(self, *exc):
        self.owner.forward.append((self.start, time.perf_counter()))


class _CudaSpan:
    def __init__(self, owner: LocalTime):
        self.owner = owner

    def __enter__(self):
        self.start = torch.cuda.Event(enable_timing=True)
        self.start.record()

    def __exit__(self, *exc):
        end = torch.cuda.Event(enable_timing=True)
        end.record()
        self.owner.forward.append((self.start, end))


class StragglerWatch:
    """Names a rank whose own time stays above `ratio` x the median of all ranks for `consecutive` reports in a
    row (a report per logged step); once per streak."""

    def __init__(self, ratio: float, consecutive: int):
        self.ratio, self.consecutive = ratio, consecutive
        self.streak: dict[int, int] = {}

    def observe(self, step: int, rank_seconds: list[float]) -> list[dict]:
        median = statistics.median(rank_seconds)
        found = []
        for rank, seconds in enumerate(rank_seconds):
            if median > 0 and seconds > self.ratio * median:
                self.streak[rank] = self.streak.get(rank, 0) + 1
            else:
                self.streak.pop(rank, None)
            if self.streak.get(rank) == self.consecutive:
                found.append({"event": "straggler", "step": step, "rank": rank, "own_s": round(seconds, 4),
                              "median_own_s": round(median, 4), "ratio": round(seconds / median, 2),
                              "reports": self.consecutive})
        return found


def rank_figures(rank_seconds: list[float]) -> dict:
    """What the metrics line carries: every rank's own time, and the slowest against the median."""
    median = statistics.median(rank_seconds)
    slowest = max(range(len(rank_seconds)), key=rank_seconds.__getitem__)
    return {"rank_own_s": [round(s, 5) for s in rank_seconds], "own_s_median": median,
            "own_s_slowest": rank_seconds[slowest], "own_s_slowest_rank": slowest}
