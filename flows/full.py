"""The whole pipeline: clean -> tokenizer -> tokenize -> preflight -> train.

Each stage is a sub-flow with a persisted result: when a failed run is retried
(Prefect UI or `prefect flow-run retry`), the stages that finished come back from
their results instead of running again, and training resumes from its newest
complete checkpoint. The MLflow parent run of the first attempt is reused.
"""
from __future__ import annotations

from prefect import flow

from flows.clean import clean_flow
from flows.common import DEFAULT_CONFIG, markdown_artifact, mlflow_run
from flows.preflight import preflight_flow
from flows.tokenizer import tokenizer_flow
from flows.tokens import tokenize_flow
from flows.train import train_flow
from pretrain.config import PipelineConfig, resolve_config


@flow(name="pretrain", log_prints=True)
def pretrain(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Turn the configured raw corpus into a trained, tracked model."""
    cfg = resolve_config(config, "run")
    run = mlflow_run(cfg, cfg.name, None, {"run_root": str(cfg.run_root_path())})
    run.log_params({"run_root": str(run.root), "name": cfg.name})
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
        run.end(ok)
    summary["mlflow_run_id"] = run.run_id
    summary["run_root"] = str(run.root)
    markdown_artifact(run, "summary", f"Run root: `{run.root}`\n\n"
                      f"Final checkpoint: `{summary['train']['checkpoint_dir']}/{summary['train']['latest_checkpoint']}`",
                      "Pipeline summary")
    return summary
