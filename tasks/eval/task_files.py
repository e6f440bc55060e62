"""A checkpoint scored on the config's task files (model/task_eval.py), and what changed beyond each task's noise."""
from __future__ import annotations

import math
from pathlib import Path

from model.checkpoint_eval import load_model
from model.task_eval import read_task, score_items
from pretrain.config import PipelineConfig
from tasks.tokenize.parts import tokenizer_at

# figure -> the direction that is worse: bits per byte up, accuracy down
WORSE = {"bpb": 1, "acc": -1, "acc_norm": -1}


def score_task_files(cfg: PipelineConfig, tag: str, train_dir: Path | None = None) -> dict[str, dict]:
    """Task name (the file's stem) -> its scores, for checkpoint `tag` of the run (or of the training in
    `train_dir`: a decay branch)."""
    root = cfg.run_root_path()
    tasks = {Path(f).stem: read_task(Path(f)) for f in cfg.eval.task_files}  # a bad file fails before the model loads
    model, spec = load_model(train_dir or root / "train", tag, cfg.eval.device)
    tokenizer, eos, _ = tokenizer_at(str(root / "tokenizer" / "tokenizer.json"))
    return {name: score_items(model, tokenizer, items, eos, spec.model.max_seq_len, cfg.eval.device)
            for name, items in tasks.items()}


def compare_tasks(previous: dict | None, current: dict, sigmas: float) -> list[dict]:
    """One row per task and figure: now, before, the change, the noise (sigmas x both standard errors combined);
    regressed only when the change is worse by more than the noise."""
    rows = []
    for task, scores in sorted(current.get("tasks", {}).items()):
        before = (previous or {}).get("tasks", {}).get(task, {})
        for figure, worse in WORSE.items():
            if figure not in scores:
                continue
            row = {"task": task, "figure": figure, "value": round(scores[figure], 4), "se": scores[f"{figure}_se"],
                   "previous": before.get(figure), "change": None, "noise": None, "regressed": False}
            if figure in before:
                row["change"] = round(scores[figure] - before[figure], 4)
                row["noise"] = round(sigmas * math.hypot(scores[f"{figure}_se"], before[f"{figure}_se"]), 4)
                row["regressed"] = bool(worse * row["change"] > row["noise"])  # a nan noise (one item) never fires
            rows.append(row)
    return rows
