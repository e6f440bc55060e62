"""A torch.distributed all-reduce bandwidth probe that runs anywhere (NCCL on GPUs, gloo on CPU)."""
from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from model.comm import Comm
from tasks.common.ports import free_port


def _worker(rank: int, world: int, port: int, n_bytes: int, iters: int, results) -> None:
    use_cuda = torch.cuda.is_available() and torch.cuda.device_count() >= world
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl" if use_cuda else "gloo", rank=rank, world_size=world,
                            timeout=timedelta(seconds=120))
    comm = Comm.current(local_rank=rank)
    x = torch.ones(n_bytes // 4, dtype=torch.float32, device=comm.device)
    comm.all_reduce(x)  # warm-up; also checks the arithmetic below
    times = []
    for _ in range(iters):
        x.fill_(1.0)
        if use_cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        comm.all_reduce(x)
        if use_cuda:
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    correct = bool(torch.allclose(x, torch.full_like(x, float(world))))
    if rank == 0:
        results.put({"backend": comm.backend, "device": str(comm.device), "seconds": sorted(times)[len(times) // 2],
                     "correct": correct})
    dist.destroy_process_group()


def allreduce_probe(world: int, megabytes: float, iters: int = 5) -> dict:
    """Median all-reduce time over `world` local ranks -> algbw and busbw (GB/s)."""
    n_bytes = int(megabytes * 2**20) // 4 * 4
    ctx = mp.get_context("spawn")
    results = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(world, free_port(), n_bytes, iters, results), nprocs=world,
                       join=True, start_method="spawn")
    r = results.get()
    algbw = n_bytes / r["seconds"] / 1e9
    return {**r, "world": world, "bytes": n_bytes, "algbw_gbps": algbw,
            "busbw_gbps": algbw * 2 * (world - 1) / world if world > 1 else algbw}
