"""Communication overlap from real profiler traces: gloo collectives issued from gradient hooks before the backward's
last autograd node count; those in the last hook or after the backward do not."""
import multiprocessing as mp
import os

import pytest

from model.comm_profile import covered, merged
from tasks.common.ports import free_port


def test_spans_merge_and_cover():
    cover = merged([(5.0, 8.0), (0.0, 2.0), (1.0, 3.0), (8.0, 9.0)])
    assert cover == [(0.0, 3.0), (5.0, 9.0)]
    assert covered((2.0, 6.0), cover) == 2.0  # 2..3 and 5..6
    assert covered((3.0, 5.0), cover) == 0.0


def _profiled(port: int, in_hooks: bool, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    from model.comm_profile import BACKWARD_MARK, overlapped_seconds

    dist.init_process_group("gloo", rank=0, world_size=1)
    model = torch.nn.Sequential(*(torch.nn.Linear(256, 256) for _ in range(4)))
    if in_hooks:  # as ZeRO-2's buckets: reduced as soon as they fill, while autograd still has work
        for p in model.parameters():
            p.register_post_accumulate_grad_hook(lambda p: dist.all_reduce(p.grad))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loss = model(torch.randn(64, 256)).sum()
        with torch.profiler.record_function(BACKWARD_MARK):
            loss.backward()
        for p in model.parameters():  # as a bucket too large to fill: everything after the backward
            dist.all_reduce(p.grad)
    results.put(overlapped_seconds(prof))
    dist.destroy_process_group()


@pytest.mark.parametrize("in_hooks", [True, False])
def test_collectives_inside_the_backward_count_as_overlapped(in_hooks):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_profiled, args=(free_port(), in_hooks, results))
    proc.start()
    comm_s, overlapped_s = results.get(timeout=120)
    proc.join(timeout=30)
    assert comm_s > 0
    if in_hooks:  # 7 reduces in hooks with backward work after them; the last hook's and the 8 after have none
        assert 0 < overlapped_s < comm_s
    else:
        assert overlapped_s == 0
