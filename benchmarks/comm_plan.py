"""The communication model against measurement on shaped links: two hosts (network namespaces, sshd, one CPU rank
each, gloo), their link slowed by `tc` to each of --rates Mbit/s.

    python benchmarks/comm_plan.py [--rates 200 2000] [--steps 8] [--repeats 3] [--dim 256]     (as root)

Per link speed:
  calibrate  preflight's profiled run (ZeRO-1, G=1): the compute time of a sample, the bandwidth its own
             collectives had (tasks/train/comm_plan.py measured_from, as on a cluster without nccl-tests) and the
             share of an asynchronous gather compute hid; then preflight's timed ZeRO-3 steps (G=1, DeepSpeed's
             bucket: ZeRO-3's own cost); once a round, the medians used
  grid       ZeRO 1/2/3 x G in {1, 4} x buckets {DeepSpeed's 5e8, the model in 8}: each trains --steps steps,
             --repeats times, the rounds interleaved (a slow spell of this shared machine falls on every cell
             alike); a run's figures: the median step time after the first two (profiled steps left out), the
             median communication share and overlap of its profiled steps (train.watch.comm_profile_every); a cell's:
             the median over its runs, and their spread (slowest / fastest)
  predicted  tasks/train/comm_model.py on the calibration's figures (tasks/train/comm_plan.py measured_cluster)
Targets: measured step time within +-20% of predicted in every cell; for each G, the cell the plan chooses
(zero_stage and bucket_size auto) is the fastest measured or within 10% of it; the default bucket (the model in 8)
puts gradient communication inside the backward pass where DeepSpeed's 5e8 puts none. Gloo runs collectives
inline, so on these ranks that is the schedule (model/comm_profile.py), not time saved; on GPUs it is overlap.
"""
from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._demo_run import demo_config, prepare  # noqa: E402
from benchmarks._two_hosts import HOSTS, hosts_up, missing, shape_links  # noqa: E402
from model.comm_profile import PROFILE_FILE  # noqa: E402
from model.protocol import read_jsonl  # noqa: E402
from tasks.preflight.comm import check_comm_share  # noqa: E402
from tasks.train.comm_model import DEEPSPEED_BUCKET, Layout, best, predict  # noqa: E402
from tasks.train.comm_plan import (ZERO3_PROFILE_DIR, Measured, measured_cluster, measured_from,  # noqa: E402
                                   model_size)
from tasks.train.run import run_train  # noqa: E402

SKIP = 2
MICRO = 4


def config(tmp: Path, dim: int, steps: int):
    return demo_config(tmp, dim, 128, {
        "steps": steps, "save_every": 10**6, "save_final": False, "log_every": 1, "micro_batch_size": MICRO,
        "grad_accum": 1, "export_hf": False, "launch": "per_node", "node_command": ["ssh", "{host}"],
        "hosts": [{"name": h, "slots": 1} for h in HOSTS], "master_addr": HOSTS[0], "num_gpus": 1,
        "bucket_size": DEEPSPEED_BUCKET, "zero_stage": "auto"}, {"comm_profile_steps": 6})  # auto: ZeRO-3 timed too


def calibrate(cfg, tmp: Path):
    check = check_comm_share(cfg, tmp)
    profile = json.loads((tmp / "preflight" / "profile" / PROFILE_FILE).read_text())
    zero3 = json.loads((tmp / "preflight" / ZERO3_PROFILE_DIR / PROFILE_FILE).read_text())
    found = measured_from([], profile, zero3)
    print(f"  profiled steps {profile['wall_s'] / profile['steps']:.3f} s, unprofiled "
          f"{profile['unprofiled_wall_s'] / profile['steps']:.3f} s (the profiler's cost left out of the calibration)",
          flush=True)
    if found is None:
        raise RuntimeError(f"the calibration run measured nothing: {check}")
    return found


def measure(cfg, tmp: Path, layout: Layout, steps: int, rate: float, round_: int) -> dict:
    out = tmp / f"{rate:g}mbit-z{layout.zero_stage}-g{layout.grad_accum}-b{layout.bucket}-r{round_}"  # metrics append
    train = cfg.train.changed(zero_stage=layout.zero_stage, grad_accum=layout.grad_accum, bucket_size=layout.bucket,
                              comm_profile_every=3, steps=steps)
    run_train(cfg.model, train, tmp / "tokenizer", tmp / "tokens", out, {}, log_line=lambda _: None)
    metrics = [m for m in read_jsonl(out / "metrics.jsonl") if m["step"] > SKIP]
    profiled = [m for m in metrics if "comm_s" in m]
    return {"step_s": statistics.median(m["step_time_s"] for m in metrics if "comm_s" not in m),
            "comm_share": statistics.median(m["comm_share"] for m in profiled),
            "overlap": statistics.median(m["comm_overlap_share"] for m in profiled)}


def combined(runs: list[dict]) -> dict:
    steps = [r["step_s"] for r in runs]
    return {"step_s": statistics.median(steps), "spread": max(steps) / min(steps),
            **{k: statistics.median(r[k] for r in runs) for k in ("comm_share", "overlap")}}


def grid(params: int) -> list[Layout]:
    return [Layout(z, MICRO, g, b) for g in (1, 4) for z in (1, 2, 3) for b in (DEEPSPEED_BUCKET, max(params // 8, 1))]


def median_of(found: list[Measured]) -> Measured:
    first = found[0]
    return Measured(statistics.median(f.busbw_gbps for f in found), first.busbw_source,
                    statistics.median(f.compute_s_per_sample for f in found), first.compute_source, None,
                    statistics.median(f.async_overlap for f in found),
                    {**first.zero3, "step_s": statistics.median(f.zero3["step_s"] for f in found)},
                    statistics.median(f.optimizer_s for f in found),
                    statistics.median(f.reduce_overlap for f in found))


def run_rate(cfg, tmp: Path, rate: float, rows: int, steps: int, repeats: int) -> list[dict]:
    shape_links(rate)
    size = model_size(cfg.model, cfg.train, rows)
    runs: dict[Layout, list[dict]] = {layout: [] for layout in grid(size.params)}
    found = []
    for round_ in range(repeats):  # the calibration too, once a round: one slow spell must not skew every cell
        found.append(calibrate(cfg, tmp))
        f = found[-1]
        print(f"  round {round_ + 1} calibration: {f.busbw_gbps * 8e3:.0f} Mbit/s bus bandwidth, "
              f"{f.compute_s_per_sample * 1e3:.1f} ms compute a sample, {f.optimizer_s * 1e3:.1f} ms the optimizer a "
              f"step, {f.async_overlap:.0%} of a gather hidden, {f.reduce_overlap:.0%} of bucketed reduces, "
              f"ZeRO-3 step {f.zero3['step_s']:.3f} s", flush=True)
        for layout, done in runs.items():
            done.append(measure(cfg, tmp, layout, steps, rate, round_))
            m = done[-1]
            print(f"  round {round_ + 1} ZeRO-{layout.zero_stage} G={layout.grad_accum} bucket {layout.bucket:>11,}: "
                  f"measured {m['step_s']:.3f} s ({m['comm_share']:.0%}, {m['overlap']:.0%} in the backward)",
                  flush=True)
    median = median_of(found)
    notes = []
    cluster = measured_cluster(cfg.train, 2, size, median, notes)
    print(f"\n{rate:g} Mbit/s: calibrated (median of {repeats}) {median.busbw_gbps * 8e3:.0f} Mbit/s bus bandwidth, "
          f"{median.compute_s_per_sample * 1e3:.1f} ms compute a sample, {median.optimizer_s * 1e3:.1f} ms the optimizer "
          f"a step; model {size.params:,} parameters", flush=True)
    for note in notes:
        print(f"  {note}", flush=True)
    return [{"rate": rate, "layout": layout, "predicted": predict(size, layout, cluster), "measured": combined(done)}
            for layout, done in runs.items()]


def report(results: list[dict]) -> None:
    print(f"\n{'Mbit/s':>7} {'zero':>4} {'G':>2} {'bucket':>11} {'pred s':>8} {'meas s':>8} {'spread':>6} "
          f"{'meas/pred':>9} {'pred comm':>9} {'meas comm':>9} {'in bwd':>6}")
    for r in results:
        p, m, lay = r["predicted"], r["measured"], r["layout"]
        ratio = m["step_s"] / p.step_s
        print(f"{r['rate']:>7g} {lay.zero_stage:>4} {lay.grad_accum:>2} {lay.bucket:>11,} {p.step_s:>8.3f} "
              f"{m['step_s']:>8.3f} {m['spread']:>6.2f} {ratio:>9.2f}{'' if abs(ratio - 1) <= 0.2 else ' !'} "
              f"{p.comm_share:>9.0%} {m['comm_share']:>9.0%} {m['overlap']:>6.0%}")
    within = sum(abs(r["measured"]["step_s"] / r["predicted"].step_s - 1) <= 0.2 for r in results)
    print(f"\ncells within +-20% of predicted: {within} of {len(results)} (target: all)")
    for rate in sorted({r["rate"] for r in results}):
        for g in (1, 4):
            cells = [r for r in results if r["rate"] == rate and r["layout"].grad_accum == g]
            chosen = best([r["predicted"] for r in cells]).layout
            fastest = min(cells, key=lambda r: r["measured"]["step_s"])
            got = next(r for r in cells if r["layout"] == chosen)["measured"]["step_s"]
            print(f"{rate:g} Mbit/s, G={g}: plan chooses ZeRO-{chosen.zero_stage} bucket {chosen.bucket:,} "
                  f"({got:.3f} s), fastest measured ZeRO-{fastest['layout'].zero_stage} bucket "
                  f"{fastest['layout'].bucket:,} ({fastest['measured']['step_s']:.3f} s): "
                  f"{got / fastest['measured']['step_s']:.2f}x (target <= 1.10)")
    report_overlap(results)


def report_overlap(results: list[dict]) -> None:
    """ZeRO-1/2: the share of gradient communication inside the backward, default bucket against DeepSpeed's."""
    for rate in sorted({r["rate"] for r in results}):
        cells = [r for r in results if r["rate"] == rate and r["layout"].zero_stage in (1, 2)]
        split = [r["measured"]["overlap"] for r in cells if r["layout"].bucket != DEEPSPEED_BUCKET]
        whole = [r["measured"]["overlap"] for r in cells if r["layout"].bucket == DEEPSPEED_BUCKET]
        print(f"{rate:g} Mbit/s, ZeRO-1/2: gradient communication inside the backward pass with the default bucket "
              f"(the model in 8) {min(split):.0%}-{max(split):.0%}, with DeepSpeed's 5e8 "
              f"{min(whole):.0%}-{max(whole):.0%} (target: > 0 against 0)")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--rates", type=float, nargs="+", default=[200, 2000], help="link speeds, Mbit/s")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="runs of each cell, in interleaved rounds")
    parser.add_argument("--dim", type=int, default=256)
    args = parser.parse_args()
    if reason := missing():
        sys.exit(f"error: the two-host test bed cannot run here: {reason}")
    tmp = Path(tempfile.mkdtemp(prefix="comm-plan-bench-"))
    cfg = config(tmp, args.dim, args.steps)
    rows = prepare(cfg, tmp)
    results = []
    (tmp / "hosts-bed").mkdir()
    with hosts_up(tmp / "hosts-bed"):
        try:
            for rate in args.rates:
                results += run_rate(cfg, tmp, rate, rows, args.steps, args.repeats)
                report([r for r in results if r["rate"] == rate])
        finally:
            shape_links(None)
    if len(args.rates) > 1:
        report(results)


if __name__ == "__main__":
    main()
