"""The whole pipeline: clean -> tokenizer -> tokenize -> preflight -> train."""
from __future__ import annotations

from prefect import flow

from flows.common import markdown_artifact
from flows.stages import (DEFAULT_CONFIG, clean_flow, preflight_flow, tokenize_flow, tokenizer_flow,
                          train_flow)
from pretrain.config import PipelineConfig, resolve_config
from tasks import tracking


@flow(name="pretrain", log_prints=True)
def pretrain(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Turn the configured raw corpus into a trained, tracked model."""
    cfg = resolve_config(config)
    uri = tracking.tracking_uri(cfg)
    root = cfg.run_root_path()
    root.mkdir(parents=True, exist_ok=True)
    exp = tracking.experiment_id(uri, cfg.tracking.experiment, root / "mlartifacts")
    parent = tracking.start_run(uri, exp, cfg.name, tags={"run_root": str(root)})
    tracking.log_params(uri, parent, {"run_root": str(root), "name": cfg.name})
    ok = False
    try:
        summary = {
            "clean": clean_flow(cfg, parent),
            "tokenizer": tokenizer_flow(cfg, parent),
            "tokenize": tokenize_flow(cfg, parent),
            "preflight": preflight_flow(cfg, parent),
            "train": train_flow(cfg, parent),
        }
        ok = True
    finally:
        tracking.end_run(uri, parent, ok)
    summary["mlflow_run_id"] = parent
    summary["run_root"] = str(root)
    markdown_artifact(cfg, "summary", f"Run root: `{root}`\n\nMLflow parent run: `{parent}` at `{uri}`\n\n"
                      f"Final checkpoint: `{summary['train']['checkpoint_dir']}/{summary['train']['latest_checkpoint']}`",
                      "Pipeline summary")
    return summary
