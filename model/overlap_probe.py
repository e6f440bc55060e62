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

DeepSpeed's gradient reductions (ZeRO-0/1/2) are synchronous on CPU ranks: each
bucket is all-reduced inline when the backward pass fills it. Yet on a shaped
link, eight buckets made ZeRO-1 and ZeRO-2 steps up to 12% faster than one
(benchmarks/comm_plan.py at 2 Gbit/s): part of a synchronous reduction's time
still hides behind the compute around it (bytes in flight in the kernel's socket
buffers, a rank that arrives first already sending; which of these is not
established here). A second probe measures the share on the ranks, in
DeepSpeed's own pattern: compute, then reduce a bucket, bucket after bucket,
against the two done apart.
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


def _compute_rounds(comm: Comm, a: torch.Tensor, seconds: float) -> int:
    """Matrix multiplies of `a` that take about `seconds` on this rank."""
    return max(1, round(seconds / max(_timed(comm, lambda: a @ a), 1e-6)))


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

    gather_s = _timed(comm, gather)
    rounds = _compute_rounds(comm, a, gather_s)

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


def inline_reduce_overlap(comm: Comm, nbytes: int, buckets: int = 8) -> float:
    """The share of synchronous all-reduces of `nbytes` in `buckets` buckets that hid behind the computation between
    them, each bucket reduced after its share of the compute as the backward pass reduces gradients; the smallest
    over the ranks. 0 where the link is no slower than the copies (nothing waits on the wire to hide)."""
    if comm.world <= 1:
        return 0.0
    bucket = torch.zeros(max(1, min(nbytes, MAX_BYTES) // 4 // buckets), dtype=torch.float32, device=comm.device)
    a = torch.randn(MATMUL_SIDE, MATMUL_SIDE, device=comm.device)

    def reduce_all():
        for _ in range(buckets):
            comm.all_reduce(bucket)

    reduce_s = _timed(comm, reduce_all)
    rounds = _compute_rounds(comm, a, reduce_s / buckets)

    def compute(reduce: bool):
        for _ in range(buckets):
            for _ in range(rounds):
                a @ a
            if reduce:
                comm.all_reduce(bucket)

    compute_s = _timed(comm, lambda: compute(False))
    share = hidden_share(reduce_s, compute_s, _timed(comm, lambda: compute(True)))
    return comm.agree([share], "min")[0]
