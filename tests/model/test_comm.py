"""model/comm.py: every collective of the pipeline goes through it, on the process group's device.

An NCCL group has no CPU backend, so a collective elsewhere on a CPU tensor
stops a GPU run at its first step; these tests catch that without a GPU.
"""
import ast
import datetime
import multiprocessing as mp
import os
from pathlib import Path

import pytest
import torch

from model import comm as comm_module
from model.comm import Comm, device_for
from model import overlap_probe
from model.overlap_probe import async_overlap, hidden_share, inline_reduce_overlap
from tasks.common.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
SOURCE_DIRS = ("model", "tasks", "flows", "pretrain", "benchmarks", "infra")
COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "all_to_all",
               "all_to_all_single", "barrier", "monitored_barrier", "broadcast", "broadcast_object_list", "gather",
               "gather_object", "reduce", "reduce_scatter", "reduce_scatter_tensor", "scatter", "scatter_object_list",
               "send", "recv", "isend", "irecv", "batch_isend_irecv"}
DIST_MODULES = {"torch.distributed", "deepspeed.comm"}


def collective_calls(source: str) -> list[str]:
    """Collective calls in a module's source: through an alias of torch.distributed / deepspeed.comm, a full
    dotted path, or a name imported from them."""
    tree = ast.parse(source)
    aliases, names = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name in DIST_MODULES and a.asname}
        elif isinstance(node, ast.ImportFrom):
            if node.module in DIST_MODULES:
                names |= {a.asname or a.name for a in node.names if a.name in COLLECTIVES}
            elif node.module in ("torch", "deepspeed"):
                aliases |= {a.asname or a.name for a in node.names if a.name in ("distributed", "comm")}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in names:
            found.append(f"{f.id} (line {node.lineno})")
        elif isinstance(f, ast.Attribute) and f.attr in COLLECTIVES:
            base = ast.unparse(f.value)
            if base in aliases or base in DIST_MODULES:
                found.append(f"{base}.{f.attr} (line {node.lineno})")
    return found


def test_the_scan_finds_collectives_however_they_are_spelled():
    assert collective_calls("import torch.distributed as dist\ndist.all_reduce(x)")
    assert collective_calls("import torch\ntorch.distributed.barrier()")
    assert collective_calls("from torch import distributed as d\nd.all_gather(a, b)")
    assert collective_calls("from torch.distributed import all_reduce as ar\nar(x)")
    assert collective_calls("import deepspeed.comm as dist\ndist.broadcast(x, 0)")
    assert not collective_calls("import torch.distributed as dist\ndist.get_rank()\nother.all_reduce(x)")


def test_no_collective_is_called_outside_the_comm_module():
    offenders = {}
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "model" / "comm.py":
                continue
            calls = collective_calls(path.read_text(encoding="utf-8"))
            if calls:
                offenders[str(path.relative_to(ROOT))] = calls
    assert not offenders, f"collectives outside model/comm.py (an NCCL group fails on CPU tensors): {offenders}"
    assert collective_calls((ROOT / "model" / "comm.py").read_text())  # the scan sees the ones that are allowed


@pytest.mark.parametrize("backend, expected", [
    ("nccl", torch.device("cuda", 3)),
    ("cpu:gloo,cuda:nccl", torch.device("cuda", 3)),
    ("cuda:nccl", torch.device("cuda", 3)),
    ("gloo", torch.device("cpu")),
    ("mpi", torch.device("cpu")),
])
def test_an_nccl_group_runs_its_collectives_on_this_ranks_gpu(backend, expected):
    assert device_for(backend, local_rank=3) == expected


class Recorder:
    """Stands in for torch.distributed: records what each collective was handed."""

    def __init__(self):
        self.calls = []

    def all_reduce(self, t, op=None):
        self.calls.append(("all_reduce", t.device))

    def all_gather(self, out, t):
        self.calls.append(("all_gather", t.device, {o.device for o in out}))

    def barrier(self, device_ids=None):
        self.calls.append(("barrier", device_ids))


def test_collectives_move_host_tensors_to_the_group_device_first(monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(comm_module, "dist", recorder)
    monkeypatch.setattr(comm_module, "_OPS", {"sum": None, "max": None, "min": None})
    meta = Comm(torch.device("meta"), "fake", rank=0, world=2)  # a device other than the CPU, without a GPU
    out = meta.all_reduce(torch.ones(3), "max")
    assert out.device.type == "meta"
    meta.all_gather(torch.ones(2))
    meta.barrier()
    gpu = Comm(torch.device("cuda", 5), "nccl", rank=5, world=8)
    gpu.barrier()
    assert recorder.calls == [("all_reduce", torch.device("meta")),
                              ("all_gather", torch.device("meta"), {torch.device("meta")}),
                              ("barrier", None),
                              ("barrier", [5])]  # NCCL's barrier names this rank's GPU, never GPU 0 by default


def _rank(rank: int, port: int, results) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    comm = Comm.current()
    out = {"device": str(comm.device), "sum": comm.all_reduce(torch.tensor([1.0 + rank])).tolist(),
           "max": comm.agree([rank], "max"), "min": comm.agree([rank + 5], "min"),
           "gather": [t.tolist() for t in comm.all_gather(torch.tensor([rank, 10 * rank]))]}
    gathered, handle = comm.all_gather_async(torch.tensor([rank + 2]))
    handle.wait()
    out["gather_async"] = [t.tolist() for t in gathered]
    out["overlap"] = async_overlap(comm, 4_000_000)
    out["reduce_overlap"] = inline_reduce_overlap(comm, 4_000_000)
    comm.barrier()
    results.put((rank, out))
    dist.destroy_process_group()


def test_two_gloo_ranks_reduce_gather_and_agree():
    ctx = mp.get_context("spawn")
    results, port = ctx.Queue(), free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, results)) for r in range(2)]
    for p in procs:
        p.start()
    got = dict(results.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    for probe in ("overlap", "reduce_overlap"):
        overlaps = [got[rank].pop(probe) for rank in (0, 1)]
        assert overlaps[0] == overlaps[1] and 0.0 <= overlaps[0] <= 1.0  # the ranks agree on the smallest share
    for rank in (0, 1):
        assert got[rank] == {"device": "cpu", "sum": [3.0], "max": [1.0], "min": [5.0], "gather": [[0, 0], [1, 10]],
                             "gather_async": [[2], [3]]}


def test_hidden_share_is_what_running_together_saved_over_the_shorter_activity():
    assert hidden_share(1.0, 0.5, 1.0) == 1.0    # the shorter one vanished inside the longer
    assert hidden_share(1.0, 0.5, 1.5) == 0.0    # one after the other
    assert hidden_share(1.0, 0.5, 1.25) == 0.5
    assert hidden_share(1.0, 0.5, 2.0) == 0.0    # contention made it worse: nothing hid
    assert hidden_share(0.0, 0.5, 0.5) == 0.0


def test_the_probes_move_at_most_a_bucket_of_bytes_whatever_the_model(monkeypatch):
    sizes = []

    class OneRankOfTwo(Comm):  # the probe's collectives, recorded; the timing is not under test here
        def barrier(self):
            pass

        def all_gather_async(self, t):
            sizes.append(t.numel() * t.element_size() * self.world)
            return [t, t], type("Done", (), {"wait": lambda self: None})()

        def all_reduce(self, t, op="sum"):
            reduced.append(t.numel() * t.element_size())
            return t

        def agree(self, values, op="sum", dtype=torch.float64):
            return list(values)

    reduced = []
    share = async_overlap(OneRankOfTwo(torch.device("cpu"), "gloo", 0, 2), 6 * 10**9)  # a 3B model in bf16
    assert sizes and max(sizes) <= overlap_probe.MAX_BYTES and 0.0 <= share <= 1.0
    share = inline_reduce_overlap(OneRankOfTwo(torch.device("cpu"), "gloo", 0, 2), 6 * 10**9, buckets=8)
    assert reduced and max(reduced) * 8 <= overlap_probe.MAX_BYTES and 0.0 <= share <= 1.0  # 8 buckets of the cap
