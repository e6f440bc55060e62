"""The average flow: complete checkpoints of a run (or of its decay branches) averaged into one model
(tasks/train/average.py), scored on the run's held-out samples and registered like a branch, its tags naming the
inputs."""
from __future__ import annotations

import re
from pathlib import Path

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, markdown_artifact, mlflow_run
from flows.evaluation import eval_metrics
from flows.versions import register_export
from pretrain.config import PipelineConfig, resolve_config
from tasks.train.average import average_checkpoints


@task(name="average-checkpoints")
def average_task(checkpoints: list[str], tokenizer_dir: str, out_dir: str, dtype: str, device: str) -> dict:
    return average_checkpoints([Path(c) for c in checkpoints], Path(tokenizer_dir), Path(out_dir), dtype, device)


@flow(name="average", log_prints=True)
def average_flow(config: PipelineConfig | str = DEFAULT_CONFIG, checkpoints: list[str] | None = None,
                 name: str | None = None, dtype: str = "bf16") -> dict:
    """Average the named checkpoint folders (<run_root>/train/checkpoints/<tag>, or a branch's) into
    <run_root>/train/hf/average-<name>."""
    cfg = resolve_config(config, "train")
    checkpoints = list(checkpoints or [])
    name = re.sub(r"[^\w-]", "-", name or "-".join(Path(c).name for c in checkpoints))[:80]  # an MLflow alias
    root = cfg.run_root_path()
    run = mlflow_run(cfg, f"{cfg.name}/average/{name}", None, {"stage": "average"})
    ok = False
    try:
        result = average_task(checkpoints, str(root / "tokenizer"), str(root / "train" / "hf" / f"average-{name}"),
                              dtype, cfg.eval.device)
        if result["eval"]:
            run.log_metrics(eval_metrics(result["eval"]), step=max(i["step"] or 0 for i in result["inputs"]))
        result["model_version"] = register_export(run, result["export_dir"], f"average-{name}", {
            "average_of": ", ".join(i["checkpoint"] for i in result["inputs"]),
            "average_steps": ", ".join(str(i["step"]) for i in result["inputs"])})
        ok = True
    finally:
        run.end(ok)
    markdown_artifact(run, f"average-{name}", f"Average of {len(result['inputs'])} checkpoints: "
                      + ", ".join(f"`{i['checkpoint']}`" for i in result["inputs"])
                      + f"\n\nHeld-out perplexity: {(result['eval'] or {}).get('ppl')}\n\nExport: "
                      f"`{result['export_dir']}`, model version {result['model_version']} (alias `average-{name}`)",
                      f"Average {name}")
    return result
