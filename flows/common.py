"""What every stage flow does around its task: config, paths, MLflow child run, artifacts."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from pretrain.config import PipelineConfig
from tasks import tracking


@dataclass
class StageRun:
    cfg: PipelineConfig
    root: Path
    mlflow_uri: str
    run_id: str

    def dir(self, stage: str) -> Path:
        return self.root / stage


@contextmanager
def stage_run(cfg: PipelineConfig, stage: str, parent_run_id: str | None) -> Iterator[StageRun]:
    root = cfg.run_root_path()
    root.mkdir(parents=True, exist_ok=True)
    uri = tracking.tracking_uri(cfg)
    exp = tracking.experiment_id(uri, cfg.tracking.experiment, root / "mlartifacts")
    run_id = tracking.start_run(uri, exp, f"{cfg.name}/{stage}", parent_run_id, {"stage": stage})
    section = getattr(cfg, stage, None)
    if isinstance(section, BaseModel):
        tracking.log_params(uri, run_id, {stage: section.model_dump()})
    ok = False
    try:
        yield StageRun(cfg, root, uri, run_id)
        ok = True
    finally:
        tracking.end_run(uri, run_id, ok)


def artifact_key(cfg: PipelineConfig, stage: str) -> str:
    safe = "".join(ch if ch.isalnum() else "-" for ch in cfg.name.lower()).strip("-")
    return f"{safe}-{stage}"[:100]


def table_artifact(cfg: PipelineConfig, stage: str, rows: list[dict], description: str) -> None:
    create_table_artifact(key=artifact_key(cfg, stage), table=rows, description=description)


def markdown_artifact(cfg: PipelineConfig, stage: str, markdown: str, description: str) -> None:
    create_markdown_artifact(key=artifact_key(cfg, stage), markdown=markdown, description=description)
