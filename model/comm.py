"""Every torch.distributed collective of the pipeline, run on the process group's own device.

A process group made for NCCL has no backend for CPU tensors: a collective on
one raises "No backend type associated with device type cpu". So no code
outside this module calls a collective (tests/model/test_comm.py checks the
source), and this module moves every tensor to the group's device first:
cuda:<LOCAL_RANK> for NCCL, the CPU for gloo.

Why the group's device rather than a CPU backend beside NCCL ("cpu:gloo,cuda:nccl")
for the host-side flags: most values the ranks agree on live on the GPU already
(the loss, its per-channel sums, whether it is finite); through a gloo side
channel each would first cross to the host, a sync each. The few host values
(SIGTERM, room on disk, a staging failure) cost a copy of a few bytes instead.
And a gloo side channel is a second full mesh of TCP connections on every rank,
with its own interface choice (GLOO_SOCKET_IFNAME), timeouts and failure modes
beside NCCL's watchdog: one more thing to break on a cluster whose NCCL runs on
InfiniBand and whose hostnames resolve to a management Ethernet.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
import torch.distributed as dist

Op = Literal["sum", "max", "min"]
_OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}


def device_for(backend: str, local_rank: int) -> torch.device:
    """The device a group's collectives run on: CUDA when NCCL serves CUDA tensors (plain "nccl" or a
    per-device mapping such as "cpu:gloo,cuda:nccl"), else the CPU."""
    serves_cuda = any(part.strip() in ("nccl", "cuda:nccl") for part in backend.lower().split(","))
    return torch.device("cuda", local_rank) if serves_cuda else torch.device("cpu")


@dataclass(frozen=True)
class Comm:
    """The collectives of one initialized process group, with tensors placed on its device."""

    device: torch.device
    backend: str
    rank: int
    world: int

    @classmethod
    def current(cls, local_rank: int | None = None) -> "Comm":
        """The default group's; for NCCL this also makes cuda:<local_rank> this process's current device, so
        no collective or kernel lands on GPU 0 by default (several ranks per node would share it)."""
        backend = str(dist.get_backend())
        if local_rank is None:
            local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = device_for(backend, local_rank)
        if device.type == "cuda":
            torch.cuda.set_device(device)
        return cls(device, backend, dist.get_rank(), dist.get_world_size())

    def place(self, t: torch.Tensor) -> torch.Tensor:
        return t if t.device == self.device else t.to(self.device)

    def all_reduce(self, t: torch.Tensor, op: Op = "sum") -> torch.Tensor:
        """The reduced tensor, on the group's device (t itself when it was there already)."""
        t = self.place(t)
        dist.all_reduce(t, op=_OPS[op])
        return t

    def agree(self, values: Sequence[float], op: Op = "sum", dtype: torch.dtype = torch.float64) -> list[float]:
        """Host values reduced over the ranks, back on the host: one collective, one small copy each way."""
        return self.all_reduce(torch.tensor(list(values), dtype=dtype), op).tolist()

    def all_gather(self, t: torch.Tensor) -> list[torch.Tensor]:
        t = self.place(t)
        out = [torch.empty_like(t) for _ in range(self.world)]
        dist.all_gather(out, t)
        return out

    def all_gather_async(self, t: torch.Tensor):
        """(the gathered tensors, a handle to wait on): the collective runs while the caller goes on, as ZeRO-3's
        prefetched parameter gathers do (gloo on a thread of its own, NCCL on its stream)."""
        t = self.place(t)
        out = [torch.empty_like(t) for _ in range(self.world)]
        return out, dist.all_gather(out, t, async_op=True)

    def barrier(self) -> None:
        if self.device.type == "cuda":  # NCCL's barrier is an all-reduce on a device; name ours
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()
