"""What every stage flow does around its task: config, paths, MLflow child run, artifacts, links both ways."""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from model.redact import redact_url
from pretrain.config import PipelineConfig
from flows import tracking
from tasks.common.lease import lease

DEFAULT_CONFIG = "configs/tiny.yaml"


def prefect_tags() -> dict[str, str]:
    """The Prefect flow run an MLflow run belongs to (tags), so MLflow links back to Prefect."""
    from prefect.runtime import flow_run

    tags = {"prefect.flow_run_id": flow_run.id, "prefect.flow_run_name": flow_run.name}
    url = flow_run.ui_url
    if url:
        tags["prefect.flow_run_url"] = url
    return {k: str(v) for k, v in tags.items() if v}


@dataclass
class StageRun:
    cfg: PipelineConfig
    root: Path
    mlflow_uri: str
    run_id: str
    experiment_id: str = ""

    def dir(self, stage: str) -> Path:
        return self.root / stage

    def log_params(self, params: dict) -> None:
        tracking.log_params(self.mlflow_uri, self.run_id, params)

    def log_metrics(self, metrics: dict, step: int = 0) -> None:
        tracking.log_metrics(self.mlflow_uri, self.run_id, metrics, step)

    def log_files(self, folder: Path, names: tuple[str, ...], artifact_dir: str, missing_ok: bool = False) -> None:
        """Files of a stage's output folder as MLflow artifacts; missing_ok for files only some runs write."""
        for name in names:
            if not missing_ok or (folder / name).is_file():
                tracking.log_artifact(self.mlflow_uri, self.run_id, folder / name, artifact_dir)

    def set_tag(self, key: str, value: str) -> None:
        tracking.client(self.mlflow_uri).set_tag(self.run_id, key, value)

    def set_tags(self, tags: dict[str, str]) -> None:
        """Many tags in one request (a stage's version and provenance are a dozen)."""
        from mlflow.entities import RunTag

        tracking.client(self.mlflow_uri).log_batch(self.run_id, tags=[RunTag(k, v) for k, v in tags.items()])

    def child(self, name: str, tags: dict) -> StageRun:
        """A new MLflow run under this one (a training attempt, a grid point), with its own curve."""
        run_id = tracking.start_run(self.mlflow_uri, self.experiment_id, name, self.run_id, tags)
        return StageRun(self.cfg, self.root, self.mlflow_uri, run_id, self.experiment_id)

    def end(self, ok: bool) -> None:
        tracking.end_run(self.mlflow_uri, self.run_id, ok)

    def rank_env(self) -> dict[str, str]:
        """What the training ranks need to log their curve into this run."""
        return {"MLFLOW_TRACKING_URI": self.mlflow_uri, "MLFLOW_RUN_ID": self.run_id}

    @property
    def mlflow_link(self) -> str:
        """Markdown naming the MLflow run; a link when the tracking server is an http(s) URL."""
        if self.mlflow_uri.startswith(("http://", "https://")) and self.experiment_id:
            return (f"[{self.run_id}]({redact_url(self.mlflow_uri).rstrip('/')}/#/experiments/{self.experiment_id}"
                    f"/runs/{self.run_id})")
        return f"`{self.run_id}` in `{redact_url(self.mlflow_uri)}`"


def tracking_target(cfg: PipelineConfig) -> tuple[Path, str, str]:
    """(run root, MLflow tracking URI, experiment id) of a config; the run root is created."""
    root = cfg.run_root_path()
    root.mkdir(parents=True, exist_ok=True)
    uri = tracking.tracking_uri(cfg)
    if problem := tracking.unreachable(uri):  # in seconds, before MLflow's client retries for minutes
        raise RuntimeError(problem)
    return root, uri, tracking.experiment_id(uri, cfg.tracking.experiment, root / "mlartifacts")


def mlflow_run(cfg: PipelineConfig, name: str, parent_run_id: str | None, tags: dict) -> StageRun:
    """The MLflow run of this Prefect flow run: reused when Prefect retries the flow run, created otherwise."""
    root, uri, exp = tracking_target(cfg)
    links = prefect_tags()
    run_id = tracking.find_run(uri, exp, name, links.get("prefect.flow_run_id"))
    if run_id:
        tracking.client(uri).update_run(run_id, status="RUNNING")
    else:
        run_id = tracking.start_run(uri, exp, name, parent_run_id, {**tags, **links})
    return StageRun(cfg, root, uri, run_id, exp)


@contextmanager
def stage_run(cfg: PipelineConfig, stage: str, parent_run_id: str | None) -> Iterator[StageRun]:
    """The stage's lease on the run root (one run of a stage at a time), then its MLflow run."""
    with lease(cfg.run_root_path(), stage):
        run = mlflow_run(cfg, f"{cfg.name}/{stage}", parent_run_id, {"stage": stage})
        section = getattr(cfg, stage, None)
        if isinstance(section, BaseModel):
            run.log_params({stage: section.model_dump()})
        ok = False
        try:
            yield run
            ok = True
        finally:
            run.end(ok)


def artifact_key(cfg: PipelineConfig, stage: str) -> str:
    """Prefect's artifact keys take lowercase letters, digits and dashes: the run's name and the stage's (a
    branch's or an average's name included) are made so."""
    def safe(text: str) -> str:
        return "".join(ch if ch.isalnum() else "-" for ch in text.lower())

    return f"{safe(cfg.name).strip('-')}-{safe(stage)}"[:100]


def table_artifact(run: StageRun, stage: str, rows: list[dict], description: str) -> None:
    create_table_artifact(key=artifact_key(run.cfg, stage), table=rows,
                          description=f"{description}\n\nMLflow run: {run.mlflow_link}")


def markdown_artifact(run: StageRun, stage: str, markdown: str, description: str) -> None:
    create_markdown_artifact(key=artifact_key(run.cfg, stage), markdown=f"{markdown}\n\nMLflow run: {run.mlflow_link}",
                             description=description)
