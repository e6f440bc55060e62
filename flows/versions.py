"""Stage reuse in the flows: a stage whose recorded version is the one it would produce is not run again; and the
lineage a training run leaves in MLflow."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

from prefect.artifacts import create_markdown_artifact

from flows import tracking
from flows.common import StageRun, artifact_key, stage_run
from pretrain.config import PipelineConfig
from pretrain.stages import STAGES
from tasks.common.outputs import read_json
from tasks.versions import StageVersion, expected_versions, output_dir, read_planned, record_version, stage_state


NEWEST_ALIAS = "newest"  # MLflow reserves `latest`: models:/<name>/latest already names the newest version


def versioned_stage(cfg: PipelineConfig, stage: str, parent_run_id: str | None, force: bool,
                    steps: Callable[[StageRun, StageVersion], dict], planned: str | None = None) -> dict:
    """A versioned stage's flow around its steps: the version this config plans for it (from the file of the
    pipeline run's plan, `planned`: it lists the corpus once for all its stages; computed here for a stage run
    alone); the
    recorded output when it is at that version; else the stage's lease and MLflow run, its steps, and the
    version recorded beside the output. Returns what the steps return, or the reused output's result file."""
    version = (read_planned(Path(planned)) if planned else expected_versions(cfg))[stage]
    if reused(cfg, stage, version, force):
        return read_json(output_dir(cfg, stage) / STAGES[stage].result)
    with stage_run(cfg, stage, parent_run_id) as run:
        result = steps(run, version)
        record(run, stage, version)
    return result


def reused(cfg: PipelineConfig, stage: str, planned: StageVersion, force: bool) -> StageVersion | None:
    """The recorded version when the stage's complete output is at the planned one (and no rerun is forced);
    said in the log and as an artifact either way."""
    state, why, recorded = stage_state(cfg, stage, planned)
    if state == "up to date" and not force:
        made = time.strftime("%Y-%m-%d %H:%M", time.localtime(recorded.provenance.get("time", 0)))
        create_markdown_artifact(key=artifact_key(cfg, f"{stage}-version"), description=f"{stage}: reused", markdown=(
            f"**{stage}**: reused, version `{recorded.version}` (made {made}, commit "
            f"`{recorded.provenance.get('git_commit')}`): `{output_dir(cfg, stage)}`"))
        print(f"{stage}: up to date at version {recorded.version}; reused {output_dir(cfg, stage)}")
        return recorded
    print(f"{stage}: running at version {planned.version}: " + "; ".join(["forced (--force)"] if force else why))
    return None


def record(run: StageRun, stage: str, planned: StageVersion) -> None:
    """version.json beside the output, and the version, its inputs and provenance as tags of the stage's MLflow run."""
    from prefect.runtime import flow_run

    done = record_version(run.cfg, stage, planned, flow_run.id)
    p = done.provenance
    tags = {"stage_version": done.version, "git_commit": str(p["git_commit"]), "git_dirty": str(p["git_dirty"]),
            "command": p["command"][:5000], **{f"input.{k}": v for k, v in done.inputs.items()},
            **{f"package.{k}": str(v) for k, v in p["packages"].items()}}
    run.set_tags(tags)
    run.log_files(output_dir(run.cfg, stage), ("version.json",), stage)


def log_lineage(run: StageRun, version: StageVersion, result: dict) -> None:
    """The training run's inputs and outputs in MLflow: the token dataset it read (an MLflow dataset input,
    digest = the tokenize stage's version) and its Hugging Face export as a version of the registered model
    named after the run (alias `newest`), tagged with the versions it came from."""
    run.journal.write("dataset", run.run_id, source_dir=str(run.dir("tokens")), name=f"{run.cfg.name}-tokens",
                      digest=version.inputs["tokenize"])
    if not result.get("hf_export"):
        return
    number = register_export(run, result["hf_export"], NEWEST_ALIAS, {
        "checkpoint": result["latest_checkpoint"], "train_version": version.version,
        **{f"input.{k}": v for k, v in version.inputs.items()}})
    print(f"registered {run.cfg.name} version {number} (alias {NEWEST_ALIAS}) from {result['hf_export']}")


def register_export(run: StageRun, export_dir: str, alias: str, tags: dict[str, str]) -> str:
    """A Hugging Face export (the training's, a decay branch's, an average's) as a version of the run's registered
    model under `alias` (a branch or an average has its own: `newest` stays the training's); the tags name what it
    was made from. Its version number, or "pending" while the tracking server is down (registered when it is
    back, flows/mlflow_journal.py)."""
    return run.journal.write("register", run.run_id, name=run.cfg.name, export_dir=export_dir, alias=alias, tags=tags)


def lineage(mlflow_uri: str, model_name: str, alias: str = "newest") -> dict:
    """From a registered model version back to the data: the training run, the token dataset it read, and the
    tokenize, tokenizer and clean stage runs at the versions it was trained on, with the clean manifest."""
    client = tracking.client(mlflow_uri)
    model = client.get_model_version_by_alias(model_name, alias)
    train = client.get_run(model.run_id)
    exp = train.info.experiment_id
    runs = {"train": train}
    for stage in ("tokenize", "tokenizer", "clean"):
        wanted = train.data.tags.get(f"input.{stage}") or runs["tokenize"].data.tags.get(f"input.{stage}")
        found = client.search_runs([exp], filter_string=f"tags.stage = '{stage}' and tags.stage_version = '{wanted}'",
                                   order_by=["attributes.start_time DESC"], max_results=1)
        if not found:
            raise LookupError(f"no MLflow run of stage {stage} at version {wanted} (model {model_name} v{model.version})")
        runs[stage] = found[0]
    manifest = client.download_artifacts(runs["clean"].info.run_id, "clean/manifest.json")
    return {"model_version": model.version, "runs": {k: r.info.run_id for k, r in runs.items()},
            "versions": {k: r.data.tags.get("stage_version") for k, r in runs.items()},
            "datasets": [(i.dataset.name, i.dataset.digest) for i in train.inputs.dataset_inputs],
            "clean_manifest": manifest}
