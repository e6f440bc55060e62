"""Tokens/s of the training program against a bare DeepSpeed loop: same model, batch, data and ranks, one run.

    python benchmarks/train_overhead.py [--steps 40] [--dim 256] [--rounds 2]

Prepares the demo corpus (clean -> tokenizer -> tokenize), then alternates:
  program    `run_train` (2 CPU ranks, gloo): sampler, per-channel loss, metrics to JSON lines
             every step, MFU/memory, checkpoint at the end
  bare       benchmarks/_bare_deepspeed.py: the same spec (model, DeepSpeed config, dataset),
             forward / backward / step and nothing else
Both are timed as wall time between consecutive steps (the program's from its
metrics lines), medians over the steps after the first five. The ratio is given
over all steps and as the median of the rounds' own ratios (each round runs both
back to back, so a slow spell of the shared machine hits one round, not one side).
Target: program >= 0.95x bare.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._demo_run import demo_config, prepare  # noqa: E402
from model.protocol import read_jsonl  # noqa: E402
from tasks.common.ports import free_port  # noqa: E402
from tasks.train.run import launcher_env, remove_shm_buffers, run_train  # noqa: E402

SKIP = 5


def config(tmp: Path, dim: int, steps: int):
    return demo_config(tmp, dim, 256, {"steps": steps, "save_every": steps, "log_every": 1, "seq_len": 256,
                                       "micro_batch_size": 4, "grad_accum": 1})


def program_steps(cfg, tmp: Path, k: int) -> list[float]:
    out = tmp / f"program-{k}"
    run_train(cfg.model, cfg.train, tmp / "tokenizer", tmp / "tokens", out, {}, log_line=lambda _: None)
    stamps = [m["time"] for m in read_jsonl(out / "metrics.jsonl")]
    return [b - a for a, b in zip(stamps, stamps[1:])][SKIP:]


def bare_steps(cfg, tmp: Path, steps: int) -> list[float]:
    spec = tmp / "program-0" / "spec.json"
    deepspeed = str(Path(sys.executable).parent / "deepspeed")
    port = free_port()
    try:
        proc = subprocess.run([deepspeed, "--master_port", str(port), "--num_gpus", str(cfg.train.cluster.num_gpus),
                               str(ROOT / "benchmarks" / "_bare_deepspeed.py"), "--spec", str(spec), "--steps", str(steps)],
                              capture_output=True, text=True, env=launcher_env(cfg.train, {}))
    finally:
        remove_shm_buffers(port)
    if proc.returncode:
        raise RuntimeError(proc.stdout[-2000:] + proc.stderr[-2000:])
    line = next(ln for ln in reversed(proc.stdout.splitlines()) if '"step_seconds"' in ln)
    return json.loads(line[line.index("{"):])["step_seconds"][SKIP + 1:]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="train-bench-"))
    try:
        cfg = config(tmp, args.dim, args.steps)
        prepare(cfg, tmp)
        batch = cfg.train.batch
        tokens_per_step = batch.micro_batch_size * cfg.train.cluster.num_gpus * batch.grad_accum * batch.seq_len
        program, bare, round_ratios = [], [], []
        for k in range(args.rounds):  # alternate, so drift on a shared machine hits both
            p_k, b_k = program_steps(cfg, tmp, k), bare_steps(cfg, tmp, args.steps)
            program, bare = program + p_k, bare + b_k
            round_ratios.append(statistics.median(b_k) / statistics.median(p_k))
        p, b = statistics.median(program), statistics.median(bare)
        print(f"\nmodel dim {args.dim}, 4 layers, seq 256, global batch {tokens_per_step} tokens, "
              f"{cfg.train.cluster.num_gpus} CPU ranks, {os.cpu_count()} cores; medians of {len(program)} / {len(bare)} steps")
        print(f"{'loop':<10}{'s/step':>10}{'tokens/s':>12}{'ratio':>8}")
        print(f"{'bare':<10}{b:>10.4f}{tokens_per_step / b:>12,.0f}{1.0:>8.3f}")
        print(f"{'program':<10}{p:>10.4f}{tokens_per_step / p:>12,.0f}{b / p:>8.3f}   (target >= 0.95)")
        print(f"per-round ratios {', '.join(f'{r:.3f}' for r in round_ratios)}; "
              f"median {statistics.median(round_ratios):.3f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
