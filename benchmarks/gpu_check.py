"""The GPU check: the training program on a GPU machine as a cluster runs it, in under ten minutes.

    make gpu-prepare                                       # here: carried wheels (.gpu/site) + prepared tokens
    PYTHONPATH=.gpu/site python3 benchmarks/gpu_check.py --prepared .gpu/prepared --out "$OUT"   # on the GPU machine
    python benchmarks/gpu_check.py                         # on your own GPU node after `make install` (make gpu-check)
    make gpu-sim                                           # the same checks on CPU ranks, in a copy of the GPU image

Every check goes through the pipeline's own code (the train stage's launcher and the ranks' environment,
model/train.py, the preflight stage) and asserts what it is named for; benchmarks/_gpu_checks.py has them.
Each runs in a process of its own under a wall-clock deadline (and --budget-s for the whole), in this order,
what says the most first:

  preflight          nvidia-smi inventory, the NCCL all-reduce probe, nccl-tests / nvbandwidth when built
                     (--gpu-tools DIR), the comm-share profile (training steps under NCCL), through the gate
  train_500m_bf16    500M preset, bf16, seq 2048, 30 steps, no checkpoint: loss finite and falling, tokens/s,
                     TFLOP/s, MFU (target >= 45% on an H200), peak memory
  train_stage        the train stage launches, trains 4 steps, saves; a second launch resumes and finishes
  zero2_125m         125M under ZeRO-2, activation checkpointing off and on: both train; time and memory ratios
  rollback_drill     a NaN loss injected at a data position: anomaly, rollback, skip-ahead past it, finish
  hf_export_parity   the drill's checkpoint exported to HF Llama; transformers' logits against ours
  mfu_settings       SDPA flash only, torch.compile, micro-batch 32, activation checkpointing, compile with
                     micro-batch 32: the fastest (--variants NAME... runs some only)

<out>/gpu-<date>.json (device, versions, mfu_500m_bf16, checks: {name: {ok, ...}}) is rewritten after every
check, so a run killed at its limit still returns what it measured.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import torch  # noqa: E402

from _gpu_checks import CHECKS, GPU_DEADLINE_S, SIM_DEADLINE_S, VARIANTS, Context  # noqa: E402
from tasks.common.lifetime import kill_group  # noqa: E402

KILL_GRACE_S = 30  # after SIGTERM: the ranks save nothing (no checkpoint is due) and leave


def prepare(run_root: Path) -> Path:
    """clean -> tokenizer -> tokenize of the demo corpus (needs the full install: the clean stage's packages)."""
    import yaml

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


def versions(sim: bool) -> dict:
    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
           "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
           "gpus": torch.cuda.device_count() if torch.cuda.is_available() else 0, "simulated": sim}
    for package in ("deepspeed", "transformers", "pydantic"):  # read, not imported: DeepSpeed's import is seconds
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def run_child(name: str, ctx: Context, deadline_s: float) -> dict:
    """One check in its own process session; past its deadline it is stopped, its ranks with it."""
    result_path = Path(ctx.work) / f"{name}.result.json"
    result_path.unlink(missing_ok=True)
    context = Path(ctx.work) / "context.json"
    context.write_text(ctx.to_json())
    cmd = [sys.executable, "-u", __file__, "--child", name, "--context", str(context), "--result", str(result_path)]
    started = time.time()
    proc = subprocess.Popen(cmd, start_new_session=True)
    try:
        code = proc.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        stop(proc, Path(ctx.work) / name)
        release_extension_locks(started)
        return {"ok": False, "error": f"deadline: still running after {deadline_s:.0f} s, stopped"}
    if result_path.is_file():
        return json.loads(result_path.read_text())
    return {"ok": False, "error": f"the check's process exited with code {code} and no result"}


def stop(proc: subprocess.Popen, train_dir: Path) -> None:
    """SIGTERM (the train stage stops its ranks), then SIGKILL for the check and any rank of its runs."""
    kill_group(proc, grace_s=KILL_GRACE_S)
    subprocess.run(["pkill", "-KILL", "-f", str(train_dir)], check=False)  # ranks in the launcher's own session
    proc.wait()


def extension_build_folder() -> str:
    """The folder torch builds this interpreter's extensions in (torch.utils.cpp_extension._get_build_directory):
    `py<version><abiflags>_<cpu|cu<version>>`; the check's ranks run this interpreter."""
    cuda = "cpu" if torch.version.cuda is None else f"cu{torch.version.cuda.replace('.', '')}"
    return f"py{sys.version_info.major}{sys.version_info.minor}{getattr(sys, 'abiflags', '')}_{cuda}"


def release_extension_locks(since: float) -> list[str]:
    """torch's just-in-time extension locks (`<TORCH_EXTENSIONS_DIR>/<build>/<op>/lock`) made since the stopped
    check started, in this interpreter's build folder only. A rank killed while it loads an op (DeepSpeed's CPU
    shared-memory op, at every start) leaves its lock behind, and every later launch on this machine waits on it
    forever. The check's processes are all gone by now, so such a lock is theirs; a lock in another interpreter's
    folder belongs to another job (the suite's `make gpu-sim` building the op for Python 3.12 lost its live lock to
    this, and failed on FileNotFoundError: .../py312_cu130/deepspeed_shm_comm/lock)."""
    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions")
    released = []
    for lock in (root / extension_build_folder()).glob("*/lock"):
        try:
            if lock.stat().st_mtime >= since:
                lock.unlink()
                released.append(str(lock))
        except FileNotFoundError:
            continue
    return released


def child_main(name: str, context: Path, result: Path) -> int:
    ctx = Context.from_json(context.read_text())
    try:
        out = CHECKS[name](ctx)
    except Exception as err:  # noqa: BLE001 - a failed check is a result, the others still run
        out = {"ok": False, "error": f"{type(err).__name__}: {err}"[-3000:], "traceback": traceback.format_exc()[-3000:]}
    result.write_text(json.dumps(out, indent=2, default=str))
    return 0


def summary(report: dict) -> str:
    lines = [f"{'check':<20}{'ok':>7}{'seconds':>9}  figures" + ("   (SIMULATED: CPU ranks)" if report["simulated"] else "")]
    for name, r in report["checks"].items():
        figures = {k: r[k] for k in ("mfu", "tokens_per_s", "peak_memory_gb", "loss_first", "loss_last",
                                      "time_cost_pct", "memory_saved_pct", "attempts", "relative_error", "best",
                                      "passed_gate", "error") if r.get(k) is not None}
        lines.append(f"{name:<20}{str(r.get('ok')):>7}{r.get('seconds', 0):>9}  " + ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items()))
    return "\n".join(lines)


def write(report: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=str) + "\n")
    tmp.replace(path)


def run_all(ctx: Context, wanted: list[str], out: Path, budget_s: float | None, deadline_s: float | None = None
            ) -> dict:
    deadlines = {n: deadline_s or d for n, d in (SIM_DEADLINE_S if ctx.sim else GPU_DEADLINE_S).items()}
    path = out / f"gpu-{datetime.date.today().isoformat()}.json"
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              **versions(ctx.sim), "planned": wanted, "checks": {}, "mfu_500m_bf16": None}
    started = time.perf_counter()
    report["total_seconds"] = 0.0
    for name in wanted:
        left = None if budget_s is None else budget_s - (time.perf_counter() - started)
        if left is not None and left < 30:
            report["checks"][name] = {"ok": False, "error": f"not started: {left:.0f} s of --budget-s left",
                                      "seconds": 0.0}
            continue
        report["running"] = name
        write(report, path)
        print(f"== {name}", flush=True)
        t0 = time.perf_counter()
        result = run_child(name, ctx, deadlines[name] if left is None else min(deadlines[name], left - 10))
        result["seconds"] = round(time.perf_counter() - t0, 1)
        report["checks"][name] = result
        report["mfu_500m_bf16"] = report["checks"].get("train_500m_bf16", {}).get("mfu")
        report["total_seconds"] = round(time.perf_counter() - started, 1)
        write(report, path)
        print(f"   {'ok' if result.get('ok') else 'FAILED'} in {result['seconds']} s", flush=True)
    report.pop("running", None)
    write(report, path)
    print(summary(report))
    print(f"wrote {path} ({report['total_seconds']} s)")
    return report


def absolute_pythonpath() -> None:
    """`PYTHONPATH=.gpu/site` as typed on the machine: absolute, so every process the checks start (launchers,
    ranks, probes in other working directories) finds the carried wheels."""
    entries = [e for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    if entries:
        os.environ["PYTHONPATH"] = os.pathsep.join(str(Path(e).resolve()) for e in entries)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prepared", type=Path, help="a run root with complete tokenizer/ and tokens/ (default: "
                        "prepare the demo corpus here, which needs the full install)")
    parser.add_argument("--prepare-only", type=Path, help="prepare the demo corpus into this run root and stop")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or ROOT / "benchmarks" / "results"))
    parser.add_argument("--work", type=Path, help="scratch folder for the runs (default: a temporary one)")
    parser.add_argument("--gpu-tools", type=Path, help="folder with nccl-tests/ and nvbandwidth/ sources to build")
    parser.add_argument("--only", nargs="*", choices=list(CHECKS), help="run these checks only")
    parser.add_argument("--variants", nargs="*", choices=list(VARIANTS), help="mfu_settings runs these only")
    parser.add_argument("--budget-s", type=float, help="wall-clock budget for all checks: a check is cut to what "
                        "is left, and one with under 30 s left is not started")
    parser.add_argument("--deadline-s", type=float, help="every check's deadline (default: each its own, "
                        "benchmarks/_gpu_checks.py)")
    parser.add_argument("--sim", action="store_true", help="CPU ranks at small sizes, the same code path "
                        "(make gpu-sim runs it in a copy of the GPU machine's image)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--context", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    absolute_pythonpath()
    if args.child:
        return child_main(args.child, args.context, args.result)
    if args.prepare_only:
        prepare(args.prepare_only)
        print(f"prepared {args.prepare_only}")
        return 0
    if not args.sim and not torch.cuda.is_available():
        print("error: no CUDA device visible; run on a GPU node, or pass --sim for CPU ranks", file=sys.stderr)
        return 2
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    run_root = args.prepared or prepare(work / "prepared")
    ctx = Context(str(run_root.resolve()), str(work.resolve()), args.sim, str(args.gpu_tools) if args.gpu_tools else None,
                  tuple(args.variants) if args.variants else None)
    args.out.mkdir(parents=True, exist_ok=True)
    report = run_all(ctx, [n for n in CHECKS if n in (args.only or CHECKS)], args.out, args.budget_s, args.deadline_s)
    return 0 if all(r.get("ok") for r in report["checks"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
