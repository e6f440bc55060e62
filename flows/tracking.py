"""MLflow bookkeeping for the orchestrator: one parent run per pipeline, a child run per stage.

Uses MlflowClient (no fluent global state), so stages in threads or sub-flows
cannot log into each other's runs.
"""
from __future__ import annotations

import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from model.redact import redact_url
from pretrain.config import PipelineConfig


EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"


def tracking_uri(cfg: PipelineConfig) -> str:
    uri = cfg.tracking.mlflow_uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        uri = f"sqlite:///{cfg.run_root_path() / 'mlflow.db'}"
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        # MLflow resolves a relative sqlite path against the CWD: make it absolute
        uri = "sqlite:///" + str(Path(uri[len("sqlite:///"):]).resolve())
    return uri


def unreachable(uri: str, timeout_s: float = 10.0) -> str | None:
    """Why an MLflow tracking server does not answer (in words and with the fix), or None when it does or the
    store is local. MLflow's own client retries an unreachable server for minutes before it says so."""

    parts = urllib.parse.urlsplit(uri)
    if parts.scheme not in ("http", "https"):
        return None
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")  # without credentials: /health needs none
    health = urllib.parse.urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + "/health", "", ""))
    try:
        with urllib.request.urlopen(health, timeout=timeout_s) as response:
            if response.status == 200:
                return None
            problem = f"answered {response.status}"
    except urllib.error.HTTPError as err:
        problem = f"answered {err.code}"
    except (OSError, ValueError) as err:
        problem = f"{type(err).__name__}: {getattr(err, 'reason', err)}"
    return (f"the MLflow tracking server {redact_url(uri)} does not answer ({problem}); start it (bash "
            f"infra/local.sh up) or point tracking.mlflow_uri / MLFLOW_TRACKING_URI at a running one")


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def experiment_id(uri: str, name: str, artifact_root: Path | None = None) -> str:
    c = client(uri)
    exp = c.get_experiment_by_name(name)
    if exp is None:
        location = artifact_root.as_uri() if artifact_root and uri.startswith("sqlite") else None
        exp_id = c.create_experiment(name, artifact_location=location)
    else:
        exp_id = exp.experiment_id
    if exp is None or exp.tags.get(EXPERIMENT_KIND_TAG) != MODEL_TRAINING:
        # MLflow 3's UI opens untagged experiments in its GenAI (traces) view
        c.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, MODEL_TRAINING)
    return exp_id


def start_run(uri: str, exp_id: str, name: str, parent_id: str | None = None, tags: dict | None = None) -> str:
    all_tags = {"mlflow.runName": name, **(tags or {})}
    if parent_id:
        all_tags["mlflow.parentRunId"] = parent_id
    return client(uri).create_run(exp_id, tags=all_tags, run_name=name).info.run_id


def find_run(uri: str, exp_id: str, name: str, prefect_flow_run_id: str | None) -> str | None:
    """The run of this name that a Prefect flow run made before (a retried flow run goes on in it)."""
    if not prefect_flow_run_id:
        return None
    runs = client(uri).search_runs([exp_id], filter_string=f"tags.`prefect.flow_run_id` = '{prefect_flow_run_id}' "
                                   f"and attributes.run_name = '{name}'", max_results=1)
    return runs[0].info.run_id if runs else None


def newest_run(uri: str, exp_id: str, name: str) -> str | None:
    runs = client(uri).search_runs([exp_id], filter_string=f"attributes.run_name = '{name}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def end_run(uri: str, run_id: str, ok: bool) -> None:
    client(uri).set_terminated(run_id, status="FINISHED" if ok else "FAILED")


def log_params(uri: str, run_id: str, params: dict) -> None:
    from mlflow.entities import Param

    flat = [Param(k, redact_url(str(v))[:6000]) for k, v in flattened(params).items()]  # no URL passwords in MLflow
    for i in range(0, len(flat), 100):
        client(uri).log_batch(run_id, params=flat[i:i + 100])


def metric_points(metrics: dict, step: int = 0) -> list[list]:
    """[name, value, milliseconds, step] of each number in `metrics` (nested dicts as dotted names), taken now."""

    now = int(time.time() * 1000)
    return [[k, float(v), now, step] for k, v in flattened(metrics).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)]


def log_points(uri: str, run_id: str, points: list[list]) -> None:
    from mlflow.entities import Metric

    for i in range(0, len(points), 1000):  # MLflow's cap a batch
        client(uri).log_batch(run_id, metrics=[Metric(*p) for p in points[i:i + 1000]])


def log_tags(uri: str, run_id: str, tags: dict[str, str]) -> None:
    from mlflow.entities import RunTag

    client(uri).log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_artifact(uri: str, run_id: str, path: str, subdir: str | None = None) -> None:
    client(uri).log_artifact(run_id, str(path), artifact_path=subdir)


def log_dataset(uri: str, run_id: str, source_dir: str, name: str, digest: str) -> None:
    """A folder as an MLflow dataset input of the run (training context), `digest` its version."""
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset
    from mlflow.entities import DatasetInput, InputTag

    dataset = MetaDataset(resolve_dataset_source(source_dir), name=name, digest=digest)
    client(uri).log_inputs(run_id, [DatasetInput(dataset._to_mlflow_entity(),
                                                 [InputTag("mlflow.data.context", "training")])])


def register_export(uri: str, run_id: str, name: str, export_dir: str, alias: str, tags: dict[str, str]) -> str:
    """A Hugging Face export as a version of the registered model `name` under `alias`; its version number."""
    c = client(uri)
    c.log_artifacts(run_id, export_dir, "hf_export")
    if not c.search_registered_models(f"name = '{name}'"):
        c.create_registered_model(name, description=f"Hugging Face exports of the `{name}` training runs")
    version = c.create_model_version(name, f"runs:/{run_id}/hf_export", run_id=run_id, tags=tags)
    c.set_registered_model_alias(name, alias, version.version)
    return version.version


# what the orchestrator writes to a run, by name: a write the server could not take is kept under its name and its
# JSON arguments, and replayed (flows/mlflow_journal.py)
WRITES = {"params": log_params, "points": log_points, "tags": log_tags, "artifact": log_artifact,
          "end": end_run, "dataset": log_dataset, "register": register_export}


_METRIC_NAME_UNSAFE = re.compile(r"[^\w\-. /]")


def flattened(d: dict, prefix: str = "") -> dict:
    """Nested dicts as dotted metric names; characters MLflow refuses in a name become '_'."""
    out = {}
    for k, v in d.items():
        key = f"{prefix}{_METRIC_NAME_UNSAFE.sub('_', str(k))}"
        if isinstance(v, dict):
            out.update(flattened(v, key + "."))
        else:
            out[key] = v
    return out
