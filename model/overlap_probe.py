"""How much of an asynchronous collective hides behind computation on these ranks: measured, not assumed.

ZeRO-3 gathers parameters with asynchronous all-gathers, prefetched while the
forward and backward go on, on every backend (NCCL on its own stream, gloo on a
thread of its own). How much of that traffic the step then waits for depends on
the ranks: a GPU computes while its NIC moves bytes; a CPU rank's gloo thread
shares the cores with the computation, and the faster the link, the more of a
collective is that thread's work rather than waiting on the wire. So the probe
times, on the ranks themselves, a gather alone, a matrix-multiply loop of about
the same length alone, and both at once: what the pair saves against running
one after the other, over the shorter of the two, is the share that hides.
"""
from __future__ import annotations

import statistics
import time
from typing import Callable

import torch

from model.comm import Comm

MATMUL_SIDE = 512
REPEATS = 3
MAX_BYTES = 64 * 2**20  # ZeRO-3 gathers a bucket at a time; a whole 3B model's worth would crowd a GPU in preflight


def _timed(comm: Comm, block: Callable[[], None]) -> float:
    """Wall time of the block on this rank, the ranks starting together; the median of REPEATS."""
    times = []
    for _ in range(REPEATS):
        comm.barrier()
        start = time.perf_counter()
        block()
        if comm.device.type == "cuda":
            torch.cuda.synchronize(comm.device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def hidden_share(alone_a: float, alone_b: float, together: float) -> float:
    """The share of the shorter of two activities that ran inside the other when both ran at once."""
    shorter = min(alone_a, alone_b)
    if shorter <= 0:
        return 0.0
    return min(1.0, max(0.0, (alone_a + alone_b - together) / shorter))


def async_overlap(comm: Comm, nbytes: int) -> float:
    """The share of an asynchronous all-gather of `nbytes` (the whole gathered tensor, at most MAX_BYTES) that ran
    hidden behind computation on this rank; the smallest over the ranks, since the slowest rank sets the step."""
    if comm.world <= 1:
        return 0.0
    shard = torch.zeros(max(1, min(nbytes, MAX_BYTES) // 4 // comm.world), dtype=torch.float32, device=comm.device)
    a = torch.randn(MATMUL_SIDE, MATMUL_SIDE, device=comm.device)

    def gather():
        _, handle = comm.all_gather_async(shard)
        handle.wait()

    one_matmul = _timed(comm, lambda: a @ a)
    gather_s = _timed(comm, gather)
    rounds = max(1, round(gather_s / max(one_matmul, 1e-6)))

    def compute():
        for _ in range(rounds):
            a @ a

    def both():
        _, handle = comm.all_gather_async(shard)
        compute()
        handle.wait()

    compute_s = _timed(comm, compute)
    share = hidden_share(gather_s, compute_s, _timed(comm, both))
    return comm.agree([share], "min")[0]
