"""lm-evaluation-harness on a checkpoint's Hugging Face export, offline (the hubs are not reachable from a cluster)."""
from __future__ import annotations

import os
from pathlib import Path

from pretrain.config import LmEvalConfig


def run_lm_eval(hf_dir: Path, cfg: LmEvalConfig, device: str) -> dict[str, float]:
    """task/metric -> value for every configured task; the data must be local (include_path YAMLs or the HF cache)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from lm_eval import simple_evaluate
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise ImportError("eval.lm_eval.tasks needs lm-evaluation-harness: pip install 'pretrain-pipeline[eval]'") from None
    manager = TaskManager(include_path=cfg.include_path)
    unknown = [t for t in cfg.tasks if t not in manager.all_tasks]
    if unknown:
        raise ValueError(f"lm-eval tasks {unknown} not found; put their YAML under eval.lm_eval.include_path "
                         f"({cfg.include_path}) or fix eval.lm_eval.tasks")
    out = simple_evaluate(model="hf", model_args={"pretrained": str(hf_dir), "dtype": "float32"}, tasks=list(cfg.tasks),
                          batch_size=cfg.batch_size, device=device, limit=cfg.limit, task_manager=manager,
                          log_samples=False, bootstrap_iters=0)
    metrics = {}
    for task, values in out["results"].items():
        for key, value in values.items():
            name = key.split(",")[0]
            if isinstance(value, (int, float)) and not isinstance(value, bool) and "stderr" not in name:
                metrics[f"{task}/{name}"] = float(value)
    return metrics
