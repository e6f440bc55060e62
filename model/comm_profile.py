"""The share of step time spent in communication, from a few profiled training steps.

On clusters without NVLink communication can take more than half of each
step; above about two thirds, adding nodes buys little. GPU: the device time of
NCCL kernels; CPU: the time of gloo's collectives. Both against the wall time
of the profiled steps, the largest share over the ranks.

Overlap, the share of that communication hidden behind computation: on GPUs the
NCCL kernel time that ran while other kernels ran; on CPU ranks, where gloo
runs each collective inline, the collective time issued from gradient hooks
before the backward pass's last autograd node (where a GPU would run it beside
the rest of the backward; what DeepSpeed reduces in the last hook or after the
backward waits for nothing), which shows the schedule but saves no time there.
"""
from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import torch

from model.comm import Comm
from model.data import union_of as merged

PROFILE_FILE = "comm_profile.json"
BACKWARD_EVENT = "autograd::engine::evaluate_function"  # one per autograd node run; gradient hooks run inside
BACKWARD_MARK = "pretrain::backward"  # model/steps.py names each micro-step's backward (DeepSpeed's, epilogue too)
STEP_MARK = "pretrain::step"  # ... and each engine.step(): the optimizer's update at the boundary, nothing between


def comm_seconds(prof) -> float:
    total_us = 0.0
    for event in prof.key_averages():
        name = event.key.lower()
        if "nccl" in name and getattr(event, "device_time_total", 0):
            total_us += event.device_time_total
        elif name.startswith("gloo:"):
            total_us += event.cpu_time_total
    return total_us / 1e6


def covered(span: tuple[float, float], cover: list[tuple[float, float]]) -> float:
    """How much of `span` lies inside the merged spans `cover`."""
    return sum(max(0.0, min(span[1], e) - max(span[0], s)) for s, e in cover)


def backward_before_last_node(events: list) -> list[tuple[float, float]]:
    """Each marked backward from its start to the start of its last autograd node: what runs in there still has
    backward work after it."""
    nodes = [e.time_range for e in events if e.name.startswith(BACKWARD_EVENT)]
    spans = []
    for mark in (e.time_range for e in events if e.name == BACKWARD_MARK):
        starts = [n.start for n in nodes if mark.start <= n.start and n.end <= mark.end]
        if starts:
            spans.append((mark.start, max(starts)))
    return merged(spans)


def optimizer_seconds(prof) -> float:
    """Time in the marked engine.step() calls outside any collective: the optimizer's update, paid once a step
    whatever the accumulation (counted as compute of the samples, it made every accumulating layout look slower)."""
    events = [e for e in prof.events() if e.time_range.end > e.time_range.start]
    comm = merged([(e.time_range.start, e.time_range.end) for e in events
                   if e.name.startswith("gloo:") or "nccl" in e.name.lower()])
    spans = merged([(e.time_range.start, e.time_range.end) for e in events if e.name == STEP_MARK])
    return sum(e - s - covered((s, e), comm) for s, e in spans) / 1e6


def overlapped_seconds(prof) -> tuple[float, float]:
    """(communication seconds, of which overlapped) of a profile; see the module's docstring for what overlapped
    means on each backend."""
    events = [e for e in prof.events() if e.time_range.end > e.time_range.start]
    on_device = [e for e in events if e.device_type.name != "CPU"]
    nccl = [e for e in on_device if "nccl" in e.name.lower()]
    if nccl:
        comm, busy = nccl, [e for e in on_device if "nccl" not in e.name.lower()]
        cover = merged([(e.time_range.start, e.time_range.end) for e in busy])
    else:
        comm, cover = [e for e in events if e.name.startswith("gloo:")], backward_before_last_node(events)
    spans = merged([(e.time_range.start, e.time_range.end) for e in comm])  # nested collectives count once
    total = sum(e - s for s, e in spans)
    return total / 1e6, sum(covered(s, cover) for s in spans) / 1e6


def profile_steps(run_step: Callable[[], None], steps: int, out_dir: Path, comm: Comm, layout: dict | None = None) -> dict:
    """One warm-up step, then `steps` profiled ones, then `steps` timed without the profiler; rank 0 writes
    comm_profile.json, with the `layout` the steps ran in (samples per rank and step, parameters, ZeRO stage, ...):
    from these the communication plan gets the compute time of a sample and the bandwidth the collectives had. The
    unprofiled steps measure the profiler's own cost (it records every operator: on CPU ranks a fifth of a step
    was seen), which the plan takes out of its figures."""
    from torch.profiler import ProfilerActivity, profile

    run_step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        wall = timed_steps(run_step, steps)
    unprofiled = timed_steps(run_step, steps)
    local = torch.tensor([min(comm_seconds(prof) / wall, 1.0), wall, *overlapped_seconds(prof),
                          min(optimizer_seconds(prof) / wall, 1.0)])
    shares = [s.tolist() for s in comm.all_gather(local)]
    comm_total, overlapped = sum(s[2] for s in shares), sum(s[3] for s in shares)
    result = {"comm_share": max(s[0] for s in shares), "per_rank_share": [round(s[0], 4) for s in shares],
              "optimizer_share": max(s[4] for s in shares),
              "comm_overlap_share": overlapped / comm_total if comm_total else 0.0, "wall_s": wall, "steps": steps,
              "unprofiled_wall_s": comm.agree([unprofiled], "max")[0], "world_size": comm.world, "backend": comm.backend, **(layout or {})}
    if comm.rank == 0:
        (Path(out_dir) / PROFILE_FILE).write_text(json.dumps(result, indent=2))
    return result


def timed_steps(run_step: Callable[[], None], steps: int) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        run_step()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


@contextmanager
def probed(active: bool) -> Iterator[dict]:
    """Profile the block when `active`: afterwards the dict holds this rank's communication seconds and the
    block's wall time (the training loop measures one step in train.watch.comm_profile_every this way)."""
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
    found.update(comm_s=comm_seconds(prof), wall_s=wall, overlap=overlapped_seconds(prof))


def step_comm_figures(found: dict, comm: Comm, prediction: dict | None) -> dict:
    """The slowest rank's communication time and share of the probed step, next to the plan's prediction.
    Every rank calls this for the same step (it agrees over them)."""
    comm_s, wall = comm.agree([found["comm_s"], found["wall_s"]], "max")
    comm_total, overlapped = comm.agree(found["overlap"])
    figures = {"comm_s": comm_s, "comm_share": min(comm_s / wall, 1.0) if wall else 0.0,
               "comm_overlap_share": overlapped / comm_total if comm_total else 0.0}
    if prediction:
        figures.update(predicted_comm_s=prediction["comm_s"], predicted_comm_share=prediction["comm_share"],
                       predicted_step_s=prediction["step_s"])
    return figures
