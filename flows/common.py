"""What every stage flow does around its task: config, paths, MLflow child run, artifacts, links both ways."""
from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from pydantic import BaseModel
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from model.redact import redact_url
from pretrain.config import PipelineConfig
from flows import tracking
from flows.mlflow_journal import KEPT, Journal
from tasks.common.lease import lease

DEFAULT_CONFIG = "configs/tiny.yaml"
NO_MLFLOW_RUN = {"MLFLOW_RUN_ID": ""}  # the ranks' environment when no MLflow run could be made for them


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
    """A stage's MLflow run. Its writes go through the run root's journal (flows/mlflow_journal.py): a tracking
    server that dies while the stage works costs the stage nothing, and MLflow gets every write once it is back."""
    cfg: PipelineConfig
    root: Path
    mlflow_uri: str
    run_id: str
    experiment_id: str = ""

    def dir(self, stage: str) -> Path:
        return self.root / stage

    @property
    def journal(self) -> Journal:
        return Journal(self.root, self.mlflow_uri)

    def log_params(self, params: dict) -> None:
        flat = {k: redact_url(str(v))[:6000] for k, v in tracking.flattened(params).items()}  # no URL passwords
        self.journal.write("params", self.run_id, params=flat)

    def log_metrics(self, metrics: dict, step: int = 0) -> None:
        if points := tracking.metric_points(metrics, step):
            self.journal.write("points", self.run_id, points=points)

    def log_files(self, folder: Path, names: tuple[str, ...], artifact_dir: str, missing_ok: bool = False) -> None:
        """Files of a stage's output folder as MLflow artifacts; missing_ok for files only some runs write."""
        for name in names:
            if not missing_ok or (folder / name).is_file():
                self.journal.write("artifact", self.run_id, path=str(folder / name), subdir=artifact_dir)

    def set_tag(self, key: str, value: str) -> None:
        self.set_tags({key: value})

    def set_tags(self, tags: dict[str, str]) -> None:
        """Many tags in one request (a stage's version and provenance are a dozen)."""
        self.journal.write("tags", self.run_id, tags={k: str(v) for k, v in tags.items()})

    def child(self, name: str, tags: dict) -> StageRun | None:
        """A new MLflow run under this one (a training attempt, a grid point), with its own curve; None when the
        tracking server cannot be reached (an MLflow run id comes from the server: the child's figures then stay
        in its files), said on stderr."""
        try:
            run_id = tracking.start_run(self.mlflow_uri, self.experiment_id, name, self.run_id, tags)
        except Exception:  # noqa: BLE001 - the server down: go on without the child run
            if not (problem := tracking.unreachable(self.mlflow_uri, timeout_s=5.0)):
                raise
            print(f"warning: no MLflow run {name}: {problem}; its figures stay in its files only", file=sys.stderr,
                  flush=True)
            return None
        return StageRun(self.cfg, self.root, self.mlflow_uri, run_id, self.experiment_id)

    def end(self, ok: bool) -> None:
        """The run's status, after whatever the journal still holds if the server is back."""
        journal = self.journal
        if journal.pending() and not tracking.unreachable(self.mlflow_uri, timeout_s=5.0):
            journal.replay()
        if journal.write("end", self.run_id, ok=ok) == KEPT:
            print(f"warning: MLflow run {self.run_id} stays RUNNING until the server is back and a stage starts or "
                  f"`pretrain status` runs: {journal.pending()} write(s) are kept in {journal.path}",
                  file=sys.stderr, flush=True)

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
    sent, _ = Journal(root, uri).replay()  # what an earlier stage kept while the server was down
    if sent:
        print(f"sent {sent} MLflow write(s) kept while the tracking server was down", flush=True)
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
