"""The share of step time spent in communication, from a few profiled training steps.

On clusters without NVLink communication can take more than half of each
step; above about two thirds, adding nodes buys little. GPU: the device time of
NCCL kernels; CPU: the time of gloo's collectives. Both against the wall time
of the profiled steps, the largest share over the ranks.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

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


def profile_steps(run_step: Callable[[], None], steps: int, out_dir: Path, comm: Comm, layout: dict | None = None) -> dict:
    """One warm-up step, then `steps` profiled ones; rank 0 writes comm_profile.json, with the `layout` the steps ran
    in (samples per rank and step, parameters, ZeRO stage, ...): from these the communication plan gets the compute
    time of a sample and the bandwidth the collectives had."""
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
              "wall_s": wall, "steps": steps, "world_size": comm.world, "backend": comm.backend, **(layout or {})}
    if comm.rank == 0:
        (Path(out_dir) / PROFILE_FILE).write_text(json.dumps(result, indent=2))
    return result


@contextmanager
def probed(active: bool) -> Iterator[dict]:
    """Profile the block when `active`: afterwards the dict holds this rank's communication seconds and the
    block's wall time (the training loop measures one step in train.comm_profile_every this way)."""
    found: dict = {}
    if not active:
        yield found
        return
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        yield found
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        wall = time.perf_counter() - start
    found.update(comm_s=comm_seconds(prof), wall_s=wall)


def step_comm_figures(found: dict, comm: Comm, prediction: dict | None) -> dict:
    """The slowest rank's communication time and share of the probed step, next to the plan's prediction.
    Every rank calls this for the same step (it agrees over them)."""
    comm_s, wall = comm.agree([found["comm_s"], found["wall_s"]], "max")
    figures = {"comm_s": comm_s, "comm_share": min(comm_s / wall, 1.0) if wall else 0.0}
    if prediction:
        figures.update(predicted_comm_s=prediction["comm_s"], predicted_comm_share=prediction["comm_share"],
                       predicted_step_s=prediction["step_s"])
    return figures
