"""The GPU check's checks: each trains through the pipeline's own code (the train stage's launcher, the ranks'
environment, model/train.py) and asserts what it is named for. benchmarks/gpu_check.py runs each in a process
of its own with a deadline; `--sim` runs them on CPU ranks at small sizes (`make gpu-sim`).

Nothing here is imported on the GPU path but the image's packages and the carried wheels (infra/gpu_image/):
no clean stage, no MLflow, no Prefect.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from model.protocol import EVENTS_FILE, METRICS_FILE, read_jsonl
from pretrain.config import (ModelConfig, PipelineConfig, RecoveryConfig, TrainConfig, embedding_rows, load_config,
                             nested_train)

ROOT = Path(__file__).resolve().parents[1]
MFU_TARGET = 0.45


@dataclass(frozen=True)
class Size:
    """One kind of run, as the GPU runs it and as the simulation shrinks it."""
    preset: str
    seq_len: int
    micro_batch_size: int
    steps: int
    warmup_steps_skipped: int  # left out of the throughput medians
    config: str                # the preset's pipeline config: its tokenizer settings size the embedding
    lr: float = 3e-4
    warmup_steps: int = 5


GPU_SIZES = {
    "500m": Size("500m", 2048, 16, 30, 5, "500m.yaml"),
    "125m": Size("125m", 2048, 16, 12, 3, "125m.yaml"),
    "stage": Size("125m", 2048, 8, 4, 0, "125m.yaml"),
    "variant": Size("500m", 2048, 16, 15, 5, "500m.yaml"),
}
# a 1.3M-parameter model learns within a few steps only at a higher learning rate
SIM_SIZES = {name: Size("debug", 64, 2, 8, 2, "tiny.yaml", lr=3e-3, warmup_steps=1) for name in GPU_SIZES}
SIM_SIZES["stage"] = Size("debug", 64, 2, 4, 0, "tiny.yaml", lr=3e-3, warmup_steps=1)


@dataclass(frozen=True)
class Context:
    run_root: str        # complete tokenizer/ and tokens/
    work: str            # where the checks train, one folder each
    sim: bool            # CPU ranks at small sizes
    gpu_tools: str | None
    variants: tuple[str, ...] | None = None  # mfu_settings runs these only (default: all)

    @property
    def accelerator(self) -> str:
        return "cpu" if self.sim else "cuda"

    @property
    def ranks(self) -> int:
        return 1 if self.sim else max(1, torch.cuda.device_count())

    def size(self, name: str) -> Size:
        return (SIM_SIZES if self.sim else GPU_SIZES)[name]

    def dir(self, name: str) -> Path:
        return Path(self.work) / name

    @property
    def tokenizer(self) -> Path:
        return Path(self.run_root) / "tokenizer"

    @property
    def tokens(self) -> Path:
        return Path(self.run_root) / "tokens"

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Context:
        data = json.loads(text)
        return cls(**{**data, "variants": tuple(data["variants"]) if data.get("variants") else None})


def log_line(line: str) -> None:
    print(f"  {line}", flush=True)


def watched(ctx: Context, **train) -> dict:
    """What every check's runs share: minutes, not the defaults' half hour, before a hang or a stuck collective
    ends the run (the first step included), and no time spent on what the check does not measure."""
    return {"timeout_minutes": 5.0, "first_step_timeout_s": 300.0, "slow_phase_timeout_s": 300.0,
            "stop_grace_s": 20.0, "precision": "bf16", "accelerator": ctx.accelerator, "num_gpus": ctx.ranks,
            "log_every": 1, "export_hf": False, "eval_samples_per_channel": 0, "keep_last": 1, **train}


def sized_tokenizer(ctx: Context, size: Size) -> Path:
    """The prepared tokenizer, with the embedding rows the size's config would give (token ids below the demo
    vocabulary do not change the cost of a step); the simulation keeps the prepared one."""
    prepared = ctx.tokenizer
    if ctx.sim:
        return prepared
    t = load_config(ROOT / "configs" / size.config).tokenizer
    rows = embedding_rows(t.vocab_size + t.reserved_tokens, t.pad_to_multiple)
    out = Path(ctx.work) / f"tokenizer-{rows}"
    if not out.exists():
        shutil.copytree(prepared, out)
        report = json.loads((out / "report.json").read_text())
        (out / "report.json").write_text(json.dumps({**report, "embedding_rows": rows}, indent=2))
    return out


def model_config(size: Size) -> ModelConfig:
    return ModelConfig(preset=size.preset, max_seq_len=max(size.seq_len, 256))


def throughput_run(ctx: Context, name: str, size: Size, **train) -> dict:
    """One training run through the train stage, no checkpoint; the loss over every step, speed and memory as
    medians over the steps after the warm-up."""
    from tasks.train.run import run_train

    out = ctx.dir(name)
    shutil.rmtree(out, ignore_errors=True)
    shape = {"seq_len": size.seq_len, "micro_batch_size": size.micro_batch_size, "steps": size.steps,
             "warmup_steps": size.warmup_steps, "lr": size.lr, "min_lr": size.lr / 10, "zero_stage": 1,
             "save_every": 10**6, "save_final": False, "anomaly": {"enabled": False}}
    settings = TrainConfig(**nested_train(watched(ctx, **{**shape, **train})))
    started = time.perf_counter()
    run_train(model_config(size), settings, sized_tokenizer(ctx, size), ctx.tokens, out, {}, log_line=log_line)
    compute = settings.compute
    return {**measured(out, size.warmup_steps_skipped), "seq_len": size.seq_len, "preset": size.preset,
            "micro_batch_size": settings.batch.micro_batch_size, "ranks": settings.cluster.num_gpus,
            "zero_stage": settings.cluster.zero_stage, "activation_checkpointing": compute.activation_checkpointing,
            "compile": compute.compile and compute.compile_backend, "sdpa_backend": compute.sdpa_backend,
            "checkpoints_saved": len(list((out / "checkpoints").glob("step_*"))) if (out / "checkpoints").is_dir() else 0,
            "wall_s": round(time.perf_counter() - started, 1)}


def measured(train_dir: Path, skip: int) -> dict:
    lines = [m for m in read_jsonl(train_dir / METRICS_FILE) if "tokens_per_s" in m]
    losses = [m["loss"] for m in lines]
    timed = lines[skip:] or lines[-1:]
    memory = [m.get("gpu_mem_allocated_gb", m.get("rss_gb")) for m in timed]
    k = max(1, min(3, len(losses) // 3))
    result = {"steps": len(lines), "steps_measured": len(timed), "losses": [round(x, 4) for x in losses],
              "loss_first": statistics.mean(losses[:k]) if losses else None,
              "loss_last": statistics.mean(losses[-k:]) if losses else None,
              "loss_finite": bool(losses) and all(math.isfinite(x) for x in losses),
              "tokens_per_s": statistics.median(m["tokens_per_s"] for m in timed) if timed else None,
              "step_time_s": statistics.median(m["step_time_s"] for m in timed) if timed else None,
              "tflops_per_s": statistics.median(m["tflops_per_s"] for m in timed) if timed else None,
              "peak_memory_gb": max((x for x in memory if x is not None), default=None)}
    result["loss_falls"] = bool(result["loss_finite"] and result["loss_last"] < result["loss_first"])
    if timed and all("mfu" in m for m in timed):
        result["mfu"] = statistics.median(m["mfu"] for m in timed)
    return result


def trained_well(r: dict, sim: bool) -> bool:
    """A throughput run says something: finite loss that falls, speed measured (MFU on a GPU), memory read."""
    return bool(r["loss_falls"] and r["tokens_per_s"] and r["peak_memory_gb"] and (sim or r.get("mfu"))
                and r["checkpoints_saved"] == 0)


def check_500m(ctx: Context) -> dict:
    r = throughput_run(ctx, "train_500m_bf16", ctx.size("500m"))
    mfu = r.get("mfu")
    return {"ok": trained_well(r, ctx.sim), **r, "target_mfu": MFU_TARGET,
            "meets_target": None if mfu is None else mfu >= MFU_TARGET}


def check_125m_zero2(ctx: Context) -> dict:
    """ZeRO-2 with activation checkpointing off and on: both train, and what checkpointing costs and saves."""
    runs = {label: throughput_run(ctx, f"zero2_125m_{label}", ctx.size("125m"), zero_stage=2,
                                  activation_checkpointing=on)
            for label, on in (("checkpointing_off", False), ("checkpointing_on", True))}
    off, on = runs["checkpointing_off"], runs["checkpointing_on"]
    both = all(trained_well(r, ctx.sim) for r in runs.values())
    return {"ok": both, **runs,
            "time_ratio_on_off": on["step_time_s"] / off["step_time_s"] if both else None,
            "time_cost_pct": round(100 * (on["step_time_s"] / off["step_time_s"] - 1), 1) if both else None,
            "memory_ratio_on_off": on["peak_memory_gb"] / off["peak_memory_gb"] if both else None,
            "memory_saved_pct": round(100 * (1 - on["peak_memory_gb"] / off["peak_memory_gb"]), 1) if both else None}


VARIANTS = {  # each against the 500M run's own settings (micro-batch 16, PyTorch's attention choice, eager)
    "sdpa_flash": {"sdpa_backend": "flash"},
    "compile": {"compile": True, "first_step_timeout_s": 600.0},
    "micro_batch_x2": {"micro_batch_x": 2},
    "activation_checkpointing_x2": {"activation_checkpointing": True, "micro_batch_x": 2},
    # the two that each raised MFU on the first H200 run (2026-12-04), together
    "compile_micro_batch_x2": {"compile": True, "micro_batch_x": 2, "first_step_timeout_s": 600.0},
}


def variant_settings(ctx: Context, size: Size, change: dict) -> dict:
    """A variant's train settings: the micro-batch as a multiple of the size's (32 on a GPU, 4 in the simulation);
    the simulation compiles with aot_eager, capturing the graphs without inductor's C++ build on CPU."""
    change = dict(change)
    if "micro_batch_x" in change:
        change["micro_batch_size"] = size.micro_batch_size * change.pop("micro_batch_x")
    if ctx.sim and change.get("compile"):
        change["compile_backend"] = "aot_eager"
    return change


def check_mfu_settings(ctx: Context) -> dict:
    """The settings that move MFU, each as one short run; the best is what the preset should default to here."""
    size = ctx.size("variant")
    runs = {}
    for name, change in VARIANTS.items():
        if ctx.variants and name not in ctx.variants:
            continue
        try:
            runs[name] = throughput_run(ctx, f"mfu_{name}", size, **variant_settings(ctx, size, change))
        except Exception as err:  # noqa: BLE001 - one setting that cannot run (flash on an old GPU) is a finding
            runs[name] = {"error": f"{type(err).__name__}: {err}"[-1500:]}
    baseline = ctx.dir("train_500m_bf16")
    if (baseline / METRICS_FILE).is_file():
        runs["baseline"] = {**measured(baseline, ctx.size("500m").warmup_steps_skipped), "micro_batch_size":
                            ctx.size("500m").micro_batch_size}
    scored = {n: r.get("mfu") or r.get("tokens_per_s") or 0.0 for n, r in runs.items() if r.get("loss_finite")}
    best = max(scored, key=scored.get) if scored else None
    return {"ok": all(r.get("loss_finite") and r.get("tokens_per_s") for r in runs.values()), "runs": runs,
            "best": best, "best_settings": variant_settings(ctx, size, {"baseline": {}, **VARIANTS}[best]) if best else None,
            "ranked_by": "mfu" if not ctx.sim else "tokens_per_s"}


def check_train_stage(ctx: Context) -> dict:
    """The user's path: the train stage launches the ranks, trains a few steps, saves, and a second launch
    resumes from that checkpoint and finishes."""
    from model.checkpoint import read_meta
    from tasks.train.run import run_train

    size, out = ctx.size("stage"), ctx.dir("train_stage")
    shutil.rmtree(out, ignore_errors=True)
    common = watched(ctx, seq_len=size.seq_len, micro_batch_size=size.micro_batch_size, warmup_steps=1, lr=3e-4,
                     min_lr=3e-5, save_every=2, anomaly={"enabled": False})
    tokenizer = sized_tokenizer(ctx, size)
    settings = nested_train(common)
    first = run_train(model_config(size), TrainConfig(**settings, steps=size.steps), tokenizer, ctx.tokens, out, {},
                      log_line)
    second = run_train(model_config(size), TrainConfig(**settings, steps=size.steps + 2), tokenizer, ctx.tokens, out,
                       {}, log_line)
    starts = [e["step"] for e in read_jsonl(out / EVENTS_FILE) if e.get("event") == "start"]
    logged = [m for m in read_jsonl(out / METRICS_FILE) if "loss" in m]
    steps, losses = [m["step"] for m in logged], [m["loss"] for m in logged]
    final = read_meta(out / "checkpoints", second["latest_checkpoint"]) if second["latest_checkpoint"] else {}
    ok = (first["latest_step"] == size.steps and starts == [0, size.steps] and second["latest_step"] == size.steps + 2
          and steps == list(range(1, size.steps + 3)) and all(math.isfinite(x) for x in losses)
          and final.get("step") == size.steps + 2)
    return {"ok": ok, "first_launch": first, "second_launch": second, "start_steps": starts, "steps_logged": steps,
            "final_checkpoint_step": final.get("step"), "preset": size.preset, "seq_len": size.seq_len}


def check_rollback(ctx: Context) -> dict:
    """Monitored training with a NaN loss at a known data position: rollback, skip-ahead, finish."""
    from model.checkpoint import read_meta
    from tasks.train.monitored import run_monitored
    from tasks.train.recovery import decisions

    recovery = RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1)
    train = TrainConfig(**nested_train(watched(ctx, seq_len=128, micro_batch_size=4, steps=12, save_every=3, lr=1e-3,
                                               min_lr=1e-4, warmup_steps=2, recovery=recovery)))
    per_step = train.batch.micro_batch_size * train.cluster.num_gpus * train.batch.grad_accum
    poisoned = (7 * per_step, 8 * per_step)  # step 8's samples
    out = ctx.dir("rollback_drill")
    shutil.rmtree(out, ignore_errors=True)
    os.environ["PRETRAIN_NAN_POSITIONS"] = f"{poisoned[0]}-{poisoned[1]}"
    try:
        result = run_monitored(ModelConfig(preset="debug"), train, ctx.tokenizer, ctx.tokens, out, {}, log_line=log_line)
    finally:
        os.environ.pop("PRETRAIN_NAN_POSITIONS")
    rollback = next((d for d in decisions(out) if d["action"] == "rollback"), None)
    final = read_meta(out / "checkpoints", result["latest_checkpoint"])
    skipped = final["data_position"]["skipped"]
    covers = any(a <= poisoned[0] and poisoned[1] <= b for a, b in skipped)
    return {"ok": bool(result["exit_code"] == 0 and result["latest_step"] == train.steps and rollback and covers),
            "attempts": result["attempts"], "anomaly": rollback and rollback["anomaly"]["kind"],
            "anomaly_step": rollback and rollback["anomaly"]["step"], "rolled_back_to": rollback and rollback["checkpoint"],
            "poisoned_positions": list(poisoned), "skipped": skipped, "final_step": result["latest_step"],
            "recoveries": result["recoveries"]}


def check_export(ctx: Context) -> dict:
    """HF export of the drill's final checkpoint; transformers' Llama against our model on the same device and
    tokens."""
    import transformers

    from model.export_hf import load_checkpoint_state
    from model.llama import ModelArgs, Transformer
    from tasks.train.export import export_run_checkpoint

    train_dir = ctx.dir("rollback_drill")
    if not (train_dir / "checkpoints").is_dir():
        return {"ok": False, "error": "the rollback drill left no checkpoint to export (it did not run or failed)"}
    device = "cpu" if ctx.sim else "cuda"
    exported = export_run_checkpoint(train_dir, ctx.tokenizer, ctx.dir("hf"), dtype="fp32")
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


def preflight_config(ctx: Context, root: Path, tools: Path) -> PipelineConfig:
    """The demo config with this machine's preflight and a short training shape for the comm-share profile."""
    from pretrain.config import parse_config
    import yaml

    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    size = ctx.size("stage")
    nccl_dir, nvbw = tools / "nccl-tests" / "build", tools / "nvbandwidth" / "nvbandwidth"
    data.update(run_root=str(root), model={"preset": size.preset, "max_seq_len": max(size.seq_len, 256)},
                train=nested_train(watched(ctx, seq_len=size.seq_len, micro_batch_size=size.micro_batch_size,
                                           steps=10, warmup_steps=1, zero_stage=1)),
                preflight={"profile": "cpu-ci" if ctx.sim else "h200-1x", "allreduce_ranks": ctx.ranks,
                           "allreduce_mb": 8 if ctx.sim else 256, "storage_test_mb": 64, "min_free_gb": 1,
                           "report_only": ["shared_storage"], "comm_profile_steps": 3,
                           "nccl_tests_dir": str(nccl_dir) if nccl_dir.is_dir() else None,
                           "nvbandwidth_path": str(nvbw) if nvbw.is_file() else None})
    return parse_config(data)


def check_preflight(ctx: Context) -> dict:
    """The preflight stage's own code on this machine: inventory, the NCCL all-reduce probe, nccl-tests and
    nvbandwidth when built, and the comm-share profile (training steps under NCCL), gated."""
    from tasks.preflight.checks import FAIL, NOT_AVAILABLE
    from tasks.preflight.suite import run_preflight

    root, tools = ctx.dir("preflight_root"), ctx.dir("gpu-tools")
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for stage in ("tokenizer", "tokens"):  # the prepared outputs, as the stages before preflight leave them
        (root / stage).symlink_to(Path(ctx.run_root).resolve() / stage)
    build = build_gpu_tools(Path(ctx.gpu_tools), tools) if ctx.gpu_tools and not ctx.sim else None
    report = run_preflight(preflight_config(ctx, root, tools), root, log_line)
    table = {c["name"]: {k: c[k] for k in ("status", "measured", "expected", "detail")} for c in report["checks"]}
    must_run = ("allreduce_probe", "comm_share") + (() if ctx.sim else ("gpu_inventory",))
    missing = [n for n in must_run if table.get(n, {}).get("status") in (None, NOT_AVAILABLE)]
    return {"ok": report["passed_gate"] and not missing and not any(c["status"] == FAIL for c in table.values()),
            "passed_gate": report["passed_gate"], "did_not_run": missing, "checks": table, "tools_build": build}


CHECKS = {  # the order they run in: what says the most first, so a run cut short still says it
    "preflight": check_preflight,
    "train_500m_bf16": check_500m,
    "train_stage": check_train_stage,
    "zero2_125m": check_125m_zero2,
    "rollback_drill": check_rollback,
    "hf_export_parity": check_export,
    "mfu_settings": check_mfu_settings,
}
GPU_DEADLINE_S = {"preflight": 180, "train_500m_bf16": 200, "train_stage": 180, "zero2_125m": 200,
                  "rollback_drill": 200, "hf_export_parity": 120, "mfu_settings": 420}
SIM_DEADLINE_S = {name: 420 for name in CHECKS}
