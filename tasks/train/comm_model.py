"""Step time, communication share and memory per rank of a data-parallel layout, from measured bandwidth.

Traffic per optimizer step, model of P parameters of b bytes, G micro-steps, as
DeepSpeed 0.19 moves it (stage_1_and_2 with its default
use_multi_rank_bucket_allreduce, and stage3):
    ZeRO-0  all-reduce of the gradients once per step          2 P b
    ZeRO-1  all-reduce once, all-gather the updated weights    3 P b
    ZeRO-2  all-reduce every micro-step + all-gather           (2 G + 1) P b
    ZeRO-3  gather twice + reduce-scatter every micro-step     3 G P b
A ring moves (n-1)/n of those bytes over its slowest link, which is what
nccl-tests' bus bandwidth is measured against: time = bytes (n-1)/n / busbw,
plus a latency per collective (one per bucket). The ZeRO paper's 2 P b and
(G + 1) P b need the gradients reduce-scattered, not all-reduced: DeepSpeed
does that with use_multi_rank_bucket_allreduce off, as one reduce per rank's
partition, which on the shaped gloo test bed was slower (1.60 s against 1.36 s
a ZeRO-1 step at 200 Mbit/s), so the project keeps DeepSpeed's default.

Overlap: gradients are reduced bucket by bucket while the backward pass goes
on (overlap_comm). The last bucket can only start when the backward is done,
so a bucket at least as large as all gradients (DeepSpeed's default 5e8
elements against a 0.1-1B model) overlaps nothing. gloo on CPU ranks runs
DeepSpeed's gradient reductions inline, yet on a slow link part of each
bucket's time still hides behind the compute that follows it: preflight probes
that share in DeepSpeed's pattern (model/overlap_probe.py) and the model
credits it to all but the last bucket. ZeRO-3's parameter gathers are asynchronous even there (its
reduce-scatter is not): preflight's probe (model/overlap_probe.py) measures the
share of a gather that hides behind compute, and a short ZeRO-3 run measures
what ZeRO-3 costs a micro-step beyond its traffic (its hooks, a gather per
module), which the model adds to every ZeRO-3 layout.

Memory per rank (ZeRO paper, mixed precision with Adam): 2P weights, 2P
gradients, 12P fp32 master copy and moments (fp32 training: 4 + 4 + 8),
divided by n where the stage partitions them, plus the buckets and the
activations (34 s h L bytes a sample in bf16, Korthikanti et al. with
flash attention; 2 s h L bytes with activation checkpointing).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

BACKWARD_SHARE = 2 / 3          # of a micro-step's compute: the backward pass is about twice the forward
DEEPSPEED_BUCKET = 500_000_000  # elements, DeepSpeed's default reduce and all-gather bucket
COMM_BOUND_SHARE = 2 / 3        # above this share of the step in communication, more nodes buy little


@dataclass(frozen=True)
class Cluster:
    """What was measured: the bus bandwidth of the slowest link the ring crosses, a collective's latency, and the
    compute time of one sample's forward and backward on one rank."""
    ranks: int
    busbw_gbps: float
    latency_s: float
    compute_s_per_sample: float
    optimizer_s: float = 0.0     # the optimizer step itself (measured or 0)
    overlaps: bool = True        # False for gloo: collectives run inline
    gather_hidden: float = 0.0   # without overlaps: the share of an asynchronous gather compute hides (probed)
    reduce_hidden: float = 0.0   # without overlaps: the share of bucketed inline reductions compute hides (probed)
    zero3_overhead_s: float = 0.0  # ZeRO-3's own cost a micro-step beyond its traffic (measured)
    memory_gb: float | None = None  # per rank; None: not checked


@dataclass(frozen=True)
class Layout:
    zero_stage: int
    micro_batch: int
    grad_accum: int
    bucket: int                  # elements per reduce / all-gather bucket


@dataclass(frozen=True)
class ModelSize:
    params: int
    layers: int
    dim: int
    seq_len: int
    bytes_per_param: int = 2     # the gradients' and weights' dtype: bf16 2, fp32 4
    activation_checkpointing: bool = False


@dataclass(frozen=True)
class Prediction:
    layout: Layout
    compute_s: float
    comm_s: float                # every collective's time, overlapped or not
    exposed_comm_s: float        # the part the step waits for
    step_s: float
    comm_share: float            # comm_s / step_s: what preflight's profile measures
    memory_gb: float
    fits: bool

    def row(self) -> dict:
        return {**asdict(self.layout), **{k: v for k, v in asdict(self).items() if k != "layout"}}


def ring_passes(stage: int, grad_accum: int) -> float:
    """Passes of the model's bytes over the ring per optimizer step (all-reduce counts two)."""
    return {0: 2, 1: 3, 2: 2 * grad_accum + 1, 3: 3 * grad_accum}[stage]


def bandwidth_from(comm_s: float, m: ModelSize, layout: Layout, ranks: int, latency_s: float) -> float:
    """The bus bandwidth (GB/s) that a measured communication time per step implies for this layout: where no
    nccl-tests ran across the nodes, the profiled training steps themselves measure the link."""
    n_buckets = buckets(m, layout) * (2 if layout.zero_stage in (1, 2) else 1)
    calls = n_buckets * (layout.grad_accum if layout.zero_stage >= 2 else 1)
    moving = max(comm_s - calls * latency_s, comm_s * 0.05)  # latency never explains it all
    return ring_passes(layout.zero_stage, layout.grad_accum) * m.params * m.bytes_per_param * (ranks - 1) / ranks \
        / moving / 1e9


def collective_s(nbytes: float, units: float, c: Cluster, count: int) -> float:
    """`units` passes of nbytes over the ring (reduce-scatter and all-gather 1, all-reduce 2), in `count` calls."""
    if c.ranks <= 1:
        return 0.0
    return units * nbytes * (c.ranks - 1) / c.ranks / (c.busbw_gbps * 1e9) + count * c.latency_s


def buckets(m: ModelSize, layout: Layout) -> int:
    return max(1, math.ceil(m.params / layout.bucket))


def exposed_reduce_s(reduce_s: float, backward_s: float, m: ModelSize, layout: Layout, c: Cluster) -> float:
    """The part of one gradient reduction the step waits for: the last bucket, and whatever of the others the
    backward pass was too short to hide; without overlapping collectives (gloo), all but the probed share of what
    could hide."""
    last = min(1.0, layout.bucket / m.params)
    hideable = (1 - last) * min(reduce_s, backward_s)
    return reduce_s - hideable * (1.0 if c.overlaps else c.reduce_hidden)


def comm_times(m: ModelSize, layout: Layout, c: Cluster, micro_compute_s: float) -> tuple[float, float]:
    """(all communication, exposed communication) of one optimizer step, seconds."""
    size, g, n_buckets = m.params * m.bytes_per_param, layout.grad_accum, buckets(m, layout)
    backward = micro_compute_s * BACKWARD_SHARE
    gather = collective_s(size, 1, c, n_buckets)
    if layout.zero_stage == 0:
        reduce = collective_s(size, 2, c, n_buckets)
        return reduce, exposed_reduce_s(reduce, backward, m, layout, c)
    if layout.zero_stage == 1:  # reduced at the last micro-step, the update gathered after the optimizer step
        reduce = collective_s(size, 2, c, n_buckets)
        return reduce + gather, exposed_reduce_s(reduce, backward, m, layout, c) + gather
    if layout.zero_stage == 2:
        reduce = collective_s(size, 2, c, n_buckets)
        return g * reduce + gather, g * exposed_reduce_s(reduce, backward, m, layout, c) + gather
    # ZeRO-3: the forward's gathers hide behind the forward, the backward's gather and reduce behind the backward,
    # all but the first bucket of each (prefetching cannot start before the pass does)
    forward = micro_compute_s - backward
    if not c.overlaps:  # the reduce-scatter runs inline; of each gather, the probed share hides
        hideable = c.gather_hidden * (gather - gather / n_buckets)
        hidden = min(hideable, forward) + min(hideable, backward)
        return 3 * g * gather, g * (3 * gather - hidden)
    per_micro = max(gather / n_buckets, gather - forward) + max(2 * gather / n_buckets, 2 * gather - backward)
    return 3 * g * gather, g * per_micro


def memory_gb(m: ModelSize, layout: Layout, ranks: int) -> float:
    p, n = m.params, max(1, ranks)
    weights, grads, states = (2 * p, 2 * p, 12 * p) if m.bytes_per_param == 2 else (4 * p, 4 * p, 8 * p)
    if layout.zero_stage >= 1:
        states /= n
    if layout.zero_stage >= 2:
        grads /= n
    if layout.zero_stage >= 3:
        weights /= n
    per_sample = (2 if m.activation_checkpointing else 34) * m.seq_len * m.dim * m.layers * m.bytes_per_param / 2
    bucket_bytes = 2 * min(layout.bucket, p) * m.bytes_per_param  # a reduce and an all-gather bucket
    return (weights + grads + states + bucket_bytes + layout.micro_batch * per_sample) / 1e9


def predict(m: ModelSize, layout: Layout, c: Cluster) -> Prediction:
    micro = c.compute_s_per_sample * layout.micro_batch
    compute = micro * layout.grad_accum + c.optimizer_s
    if layout.zero_stage == 3:
        compute += c.zero3_overhead_s * layout.grad_accum
    comm, exposed = comm_times(m, layout, c, micro)
    step = compute + exposed
    mem = memory_gb(m, layout, c.ranks)
    return Prediction(layout, compute, comm, exposed, step, min(1.0, comm / step) if step else 0.0, mem,
                      c.memory_gb is None or mem <= c.memory_gb)


def bucket_candidates(params: int) -> list[int]:
    """DeepSpeed's default and cuts of the model into 4, 8 and 16 buckets (at least a million elements each)."""
    cuts = {max(1_000_000, params // k) for k in (4, 8, 16)}
    return sorted(cuts | {DEEPSPEED_BUCKET}, reverse=True)


def best(predictions: list[Prediction]) -> Prediction:
    """The fastest layout that fits; on a tie (within 2%) the lower ZeRO stage (least traffic, least to go wrong),
    then the least exposed communication (so a fast link still overlaps), then the larger micro-batch and bucket."""
    fitting = [p for p in predictions if p.fits]
    if not fitting:
        raise ValueError("no candidate layout fits the memory per rank; lower train.batch.micro_batch_size, turn on "
                         "train.compute.activation_checkpointing or use more ranks")
    fastest = min(p.step_s for p in fitting)
    close = [p for p in fitting if p.step_s <= fastest * 1.02]
    return min(close, key=lambda p: (p.layout.zero_stage, round(p.exposed_comm_s, 6), -p.layout.micro_batch,
                                     -p.layout.bucket))


def comm_bound(p: Prediction) -> bool:
    return p.comm_share > COMM_BOUND_SHARE
