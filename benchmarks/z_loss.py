"""z-loss over a deep decay on small batches: what train.optimizer.z_loss's default rests on.

    python benchmarks/z_loss.py [--z 0 1e-5 1e-4 1e-3] [--steps 400] [--seeds 2] [--dim 128]

Real text (WikiText-2 and Chinese Wikipedia from ../shared/corpora; held-out samples per channel set aside by the
training program), a 4-layer model, one CPU rank, micro-batch 2: warmup-stable-decay at a high learning rate
(3e-3), the second half a linear decay to 0; the loss-anomaly detector off (batches of 2 spike). Each z in --z trains with each seed (the z values of one seed back to
back). Per run: the held-out loss at the end (mean over channels of log perplexity), log Z (the softmax
normalizer's log: what z-loss holds down) at the decay's start and end, and the late-decay rise (the last tenth's
mean training loss minus the decay's lowest tenth). Printed against z = 0 of the same seed.
Target for the default: log Z held down (|log Z| at the end well below z = 0's) at no held-out loss cost (within
0.01 nats of z = 0, or better).
"""
from __future__ import annotations

import math
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._demo_run import demo_config, prepare  # noqa: E402
from model.protocol import read_jsonl  # noqa: E402
from model.schedule import decay_start  # noqa: E402
from pretrain.config import CleanConfig  # noqa: E402
from tasks.train.run import run_train  # noqa: E402

DECAY_FRAC = 0.5


def config(tmp: Path, shared: Path, dim: int, steps: int):
    cfg = demo_config(tmp, dim, 128, {
        "steps": steps, "save_every": steps, "save_final": False, "log_every": 1, "seq_len": 128, "num_gpus": 1,
        "micro_batch_size": 2, "grad_accum": 1, "export_hf": False, "schedule": "wsd", "decay_frac": DECAY_FRAC,
        "lr": 3e-3, "min_lr": 0.0, "warmup_steps": 20, "eval_every": steps // 10, "eval_samples_per_channel": 32,
        "anomaly": {"enabled": False}})  # batch-2 gradient spikes are this benchmark's weather, not its subject
    corpora = shared / "corpora"
    sources = [{"path": str(corpora / "en" / "wikitext2_test.raw"), "text_unit": "line", "name": "en-wiki"},
               {"path": str(corpora / "zh" / "zhwiki_simplified_00.jsonl"), "name": "zh-wiki"}]
    clean = CleanConfig.model_validate({**cfg.clean.model_dump(), "sources": sources})
    return cfg.model_copy(update={"clean": clean})


def one_run(cfg, tmp: Path, z: float, seed: int) -> dict:
    out = tmp / f"z{z:g}-seed{seed}"
    train = cfg.train.changed(z_loss=z, seed=seed)
    run_train(cfg.model, train, tmp / "tokenizer", tmp / "tokens", out, {}, log_line=lambda _: None)
    lines = read_jsonl(out / "metrics.jsonl")
    steps = {m["step"]: m for m in lines if "loss" in m}
    evals = [m for m in lines if any(k.startswith("eval_ppl_") for k in m)]
    first_decay, last = decay_start(cfg.train.steps, DECAY_FRAC) + 1, cfg.train.steps
    tenth = max(1, (last - first_decay) // 10)
    decay_losses = [steps[s]["loss"] for s in range(first_decay, last + 1)]
    windows = [statistics.mean(decay_losses[k:k + tenth]) for k in range(0, len(decay_losses) - tenth + 1)]
    held_out = [v for k, v in evals[-1].items() if k.startswith("eval_ppl_")]
    return {"z": z, "seed": seed, "eval_loss": statistics.mean(math.log(v) for v in held_out),
            "log_z_decay_start": steps[first_decay]["log_z"], "log_z_end": statistics.mean(
                steps[s]["log_z"] for s in range(last - tenth + 1, last + 1)),
            "late_rise": windows[-1] - min(windows)}


def report(runs: list[dict]) -> None:
    print(f"\n{'z':>7} {'seed':>4} {'held-out':>9} {'vs z=0':>8} {'log Z at decay':>14} {'log Z end':>9} "
          f"{'late rise':>9}")
    base = {r["seed"]: r for r in runs if r["z"] == 0}
    for r in sorted(runs, key=lambda r: (r["z"], r["seed"])):
        delta = r["eval_loss"] - base[r["seed"]]["eval_loss"] if r["seed"] in base else float("nan")
        print(f"{r['z']:>7g} {r['seed']:>4} {r['eval_loss']:>9.4f} {delta:>+8.4f} {r['log_z_decay_start']:>14.3f} "
              f"{r['log_z_end']:>9.3f} {r['late_rise']:>9.4f}")
    print("\nmedians over seeds:")
    for z in sorted({r["z"] for r in runs}):
        mine = [r for r in runs if r["z"] == z]
        deltas = [r["eval_loss"] - base[r["seed"]]["eval_loss"] for r in mine if r["seed"] in base]
        print(f"  z={z:g}: held-out {statistics.median(r['eval_loss'] for r in mine):.4f} "
              f"({statistics.median(deltas):+.4f} vs z=0), log Z at the end "
              f"{statistics.median(r['log_z_end'] for r in mine):.3f}, late rise "
              f"{statistics.median(r['late_rise'] for r in mine):.4f}")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--z", type=float, nargs="+", default=[0.0, 1e-5, 1e-4, 1e-3])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    args = parser.parse_args()
    if args.shared is None or not (args.shared / "corpora").is_dir():
        sys.exit("error: this benchmark trains on ../shared/corpora; pass --shared <folder holding corpora/>")
    tmp = Path(tempfile.mkdtemp(prefix="z-loss-bench-"))
    cfg = config(tmp, args.shared, args.dim, args.steps)
    prepare(cfg, tmp)
    runs = []
    for seed in range(args.seeds):
        for z in args.z:
            runs.append(one_run(cfg, tmp, z, seed))
            r = runs[-1]
            print(f"z={z:g} seed={seed}: held-out {r['eval_loss']:.4f}, log Z {r['log_z_decay_start']:.3f} -> "
                  f"{r['log_z_end']:.3f}, late rise {r['late_rise']:.4f}", flush=True)
    report(runs)


if __name__ == "__main__":
    main()
