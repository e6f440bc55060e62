"""The share of step time spent in communication, from a few profiled training steps.

On clusters without NVLink communication can take more than half of each
step; above about two thirds, adding nodes buys little. GPU: the device time of
NCCL kernels; CPU: the time of gloo's collectives. Both against the wall time
of the profiled steps, the largest share over the ranks.
"""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Callable

import torch

from model.comm import Comm

PROFILE_FILE = "comm_profile.json"


def comm_seconds(prof) -> float:
    total_us = 0.0
    for event in prof.key_averages():
        name = event.key.lower()
        if "nccl" in name and getattr(event, "device_time_total", 0):
            total_us += event.device_time_total
        elif name.startswith("gloo:"):
            total_us += event.cpu_time_total
    return total_us / 1e6


def profile_steps(run_step: Callable[[], None], steps: int, out_dir: Path, comm: Comm) -> dict:
    """One warm-up step, then `steps` profiled ones; rank 0 writes comm_profile.json."""
    from torch.profiler import ProfilerActivity, profile

    run_step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            run_step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    local = torch.tensor([min(comm_seconds(prof) / wall, 1.0), wall])
    shares = [s.tolist() for s in comm.all_gather(local)]
    result = {"comm_share": max(s[0] for s in shares), "per_rank_share": [round(s[0], 4) for s in shares],
              "wall_s": wall, "steps": steps, "world_size": comm.world, "backend": comm.backend}
    if comm.rank == 0:
        (Path(out_dir) / PROFILE_FILE).write_text(json.dumps(result, indent=2))
    return result
