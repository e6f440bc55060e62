"""The whole pipeline: clean -> tokenizer -> tokenize -> preflight -> train.

Each stage is a sub-flow with a persisted result: when a failed run is retried
(Prefect UI or `prefect flow-run retry`), the stages that finished come back from
their results instead of running again, and training resumes from its newest
complete checkpoint. The MLflow parent run of the first attempt is reused.
"""
from __future__ import annotations

from prefect import flow

from flows.clean import clean_flow
from flows.common import DEFAULT_CONFIG, markdown_artifact, mlflow_run, table_artifact
from flows.preflight import preflight_flow
from flows.tokenizer import tokenizer_flow
from flows.tokens import tokenize_flow
from flows.train import train_flow
from pretrain.config import PipelineConfig, resolve_config
from pretrain.stages import STAGE_NAMES
from tasks.versions import expected_versions, status, write_planned


@flow(name="pretrain", log_prints=True)
def pretrain(config: PipelineConfig | str = DEFAULT_CONFIG, force: list[str] | None = None) -> dict:
    """Turn the configured raw corpus into a trained, tracked model. A stage whose output is at the version this
    config would produce is reused; `force` names stages to run again anyway."""
    cfg, force = resolve_config(config, "run"), set(force or ())
    if unknown := force - set(STAGE_NAMES):
        raise ValueError(f"force names no stage: {sorted(unknown)}; stages are {list(STAGE_NAMES)}")
    run = mlflow_run(cfg, cfg.name, None, {"run_root": str(cfg.run_root_path())})
    run.log_params({"run_root": str(run.root), "name": cfg.name})
    versions = expected_versions(cfg)  # once a run: the clean stage's version lists every input file
    planned = str(write_planned(cfg, versions, run.run_id))  # what the stage flows read them from
    stages = status(cfg, versions)
    table_artifact(run, "status", stages, "Stages at the start of this run: up to date (reused), would rerun "
                   "(and why), missing" + (f"; forced: {sorted(force)}" if force else ""))
    # preflight gates training: with training up to date (and not forced) there is nothing to check the cluster for
    check_cluster = "train" in force or next(r for r in stages if r["stage"] == "preflight")["state"] == "will run"
    ok = False
    try:
        summary = {
            "clean": clean_flow(cfg, run.run_id, "clean" in force, planned),
            "tokenizer": tokenizer_flow(cfg, run.run_id, "tokenizer" in force, planned),
            "tokenize": tokenize_flow(cfg, run.run_id, "tokenize" in force, planned),
            "preflight": preflight_flow(cfg, run.run_id) if check_cluster else {"skipped": "training is up to date"},
            "train": train_flow(cfg, run.run_id, "train" in force, planned),
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
