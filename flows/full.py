"""The whole pipeline: clean -> tokenizer -> tokenize -> preflight -> train.

Each stage is a sub-flow with a persisted result: when a failed run is retried
(Prefect UI or `prefect flow-run retry`), the stages that finished come back from
their results instead of running again, and training resumes from its newest
complete checkpoint. The MLflow parent run of the first attempt is reused.
"""
from __future__ import annotations

from prefect import flow

from flows.common import markdown_artifact, mlflow_run
from flows.stages import (DEFAULT_CONFIG, clean_flow, preflight_flow, tokenize_flow, tokenizer_flow,
                          train_flow)
from pretrain.config import PipelineConfig, resolve_config
from tasks import tracking


@flow(name="pretrain", log_prints=True)
def pretrain(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Turn the configured raw corpus into a trained, tracked model."""
    cfg = resolve_config(config)
    run = mlflow_run(cfg, cfg.name, None, {"run_root": str(cfg.run_root_path())})
    tracking.log_params(run.mlflow_uri, run.run_id, {"run_root": str(run.root), "name": cfg.name})
    ok = False
    try:
        summary = {
            "clean": clean_flow(cfg, run.run_id),
            "tokenizer": tokenizer_flow(cfg, run.run_id),
            "tokenize": tokenize_flow(cfg, run.run_id),
            "preflight": preflight_flow(cfg, run.run_id),
            "train": train_flow(cfg, run.run_id),
        }
        ok = True
    finally:
        tracking.end_run(run.mlflow_uri, run.run_id, ok)
    summary["mlflow_run_id"] = run.run_id
    summary["run_root"] = str(run.root)
    markdown_artifact(run, "summary", f"Run root: `{run.root}`\n\n"
                      f"Final checkpoint: `{summary['train']['checkpoint_dir']}/{summary['train']['latest_checkpoint']}`",
                      "Pipeline summary")
    return summary
