"""Stage versions: every stage's output is named by what defines it, so a rerun can tell what changed.

A stage's version is a hash of the config fields that change its result (every field of the sections it reads,
except those marked NO_EFFECT in pretrain/config/), the versions of the stages it reads, what it reads from
outside (clean: every input file's size and modification time, and the files its rules read) and the code
version (the project's version and, from a checkout, its git commit). The version a stage *would* produce is
computed from the config alone, so `pretrain status` runs nothing; the version it *did* produce is recorded
next to its output in version.json, with the fields, inputs and provenance behind it.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from pydantic import BaseModel

from model.checkpoint import complete_tags
from model.redact import redact
from pretrain import PROJECT_ROOT
from pretrain.config import SECTIONS_NEEDED, PipelineConfig, changes_result
from pretrain.stages import STAGE_NAMES, STAGES, VERSIONED
from tasks.clean.shards import plan_shards, rule_file_stamps
from tasks.common.outputs import is_complete, read_json, write_json

VERSION_FILE = "version.json"
PLANNED_DIR = "planned"  # under the run root: the versions each pipeline run planned, one file a run
PACKAGES = ("torch", "deepspeed", "prefect", "tokenizers", "mlflow", "pyarrow")


@dataclass
class StageVersion:
    stage: str
    version: str
    fields: dict                  # dotted config field -> value, the ones that count
    inputs: dict                  # stage read -> its version
    outside: list                 # what the stage reads from outside the run (clean: its input files)
    code: dict                    # {"package": ..., "git_commit": ...}
    provenance: dict = field(default_factory=dict)   # recorded only: who made it, how, with what

    def digest(self) -> str:
        blob = json.dumps([self.stage, self.fields, self.inputs, self.outside, self.code], sort_keys=True,
                          default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def counted_fields(value, prefix: str) -> dict:
    """A config section flattened to dotted names, without the fields marked NO_EFFECT."""
    if isinstance(value, BaseModel):
        out = {}
        for name, info in type(value).model_fields.items():
            if changes_result(info):
                out.update(counted_fields(getattr(value, name), f"{prefix}.{name}"))
        return out
    if isinstance(value, (list, tuple)) and any(isinstance(v, BaseModel) for v in value):
        out = {}
        for i, v in enumerate(value):
            out.update(counted_fields(v, f"{prefix}[{i}]"))
        return out
    if isinstance(value, dict):
        return {prefix: {k: (v.model_dump(mode="json") if isinstance(v, BaseModel) else v) for k, v in value.items()}}
    return {prefix: list(value) if isinstance(value, tuple) else value}


def section_fields(cfg: PipelineConfig, path: str) -> dict:
    """The counted fields under a dotted path of the config; a password in a URL (a source's) shows as ***,
    since version.json and the MLflow tags are read by everyone who can read the run."""
    head, _, rest = path.partition(".")
    value = getattr(cfg, head)
    if value is None:
        return {}
    for part in filter(None, rest.split(".")):
        value = getattr(value, part)
    return {k: redact(v) for k, v in counted_fields(value, path).items()}


def outside_inputs(cfg: PipelineConfig, stage: str) -> list:
    if stage != "clean" or cfg.clean is None:
        return []
    # the files alone: a changed setting is already a changed field, and must not read as changed input files
    return [spec.files for spec in plan_shards(cfg.clean)] + [rule_file_stamps(cfg.clean)]


def git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(PROJECT_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def code_version() -> dict:
    """What of the code a version depends on: the project's version and, in a checkout, the commit."""
    try:
        package = metadata.version("pretrain-pipeline")
    except metadata.PackageNotFoundError:
        package = None
    return {"package": package, "git_commit": git("rev-parse", "HEAD") if (PROJECT_ROOT / ".git").exists() else None}


def provenance(command: list[str] | None = None, flow_run_id: str | None = None) -> dict:
    """Who made an output and with what: commit (and whether the tree had uncommitted changes), package
    versions, the command line and the Prefect flow run."""
    dirty = git("status", "--porcelain", "--untracked-files=no") if (PROJECT_ROOT / ".git").exists() else None
    packages = {}
    for name in PACKAGES:
        try:
            packages[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            packages[name] = None
    return {**code_version(), "git_dirty": bool(dirty) if dirty is not None else None, "packages": packages,
            "command": " ".join(command if command is not None else sys.argv), "prefect_flow_run_id": flow_run_id,
            "time": time.time()}


def configured(cfg: PipelineConfig, stage: str) -> bool:
    """Whether the config has every section the stage reads (a one-stage config may leave the others out)."""
    return all(getattr(cfg, s) is not None for s in SECTIONS_NEEDED.get(stage, ()))


def expected_versions(cfg: PipelineConfig) -> dict[str, StageVersion]:
    """The version each versioned stage would produce from this config, upstream first. A stage the config
    does not describe (no clean section for `pretrain tokenizer`) stands at its recorded version."""
    code, out = code_version(), {}
    for stage in VERSIONED:
        if not configured(cfg, stage):
            out[stage] = recorded_version(cfg, stage) or StageVersion(stage, "unknown", {}, {}, [], code)
            continue
        fields = {}
        for path in STAGES[stage].version_fields:
            fields.update(section_fields(cfg, path))
        version = StageVersion(stage, "", fields, {dep: out[dep].version for dep in STAGES[stage].inputs},
                               outside_inputs(cfg, stage), code)
        version.version = version.digest()
        out[stage] = version
    return out


def write_planned(cfg: PipelineConfig, versions: dict[str, StageVersion], run_id: str) -> Path:
    """A pipeline run's planned versions in a file its stage flows read: a path is what crosses to a sub-flow
    (the clean version holds every input file's size and time, too large for a flow parameter on a big corpus)."""
    path = cfg.run_root_path() / PLANNED_DIR / f"{run_id}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, {stage: asdict(v) for stage, v in versions.items()})
    return path


def read_planned(path: Path) -> dict[str, StageVersion]:
    return {stage: StageVersion(**v) for stage, v in read_json(path).items()}


def output_dir(cfg: PipelineConfig, stage: str) -> Path:
    return cfg.run_root_path() / STAGES[stage].output


def stage_complete(cfg: PipelineConfig, stage: str) -> bool:
    """The stage's output is all there: the data stages' completion marker, training's result file."""
    folder = output_dir(cfg, stage)
    return (folder / "result.json").is_file() if stage == "train" else is_complete(folder)


def recorded_version(cfg: PipelineConfig, stage: str) -> StageVersion | None:
    """The version the stage's complete output was made at; None when there is no complete output or no record."""
    folder = output_dir(cfg, stage)
    if not stage_complete(cfg, stage) or not (folder / VERSION_FILE).is_file():
        return None
    return StageVersion(**read_json(folder / VERSION_FILE))


def record_version(cfg: PipelineConfig, stage: str, version: StageVersion, flow_run_id: str | None) -> StageVersion:
    recorded = StageVersion(**{**asdict(version), "provenance": provenance(flow_run_id=flow_run_id)})
    write_json(output_dir(cfg, stage) / VERSION_FILE, asdict(recorded))
    return recorded


def why_rerun(recorded: StageVersion | None, expected: StageVersion) -> list[str]:
    """What differs between the recorded version and the one the config would produce, in words."""
    if recorded is None:
        return ["no recorded version"]
    reasons = [f"{k}: {_show(recorded.fields.get(k, '(unset)'))} -> {_show(expected.fields.get(k, '(unset)'))}"
               for k in sorted(set(recorded.fields) | set(expected.fields))
               if recorded.fields.get(k) != expected.fields.get(k)]
    reasons += [f"input {dep} changed ({recorded.inputs.get(dep)} -> {expected.inputs[dep]})"
                for dep in expected.inputs if recorded.inputs.get(dep) != expected.inputs[dep]]
    if recorded.outside != expected.outside:
        reasons.append("input files changed (sources, or files the rules read)")
    reasons += [f"code {k}: {recorded.code.get(k)} -> {v}" for k, v in expected.code.items() if recorded.code.get(k) != v]
    return reasons


def _show(value) -> str:
    text = json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def stage_state(cfg: PipelineConfig, stage: str, want: StageVersion) -> tuple[str, list[str], StageVersion | None]:
    """(up to date | would rerun | missing | not in this config, why, the recorded version) of one versioned stage."""
    recorded = recorded_version(cfg, stage)
    if not stage_complete(cfg, stage):
        return "missing", ["no complete output"], None
    if not configured(cfg, stage):
        return "not in this config", [f"needs the section(s) {', '.join(SECTIONS_NEEDED[stage])}"], recorded
    if recorded is not None and recorded.version == want.version:
        return "up to date", [], recorded
    return "would rerun", why_rerun(recorded, want), recorded


def checkpoints_lost(cfg: PipelineConfig, rows: dict) -> str | None:
    """What a rerun of the data stages would cost the training: its checkpoints are tied to the dataset version,
    and a rerun of tokenize (or of a stage before it) makes a new one, so none of them would resume."""
    rerun = [s for s in ("clean", "tokenizer", "tokenize") if rows[s]["state"] == "would rerun"]
    if not rerun:
        return None

    tags = complete_tags(cfg.run_root_path() / "train" / "checkpoints")
    if not tags:
        return None
    return (f"WARNING: rerunning {', '.join(rerun)} makes a new dataset version: the {len(tags)} checkpoint(s) under "
            f"train/checkpoints (newest {tags[-1]}) will not resume from it; restore the settings above, or run the "
            f"change on a new run_root")


def status(cfg: PipelineConfig, expected: dict[str, StageVersion] | None = None) -> list[dict]:
    """Per stage: up to date / would rerun / missing, the versions (expected: already computed), and why;
    preflight runs when training does."""
    rows = {}
    for stage, want in (expected or expected_versions(cfg)).items():
        state, why, recorded = stage_state(cfg, stage, want)
        rows[stage] = {"stage": stage, "state": state, "recorded": recorded.version if recorded else "",
                       "expected": want.version, "why": "; ".join(why)}
    if warning := checkpoints_lost(cfg, rows):
        rows["train"]["warning"] = warning
    train_current = rows["train"]["state"] == "up to date"
    rows["preflight"] = {"stage": "preflight", "state": "not needed" if train_current else "will run", "recorded": "",
                         "expected": "", "why": "it gates training, and training is up to date" if train_current
                         else "checks the cluster as it is now, before training"}
    return [rows[stage] for stage in STAGE_NAMES]
