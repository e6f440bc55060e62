"""One optimizer step on the device, and the one collective per step that the ranks agree through.

Nothing here copies to the host per micro step. Each step's figures stay on the
device in a small vector: the mean loss, then per channel the summed token loss
and the token count. The step's agreement is a single all-reduce of two flags
(a rank's loss is not finite; a rank got SIGTERM), carrying the pending steps'
figures as well on the steps where they are due (logging, eval, saving, the
end): only then do they cross to the host, in that one copy.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass

import torch

from model.batches import BatchPrefetcher
from model.comm import Comm
from model.comm_profile import BACKWARD_MARK, STEP_MARK
from model.data import SamplerState
from pretrain.channels import CHANNELS
from model.guard import fault_point
from model.loss import token_losses
from model.schedule import cosine_lr, wsd_lr
from model.spec import TrainSpec
from model.straggler import LocalTime

N_CHANNELS = len(CHANNELS)
LOG_Z, Z_LOSS = 1 + 2 * N_CHANNELS, 2 + 2 * N_CHANNELS
STATS = 3 + 2 * N_CHANNELS  # [mean loss, loss sum per channel ..., tokens per channel ..., log Z sum, z-loss sum]


@dataclass
class PendingStep:
    """A trained step whose figures are still on the device."""
    step: int                               # steps done after it
    stats: torch.Tensor                     # (STATS,) this rank's, on the device
    grad_norm: torch.Tensor | float | None  # global already (DeepSpeed reduces it)
    lr: float
    started: float                          # perf_counter at its start
    samples: int                            # global batch
    position_start: int
    position_end: int
    seconds: float = 0.0                    # wall time, set once the step's agreement has synced
    own: LocalTime | None = None            # this rank's own part of it (reading data, forward): names stragglers
    comm: dict | None = None                # measured communication of a profiled step (model/comm_profile.py)
    state: SamplerState | None = None       # the data position after it (its token ledger)


@dataclass
class Agreement:
    loss_not_finite: bool                # on any rank
    stop_requested: bool                 # on any rank
    stats: list[list[float]] | None      # the pending steps' figures summed over ranks, when they were due
    rank_own_s: list[float] | None = None  # with them: each rank's own seconds per step (model/straggler.py)


def lr_at(step: int, t: TrainSpec, scale: float = 1.0) -> float:
    """The schedule's learning rate at a step, times the scale an escalating recovery lowered it by."""
    if t.schedule == "wsd":
        return scale * wsd_lr(step, lr=t.lr, min_lr=t.min_lr, warmup=t.warmup_steps, total=t.steps,
                              decay_frac=t.decay_frac, decay_steps=t.decay_steps)
    return scale * cosine_lr(step, lr=t.lr, min_lr=t.min_lr, warmup=t.warmup_steps, total=t.steps)


def add_channel_sums(stats: torch.Tensor, per_token: torch.Tensor, channels: torch.Tensor) -> None:
    """Per-channel loss sums and token counts into stats[1:], on the device (no host sync)."""
    stats[1:1 + N_CHANNELS].index_add_(0, channels, per_token.float())
    stats[1 + N_CHANNELS:1 + 2 * N_CHANNELS].index_add_(0, channels, torch.ones_like(per_token, dtype=torch.float32))


def step_loss(engine, tokens: torch.Tensor, channels: torch.Tensor, stats: torch.Tensor, z_weight: float = 0.0
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The micro batch's mean loss to train on (cross-entropy plus z-loss) and its mean cross-entropy (fp32, from
    logits of any precision); adds per-channel cross-entropy sums, log Z and z-loss sums to `stats`."""
    device = engine.device
    tokens, channels = tokens.to(device, non_blocking=True), channels.to(device, non_blocking=True)
    logits = engine(tokens[:, :-1])
    per_token, log_z = token_losses(logits.flatten(0, 1), tokens[:, 1:].flatten(), z_weight=z_weight)
    with torch.no_grad():
        z_loss = z_weight * log_z.square()
        cross_entropy = per_token.detach() - z_loss if z_weight else per_token.detach()
        add_channel_sums(stats, cross_entropy, channels.flatten())
        stats[LOG_Z] += log_z.sum()
        stats[Z_LOSS] += z_loss.sum()
    return per_token.mean(), cross_entropy.mean()


SPIKE_FACTOR = 10.0  # an injected spike: the loss (and so its gradient) this many times what it was


def injected(variable: str, positions: list[int]) -> bool:
    """Fault injection for drills and the rollback demo: with PRETRAIN_NAN_POSITIONS="a-b" the loss is NaN, with
    PRETRAIN_SPIKE_POSITIONS="a-b" it spikes, when a sample of sampler positions [a, b) is trained on."""
    spec = os.environ.get(variable)
    if not spec:
        return False
    a, b = (int(x) for x in spec.split("-"))
    return any(a <= p < b for p in positions)


def train_step(engine, batches: BatchPrefetcher, t: TrainSpec, step: int, lr_scale: float = 1.0
               ) -> tuple[PendingStep, SamplerState]:
    """Forward, backward and optimizer step over the prefetched global batch; returns the step's figures (on the
    device) and the data position after it."""
    started = time.perf_counter()
    lr = lr_at(step, t, lr_scale)
    for group in engine.optimizer.param_groups:
        group["lr"] = lr
    fault_point("slow_rank", batches.rank)  # drills: a rank whose reads are slow
    batch = batches.next()
    own = LocalTime(data_s=time.perf_counter() - started)
    poisoned = injected("PRETRAIN_NAN_POSITIONS", batch.positions)
    spiked = injected("PRETRAIN_SPIKE_POSITIONS", batch.positions)
    stats = torch.zeros(STATS, device=engine.device)
    for tokens, channels in batch.micro:
        with own.span(engine.device):
            loss, cross_entropy = step_loss(engine, tokens, channels, stats, t.z_loss)
        if poisoned or spiked:  # what the detector sees and what the gradient gets
            factor = float("nan") if poisoned else SPIKE_FACTOR
            loss, cross_entropy = loss * factor, cross_entropy * factor
        with torch.profiler.record_function(BACKWARD_MARK):  # the overlap measure's window (model/comm_profile.py)
            engine.backward(loss)
        with torch.profiler.record_function(STEP_MARK):  # the optimizer's share (model/comm_profile.py)
            engine.step()
        stats[0] += cross_entropy / t.grad_accum  # the figure every run reports, whatever its z-loss
    norm = engine.get_global_grad_norm()
    norm = norm.detach().clone() if torch.is_tensor(norm) else norm
    return PendingStep(step + 1, stats, norm, lr, started, len(batch.positions), batch.position_start,
                       batch.state.consumed_samples, own=own, state=batch.state), batch.state


def agree(comm: Comm, pending: list[PendingStep], stop_requested: bool, with_stats: bool) -> Agreement:
    """The step's one collective: the flags of the newest pending step, plus every pending step's figures when
    `with_stats`. Reading its result is the step's one copy to the host."""
    flags = torch.zeros(2, device=comm.device)
    flags[0] = (~torch.isfinite(pending[-1].stats[0])).float()
    flags[1] = float(stop_requested)
    if not with_stats:
        reduced = comm.all_reduce(flags).tolist()
        return Agreement(reduced[0] > 0, reduced[1] > 0, None)
    own = torch.zeros(comm.world, device=comm.device)  # each rank fills its slot: the sum hands every rank all
    own[comm.rank] = sum(p.own.seconds() for p in pending if p.own) / len(pending)
    reduced = comm.all_reduce(torch.cat([flags, *(p.stats.to(comm.device) for p in pending), own])).tolist()
    stats = [reduced[2 + k * STATS: 2 + (k + 1) * STATS] for k in range(len(pending))]
    return Agreement(reduced[0] > 0, reduced[1] > 0, stats, reduced[2 + len(pending) * STATS:])


def reduce_stats(comm: Comm, pending: list[PendingStep]) -> list[list[float]]:
    """The pending steps' figures summed over ranks, outside the schedule (a non-finite loss, a stop)."""
    flat = comm.all_reduce(torch.cat([p.stats.to(comm.device) for p in pending])).tolist()
    return [flat[k * STATS:(k + 1) * STATS] for k in range(len(pending))]


def grad_norms(pending: list[PendingStep]) -> list[float | None]:
    """Host values of the pending steps' grad norms, the device ones in one copy."""
    on_device = [p.grad_norm for p in pending if torch.is_tensor(p.grad_norm)]
    copied = iter(torch.stack([n.float().reshape(()) for n in on_device]).tolist()) if on_device else iter(())
    return [next(copied) if torch.is_tensor(p.grad_norm) else (None if p.grad_norm is None else float(p.grad_norm))
            for p in pending]


def step_metrics(p: PendingStep, reduced: list[float], grad_norm: float | None, world: int, seq_len: int,
                 flops_per_token: float) -> dict:
    """A step's metrics from its figures summed over ranks."""
    tokens_per_s = p.samples * seq_len / p.seconds
    metrics = {"loss": reduced[0] / world, "lr": p.lr, "tokens_per_s": tokens_per_s, "step_time_s": p.seconds,
               "position_start": p.position_start, "consumed_samples": p.position_end,
               "tflops_per_s": flops_per_token * tokens_per_s / 1e12}
    if grad_norm is not None:
        metrics["grad_norm"] = grad_norm
    if p.comm:
        metrics.update(p.comm)
    for c, name in enumerate(CHANNELS):
        tokens = reduced[1 + N_CHANNELS + c]
        if tokens > 0:
            metrics[f"loss_{name}"] = reduced[1 + c] / tokens
    tokens = sum(reduced[1 + N_CHANNELS:1 + 2 * N_CHANNELS])
    if tokens > 0:  # the softmax normalizer's log: what z-loss holds down, the logits' drift where it is off
        metrics.update(log_z=reduced[LOG_Z] / tokens, z_loss=reduced[Z_LOSS] / tokens)
    return metrics
