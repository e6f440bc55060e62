"""How much of a collective hides behind computation on two CPU ranks (gloo), by link speed: the two probes preflight
runs (model/overlap_probe.py), on the two-host test bed, its link slowed by `tc`: an asynchronous all-gather (ZeRO-3's
prefetched parameters) and synchronous all-reduces in 8 buckets between slices of compute (ZeRO-1/2's gradients).

    python benchmarks/async_overlap.py [--rates 0 2000 200] [--sizes 3.5 13.9] [--repeats 3]     (as root; 0: unshaped)

Baseline in the same run: the collective and the compute one after the other (share 0); 1 means the collective
vanished inside the compute. A probe's share is the smallest over the ranks; a cell's, the median of --repeats
probes. The gather share is why ZeRO-3, whose parameter gathers are asynchronous, beat a model without it at
200 Mbit/s in benchmarks/comm_plan.py; the reduce share is what tasks/train/comm_model.py credits to ZeRO-1/2's
gradient buckets on gloo.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._two_hosts import HOSTS, make_hosts, missing, shape_links, teardown_hosts  # noqa: E402
from tasks.common.ports import free_port  # noqa: E402

RANK = """
import datetime, sys
sys.path.insert(0, {root!r})
import torch.distributed as dist
from model.comm import Comm
from model.overlap_probe import async_overlap, inline_reduce_overlap
dist.init_process_group("gloo", init_method="tcp://{master}:{port}", rank=int(sys.argv[1]), world_size=2,
                        timeout=datetime.timedelta(seconds=300))
comm = Comm.current()
for mb in {sizes!r}:
    for _ in range({repeats}):
        for kind, probe in (("gather", async_overlap), ("reduce", inline_reduce_overlap)):
            share = probe(comm, int(mb * 1e6))
            if comm.rank == 0:
                print(kind, mb, share, flush=True)
comm.barrier()
dist.destroy_process_group()  # gloo's threads stopped before exit, or one may abort the process
"""


def probe(sizes: list[float], repeats: int) -> dict[tuple[str, float], list[float]]:
    script = RANK.format(root=str(ROOT), master=HOSTS[0], port=free_port(), sizes=sizes, repeats=repeats)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "eth0"}  # as tasks/train/run.py launches
    ranks = [subprocess.Popen(["ip", "netns", "exec", f"pthost{k}", sys.executable, "-c", script, str(k)], env=env,
                              stdout=subprocess.PIPE, text=True) for k in range(2)]
    out, _ = ranks[0].communicate(timeout=900)
    ranks[1].wait(timeout=60)
    if any(r.returncode for r in ranks):
        raise RuntimeError(f"a probe rank failed: exit codes {[r.returncode for r in ranks]}")
    found: dict[tuple[str, float], list[float]] = {}
    for line in out.splitlines():
        kind, mb, share = line.split()
        found.setdefault((kind, float(mb)), []).append(float(share))
    return found


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rates", type=float, nargs="+", default=[0, 2000, 200], help="Mbit/s; 0: unshaped")
    parser.add_argument("--sizes", type=float, nargs="+", default=[3.5, 13.9], help="MB gathered")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    if reason := missing():
        sys.exit(f"error: the two-host test bed cannot run here: {reason}")
    rows = []
    make_hosts()
    try:
        for rate in args.rates:
            shape_links(rate or None)
            for (kind, mb), shares in probe(args.sizes, args.repeats).items():
                rows.append((rate, kind, mb, shares))
    finally:
        shape_links(None)
        teardown_hosts()
    print(f"{'link':>10} {'probe':>6} {'MB':>6} {'hidden (median)':>15} {'probes':>24} {'sequential':>10}")
    for rate, kind, mb, shares in rows:
        link = f"{rate:g} Mbit/s" if rate else "unshaped"
        print(f"{link:>10} {kind:>6} {mb:>6g} {statistics.median(shares):>15.0%} "
              f"{' '.join(f'{s:.2f}' for s in shares):>24} {0:>10.0%}")


if __name__ == "__main__":
    main()
