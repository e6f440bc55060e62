"""The GPU check: the training program on a GPU machine as a cluster runs it, in a few minutes.

    python benchmarks/gpu_check.py                       # after `make install` on a GPU node (make gpu-check)
    python benchmarks/gpu_check.py --prepared DIR        # a run root with complete tokenizer/ and tokens/
    python benchmarks/gpu_check.py --dry-run             # the same checks on CPU ranks, tiny sizes

Every check goes through the pipeline's own code: the train stage launches
`deepspeed` with NCCL, the ranks run model/train.py, the figures come from
its metrics.jsonl. The data are the demo corpus's tokens (prepared here, or
with --prepared from a run root made elsewhere); the models' embedding tables
are sized as their configs' tokenizers give them (token ids below the demo
vocabulary do not change the cost of a step).

  train_500m_bf16    500M preset, bf16, seq 2048, one GPU per rank, ~30 steps: tokens/s, TFLOP/s, MFU, peak memory
  zero2_125m         125M preset, ZeRO-2, seq 2048, activation checkpointing off and on: step time and memory
  rollback_drill     a NaN loss injected at a data position: anomaly, rollback, skip-ahead past it, finish
  hf_export_parity   the drill's final checkpoint exported to HF Llama; transformers' logits against ours, on the GPU
  preflight          nvidia-smi inventory, the NCCL all-reduce probe, nccl-tests and nvbandwidth when built
                     (--gpu-tools DIR: nccl-tests/ and nvbandwidth/ sources to build with infra/build_gpu_tools.sh)

Writes <out>/gpu-<date>.json: device, versions, mfu_500m_bf16 and checks: {name: {ok, ...}}.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import yaml  # noqa: E402

from model.protocol import read_jsonl  # noqa: E402
from pretrain.config import ModelConfig, PreflightConfig, RecoveryConfig, TrainConfig, load_config  # noqa: E402

SKIP_STEPS = 5  # warm-up steps left out of the medians (1 in a dry run)
MFU_TARGET = 0.45


@dataclass
class Context:
    run_root: Path       # complete tokenizer/ and tokens/
    work: Path           # where the checks train
    dry_run: bool
    gpu_tools: Path | None

    @property
    def accelerator(self) -> str:
        return "cpu" if self.dry_run else "cuda"

    @property
    def ranks(self) -> int:
        return 1 if self.dry_run else max(1, torch.cuda.device_count())


def prepare(run_root: Path) -> Path:
    """clean -> tokenizer -> tokenize of the demo corpus (needs the full install: the clean stage's packages)."""
    from pretrain.config import parse_config
    from tasks.clean.stage import run_clean
    from tasks.tokenize import run_tokenize
    from tasks.tokenizer.train import run_tokenizer

    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["run_root"] = str(run_root)
    data["clean"]["sources"] = [{"path": str(ROOT / "demo/corpus/paragraphs.jsonl"), "name": "demo", "id_field": "id"},
                                {"path": "{stdlib}/json/*.py", "name": "stdlib-json", "channel_hint": "code"}]
    cfg = parse_config(data)
    run_clean(cfg.clean, run_root / "clean")
    run_tokenizer(cfg.tokenizer, run_root / "clean", run_root / "tokenizer")
    run_tokenize(cfg.tokenize, run_root / "clean", run_root / "tokenizer", run_root / "tokens")
    return run_root


def sized_tokenizer(ctx: Context, config: str) -> tuple[Path, int]:
    """The prepared tokenizer with the embedding rows the config's tokenizer settings give (a dry run keeps its own)."""
    from tasks.tokenizer.train import embedding_rows

    if ctx.dry_run:
        return ctx.run_root / "tokenizer", json.loads((ctx.run_root / "tokenizer" / "report.json").read_text())["embedding_rows"]
    t = load_config(ROOT / "configs" / config).tokenizer
    rows = embedding_rows(t.vocab_size + t.reserved_tokens, t.pad_to_multiple)
    out = ctx.work / f"tokenizer-{rows}"
    if not out.exists():
        shutil.copytree(ctx.run_root / "tokenizer", out)
        report = json.loads((out / "report.json").read_text())
        report["embedding_rows"] = rows
        (out / "report.json").write_text(json.dumps(report, indent=2))
    return out, rows


def model_and_train(ctx: Context, preset: str, **train) -> tuple[ModelConfig, TrainConfig]:
    if ctx.dry_run:  # the same shapes of run, CPU-sized
        preset = "debug"
        train.update(seq_len=64, micro_batch_size=2, steps=4, warmup_steps=1)
    base = dict(micro_batch_size=8, grad_accum=1, lr=3e-4, min_lr=3e-5, warmup_steps=5, precision="bf16",
                accelerator=ctx.accelerator, num_gpus=ctx.ranks, log_every=1, save_every=10**6, export_hf=False,
                eval_samples_per_channel=0, anomaly={"enabled": False}, keep_last=1)
    model = ModelConfig(preset=preset, max_seq_len=max(2048, train.get("seq_len", 2048)))
    return model, TrainConfig(**{**base, **train})


def throughput(ctx: Context, name: str, config: str, model: ModelConfig, train: TrainConfig) -> dict:
    """One training run through the train stage; medians over the steps after the warm-up."""
    from tasks.train.run import run_train

    tokenizer, rows = sized_tokenizer(ctx, config)
    out = ctx.work / name
    started = time.perf_counter()
    run_train(model, train, tokenizer, ctx.run_root / "tokens", out, {}, log_line=lambda line: print(f"  {line}"))
    metrics = [m for m in read_jsonl(out / "metrics.jsonl") if "tokens_per_s" in m][1 if ctx.dry_run else SKIP_STEPS:]
    memory = max((m.get("gpu_mem_allocated_gb", m.get("rss_gb", 0.0)) for m in metrics), default=None)
    result = {"steps_measured": len(metrics), "embedding_rows": rows, "seq_len": train.seq_len,
              "micro_batch_size": train.micro_batch_size, "ranks": train.num_gpus, "zero_stage": train.zero_stage,
              "activation_checkpointing": train.activation_checkpointing, "precision": train.precision,
              "tokens_per_s": statistics.median(m["tokens_per_s"] for m in metrics),
              "step_time_s": statistics.median(m["step_time_s"] for m in metrics),
              "tflops_per_s": statistics.median(m["tflops_per_s"] for m in metrics),
              "peak_memory_gb": memory, "wall_s": round(time.perf_counter() - started, 1)}
    if all("mfu" in m for m in metrics):
        result["mfu"] = statistics.median(m["mfu"] for m in metrics)
    shutil.rmtree(out / "checkpoints", ignore_errors=True)
    return result


def check_500m(ctx: Context) -> dict:
    model, train = model_and_train(ctx, "500m", seq_len=2048, micro_batch_size=16, steps=30, zero_stage=1)
    result = throughput(ctx, "train_500m_bf16", "500m.yaml", model, train)
    mfu = result.get("mfu")
    return {"ok": mfu is not None or ctx.dry_run, **result, "target_mfu": MFU_TARGET,
            "meets_target": None if mfu is None else mfu >= MFU_TARGET}


def check_125m_zero2(ctx: Context) -> dict:
    runs = {}
    for label, ac in (("checkpointing_off", False), ("checkpointing_on", True)):
        model, train = model_and_train(ctx, "125m", seq_len=2048, micro_batch_size=16, steps=20, zero_stage=2,
                                       activation_checkpointing=ac)
        runs[label] = throughput(ctx, f"zero2_125m_{label}", "125m.yaml", model, train)
    off, on = runs["checkpointing_off"], runs["checkpointing_on"]
    return {"ok": True, **runs, "time_cost_pct": round(100 * (on["step_time_s"] / off["step_time_s"] - 1), 1),
            "memory_saved_pct": round(100 * (1 - on["peak_memory_gb"] / off["peak_memory_gb"]), 1)
            if off["peak_memory_gb"] else None}


def check_rollback(ctx: Context) -> dict:
    """Monitored training with a NaN loss at a known data position: rollback, skip-ahead, finish."""
    from model.checkpoint import read_meta
    from tasks.train.monitored import run_monitored
    from tasks.train.recovery import decisions

    model = ModelConfig(preset="debug")
    train = TrainConfig(seq_len=128, micro_batch_size=4, steps=12, save_every=3, lr=1e-3, min_lr=1e-4, warmup_steps=2,
                        precision="bf16", accelerator=ctx.accelerator, num_gpus=ctx.ranks, export_hf=False,
                        eval_samples_per_channel=0, recovery=RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1))
    per_step = train.micro_batch_size * train.num_gpus * train.grad_accum
    poisoned = (7 * per_step, 8 * per_step)  # step 8's samples
    out = ctx.work / "rollback_drill"
    os.environ["PRETRAIN_NAN_POSITIONS"] = f"{poisoned[0]}-{poisoned[1]}"
    try:
        result = run_monitored(model, train, ctx.run_root / "tokenizer", ctx.run_root / "tokens", out, {},
                               log_line=lambda line: print(f"  {line}"))
    finally:
        os.environ.pop("PRETRAIN_NAN_POSITIONS")
    made = decisions(out)
    rollback = next((d for d in made if d["action"] == "rollback"), None)
    final = read_meta(out / "checkpoints", result["latest_checkpoint"])
    skipped = final["data_position"]["skipped"]
    covers = any(a <= poisoned[0] and poisoned[1] <= b for a, b in skipped)
    return {"ok": bool(result["exit_code"] == 0 and result["latest_step"] == train.steps and rollback and covers),
            "attempts": result["attempts"], "anomaly": rollback and rollback["anomaly"]["kind"],
            "anomaly_step": rollback and rollback["anomaly"]["step"], "rolled_back_to": rollback and rollback["checkpoint"],
            "poisoned_positions": list(poisoned), "skipped": skipped, "final_step": result["latest_step"],
            "recoveries": result["recoveries"], "train_dir": str(out)}


def check_export(ctx: Context, train_dir: Path) -> dict:
    """HF export of a trained checkpoint; transformers' Llama against our model on the same device and tokens."""
    import transformers

    from model.export_hf import load_checkpoint_state
    from model.llama import ModelArgs, Transformer
    from tasks.train.export import export_run_checkpoint

    device = "cpu" if ctx.dry_run else "cuda"
    exported = export_run_checkpoint(train_dir, ctx.run_root / "tokenizer", ctx.work / "hf", dtype="fp32")
    args = ModelArgs(**json.loads((train_dir / "spec.json").read_text())["model"])
    ours = Transformer(args)
    ours.load_state_dict(load_checkpoint_state(train_dir / "checkpoints", exported["tag"]))
    ours = ours.to(device).eval()
    hf = transformers.LlamaForCausalLM.from_pretrained(exported["export_dir"], dtype=torch.float32).to(device).eval()
    tokens = torch.randint(0, min(args.vocab_size, 8000), (2, 128), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():
        a, b = ours(tokens).float(), hf(tokens).logits.float()
    rel = ((a - b).norm() / b.norm()).item()
    same_argmax = (a.argmax(-1) == b.argmax(-1)).float().mean().item()
    return {"ok": rel < 1e-3 and same_argmax > 0.99, "tag": exported["tag"], "device": device, "relative_error": rel,
            "max_abs_diff": (a - b).abs().max().item(), "argmax_agreement": same_argmax,
            "transformers": transformers.__version__}


def build_gpu_tools(sources: Path, prefix: Path) -> dict:
    """nccl-tests and nvbandwidth from carried sources, for this GPU's architecture only (a minute, not ten)."""
    major, minor = torch.cuda.get_device_capability()
    env = {**os.environ, "NCCL_TESTS_SRC": str(sources / "nccl-tests"), "NVBANDWIDTH_SRC": str(sources / "nvbandwidth"),
           "NVCC_GENCODE": f"-gencode=arch=compute_{major}{minor},code=sm_{major}{minor}"}
    proc = subprocess.run(["bash", str(ROOT / "infra" / "build_gpu_tools.sh"), str(prefix)], env=env,
                          capture_output=True, text=True, timeout=300)
    wheel_nccl = prefix / "nccl" / "lib"
    if wheel_nccl.is_dir():  # the tests load the NCCL of PyTorch's wheel at run time too
        os.environ["LD_LIBRARY_PATH"] = f"{wheel_nccl}:{os.environ.get('LD_LIBRARY_PATH', '')}"
    return {"exit": proc.returncode, "log_tail": (proc.stdout + proc.stderr)[-1500:]}


def check_preflight(ctx: Context) -> dict:
    from tasks.preflight.checks import FAIL, NOT_AVAILABLE, run_checks

    build = None
    tools = ctx.work / "gpu-tools"
    if ctx.gpu_tools and not ctx.dry_run:
        build = build_gpu_tools(ctx.gpu_tools, tools)
    nccl_dir, nvbw = tools / "nccl-tests" / "build", tools / "nvbandwidth" / "nvbandwidth"
    cfg = PreflightConfig(profile="h200-1x", allreduce_ranks=ctx.ranks, allreduce_mb=256 if not ctx.dry_run else 8,
                          storage_test_mb=64, nccl_tests_dir=str(nccl_dir) if nccl_dir.is_dir() else None,
                          nvbandwidth_path=str(nvbw) if nvbw.is_file() else None, min_free_gb=1)
    checks = run_checks(cfg, ctx.work / "preflight")
    table = {c.name: {"status": c.status, "measured": c.measured, "expected": c.expected, "detail": c.detail}
             for c in checks}
    gpu_ones = ("gpu_inventory", "allreduce_probe")
    ran = {n: c for n, c in table.items() if c["status"] != NOT_AVAILABLE}
    ok = all(c["status"] != FAIL for c in ran.values()) and (ctx.dry_run or all(n in ran for n in gpu_ones))
    return {"ok": ok, "checks": table, "tools_build": build}


CHECKS = {
    "train_500m_bf16": check_500m,
    "zero2_125m": check_125m_zero2,
    "rollback_drill": check_rollback,
    "preflight": check_preflight,
}


def versions() -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
           "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0}
    try:
        import deepspeed

        out["deepspeed"] = deepspeed.__version__
    except ImportError:
        out["deepspeed"] = None
    return out


def run_check(name: str, fn, *args) -> dict:
    print(f"== {name}", flush=True)
    started = time.perf_counter()
    try:
        result = fn(*args)
    except Exception as err:  # noqa: BLE001 - a failed check is a result, the others still run
        result = {"ok": False, "error": f"{type(err).__name__}: {err}"[-3000:], "traceback": traceback.format_exc()[-3000:]}
    result["seconds"] = round(time.perf_counter() - started, 1)
    print(f"   {'ok' if result['ok'] else 'FAILED'} in {result['seconds']} s", flush=True)
    return result


def summary(report: dict) -> str:
    lines = [f"{'check':<20}{'ok':>6}{'seconds':>9}  figures"]
    for name, r in report["checks"].items():
        figures = {k: r[k] for k in ("mfu", "tokens_per_s", "tflops_per_s", "peak_memory_gb", "time_cost_pct",
                                      "memory_saved_pct", "attempts", "relative_error", "error") if r.get(k) is not None}
        lines.append(f"{name:<20}{str(r['ok']):>6}{r['seconds']:>9}  " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepared", type=Path, help="a run root with complete tokenizer/ and tokens/ (default: "
                        "prepare the demo corpus here)")
    parser.add_argument("--prepare-only", type=Path, help="prepare the demo corpus into this run root and stop")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--work", type=Path, help="scratch folder for the runs (default: a temporary one)")
    parser.add_argument("--gpu-tools", type=Path, help="folder with nccl-tests/ and nvbandwidth/ sources to build")
    parser.add_argument("--only", nargs="*", choices=[*CHECKS, "hf_export_parity"], help="run these checks only")
    parser.add_argument("--dry-run", action="store_true", help="CPU ranks and tiny sizes: check the script itself")
    args = parser.parse_args()
    if args.prepare_only:
        prepare(args.prepare_only)
        print(f"prepared {args.prepare_only}")
        return 0
    if not args.dry_run and not torch.cuda.is_available():
        print("error: no CUDA device visible; run on a GPU node, or pass --dry-run", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    ctx = Context(args.prepared or prepare(work / "prepared"), work, args.dry_run, args.gpu_tools)
    wanted = set(args.only or [*CHECKS, "hf_export_parity"])
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), **versions(),
              "dry_run": args.dry_run, "checks": {}}
    started = time.perf_counter()
    for name, fn in CHECKS.items():
        if name in wanted:
            report["checks"][name] = run_check(name, fn, ctx)
        if name == "rollback_drill" and "hf_export_parity" in wanted:
            drill = report["checks"].get("rollback_drill", {})
            train_dir = Path(drill["train_dir"]) if drill.get("train_dir") else None
            report["checks"]["hf_export_parity"] = (run_check("hf_export_parity", check_export, ctx, train_dir)
                                                    if train_dir else {"ok": False, "error": "the drill trained nothing",
                                                                       "seconds": 0.0})
    report["mfu_500m_bf16"] = report["checks"].get("train_500m_bf16", {}).get("mfu")
    report["total_seconds"] = round(time.perf_counter() - started, 1)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"gpu-{'dry-run-' if args.dry_run else ''}{datetime.date.today().isoformat()}.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(summary(report))
    print(f"wrote {path} ({report['total_seconds']} s)")
    return 0 if all(r["ok"] for r in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
