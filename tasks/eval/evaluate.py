"""The eval stage: score a checkpoint, keep a history per run, compare with the checkpoint evaluated before it."""
from __future__ import annotations

from pathlib import Path

from model import checkpoint as ckpt
from model.checkpoint_eval import evaluate_checkpoint
from model.protocol import append_jsonl, read_jsonl
from pretrain.config import PipelineConfig
from tasks.eval.task_files import compare_tasks, score_task_files

HISTORY = "history.jsonl"


def eval_dir(cfg: PipelineConfig) -> Path:
    return cfg.run_root_path() / "eval"


def history(cfg: PipelineConfig) -> list[dict]:
    return read_jsonl(eval_dir(cfg) / HISTORY)


def pick_checkpoint(cfg: PipelineConfig, tag: str | None) -> str | None:
    """The named checkpoint, or the newest complete one; None when training has saved none yet."""
    ckpt_dir = cfg.run_root_path() / "train" / "checkpoints"
    if tag is None and ckpt.latest_complete(ckpt_dir) is None:
        return None
    return ckpt.complete_tag(ckpt_dir, tag)


def compare(previous: dict | None, current: dict, regression_pct: float) -> list[dict]:
    """One row per channel: perplexity now, at the previous evaluated checkpoint, the change, regressed or not."""
    rows = []
    for channel, ppl in sorted(current["ppl"].items()):
        before = (previous or {}).get("ppl", {}).get(channel)
        change = 100 * (ppl / before - 1) if before else None
        rows.append({"channel": channel, "ppl": round(ppl, 4), "previous_ppl": round(before, 4) if before else None,
                     "previous_tag": (previous or {}).get("tag"), "change_pct": round(change, 2) if change is not None else None,
                     "regressed": bool(change is not None and change > regression_pct)})
    return rows


def previous_of(records: list[dict], step: int) -> dict | None:
    """The evaluation of the newest checkpoint older than `step`."""
    older = [r for r in records if r["step"] < step]
    return max(older, key=lambda r: r["step"]) if older else None


def evaluate(cfg: PipelineConfig, tag: str) -> dict:
    """Score `tag` (or return its recorded score: a checkpoint is evaluated once) and compare it."""
    records = history(cfg)
    done = [r for r in records if r["tag"] == tag]
    if done:
        result, reused = done[-1], True
    else:
        result, reused = evaluate_checkpoint(cfg.run_root_path() / "train", tag, cfg.eval.device, cfg.eval.batch_size,
                                             cfg.eval.max_samples_per_channel), False
        if cfg.eval.task_files:
            result["tasks"] = score_task_files(cfg, tag)
        eval_dir(cfg).mkdir(parents=True, exist_ok=True)
        append_jsonl(eval_dir(cfg) / HISTORY, result)
    previous = previous_of(records, result["step"])
    rows = compare(previous, result, cfg.eval.regression_pct)
    task_rows = compare_tasks(previous, result, cfg.eval.noise_sigmas)
    regressed = [r["channel"] for r in rows if r["regressed"]] + \
        [f"{r['task']}/{r['figure']}" for r in task_rows if r["regressed"]]
    return {**result, "reused": reused, "comparison": rows, "task_comparison": task_rows, "regressed": regressed}
