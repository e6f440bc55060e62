"""The train stage: launch the DeepSpeed ranks, watch them, roll back and skip ahead past a spike, export.

Each rollback and skip-ahead runs as a sub-flow of the train flow, with its own artifact.
"""
from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from flows.common import DEFAULT_CONFIG, NO_MLFLOW_RUN, StageRun, artifact_key, markdown_artifact, table_artifact
from flows.events import CheckpointAnnouncer
from flows.progress import StageProgress
from flows.versions import log_lineage, versioned_stage
from model.protocol import METRICS_FILE, SPEC_FILE
from model.spec import Spec
from pretrain.config import PipelineConfig, resolve_config
from tasks.common.failures import retry_if_transient
from tasks.common.outputs import read_json, write_json
from tasks.preflight.nodes import surviving_nodes
from tasks.preflight.suite import without_dropped_nodes
from tasks.train.comm_plan import PLAN_FILE, plan_tags
from tasks.train.export import export_run_checkpoint
from tasks.train.ledger import ledger_rows
from tasks.train.loss_plot import loss_plot
from tasks.train.mirror_status import mirror_status, mirror_warning
from tasks.train.monitored import roll_back, run_monitored
from tasks.train.recovery import Decision
from tasks.train.skipped import skipped_data_report
from tasks.versions import StageVersion

STEP_LINE = re.compile(r"\bstep (\d+)/\d+ loss=")  # rank 0's console line per logged step
LEDGER_FILE = "ledger.json"
OUTPUTS = ("result.json", "spec.json", "comm_plan.json", "metrics.jsonl", "events.jsonl", "recovery.jsonl", "loss.png",
           LEDGER_FILE)


@task(name="export-hf", retries=1, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def export_task(train_dir: str, tokenizer_dir: str, tag: str) -> dict:
    return export_run_checkpoint(Path(train_dir), Path(tokenizer_dir), tag=tag)


@flow(name="rollback", log_prints=True)
def rollback_flow(decision: dict, train_dir: str, key_prefix: str = "train") -> list[str]:
    """Set aside the checkpoints after the rollback target, so training goes on from before the trouble."""
    abandoned = roll_back(Decision(**{**decision, "skip": tuple(decision["skip"]) if decision["skip"] else None}),
                          Path(train_dir))
    a = decision["anomaly"]
    create_markdown_artifact(key=f"{key_prefix}-rollback-{decision['attempt']}", description="Rollback", markdown=(
        f"**Why**: {decision['reason']}\n\n**Detected** at step {a['step']} (onset estimated at step {a['onset_step']})"
        f"\n\n**From** step {a['step']} **to** checkpoint `{decision['checkpoint'] or 'the start'}`\n\n"
        f"**Set aside**: {', '.join(abandoned) or 'none'}"))
    return abandoned


@flow(name="skip-ahead", log_prints=True)
def skip_ahead_flow(decision: dict, train_dir: str, key_prefix: str = "train") -> dict:
    """Record the skipped sample range and what it covers (documents, sources, channels) for the cleaning stage,
    in the data order of the launch that hit it (its spec)."""
    report = skipped_data_report(Spec.load(Path(train_dir) / SPEC_FILE).data, [decision["skip"]])
    lr = f"; learning rate x{decision['lr_scale']}" if decision["lr_scale"] != 1.0 else ""
    create_markdown_artifact(key=f"{key_prefix}-skip-ahead-{decision['attempt']}", description="Skip-ahead", markdown=(
        f"**Skipped** sampler positions {decision['skip'][0]}..{decision['skip'][1]} "
        f"(escalation {decision['escalation']}{lr})\n\n{report['markdown']}"))
    return report


class Attempts:
    """The MLflow run of each training attempt: the first logs to the train run, each relaunch to a child run of it
    (`<name>/train/attempt-N`), so every attempt's curve stays apart in MLflow."""

    def __init__(self, run: StageRun):
        self.run, self.children = run, []

    def env_for(self, attempt: int) -> dict:
        if attempt == 1:
            return {}
        if self.children and self.children[-1]:  # the attempt before this one ended early
            self.children[-1].end(ok=False)
        self.children.append(self.run.child(f"{self.run.cfg.name}/train/attempt-{attempt}",
                                            {"stage": "train", "attempt": str(attempt)}))
        # the tracking server down: the attempt trains, its curve in metrics.jsonl only
        return {"MLFLOW_RUN_ID": self.children[-1].run_id} if self.children[-1] else NO_MLFLOW_RUN

    def end(self, ok: bool) -> None:
        if self.children and self.children[-1]:
            self.children[-1].end(ok)


def relaunch_nodes(cfg: PipelineConfig, run_root: Path, log_line):
    """The nodes of each relaunch: those that pass their probe now (train.recovery.drop_lost_nodes), else all."""
    if not cfg.train.recovery.drop_lost_nodes:
        return None
    return lambda train: surviving_nodes(cfg, train, run_root, log_line)


def monitored_training(run: StageRun) -> dict:
    """Train under the recovery loop; each rollback and skip-ahead runs as a sub-flow of this flow."""
    cfg, attempts = run.cfg, Attempts(run)

    def rollback_and_skip(decision, out_dir: Path) -> list[str]:
        record = decision.record()
        abandoned = rollback_flow(record, str(out_dir), artifact_key(cfg, "train"))
        skip_ahead_flow(record, str(out_dir), artifact_key(cfg, "train"))
        return abandoned

    progress, logger = StageProgress(cfg, "train", cfg.train.steps, "steps", every_s=10.0), get_run_logger()

    def log_line(line: str) -> None:
        logger.info(line)
        if m := STEP_LINE.search(line):
            progress.advance(int(m.group(1)))

    ok = False
    try:
        result = run_monitored(cfg.model, cfg.train, run.dir("tokenizer"), run.dir("tokens"), run.dir("train"),
                               run.rank_env(), log_line=log_line, rollback=rollback_and_skip,
                               env_for_attempt=attempts.env_for, relaunch_on=relaunch_nodes(cfg, run.root, log_line))
        ok = True
        return result
    finally:
        if points := run.journal.adopt_unsent(run.dir("train")):
            logger.warning(f"{points} metric point(s) of the ranks never reached MLflow; kept in {run.journal.path} "
                           "and sent when the tracking server is back")
        attempts.end(ok)


def finish(run: StageRun, result: dict) -> None:
    """The final checkpoint's tags, its Hugging Face export, the loss plot, and the files MLflow keeps."""
    out = run.dir("train")
    run.set_tag("final_checkpoint", f"{result['checkpoint_dir']}/{result['latest_checkpoint']}")
    if (out / PLAN_FILE).is_file():  # the last launch's: a relaunch on fewer nodes plans anew
        run.set_tags(plan_tags(read_json(out / PLAN_FILE)))
    if run.cfg.train.checkpoint.export_hf and result["latest_checkpoint"]:
        result["hf_export"] = export_task(str(out), str(run.dir("tokenizer")), result["latest_checkpoint"])["export_dir"]
        run.set_tag("hf_export", result["hf_export"])
    mirror = mirror_status(out)
    if mirror is not None:
        result["mirror"] = mirror
        run.set_tags({"mirror.ok": str(mirror["ok"]).lower(), "mirror.failed": str(len(mirror["failed"]))})
    write_json(out / "result.json", result)
    loss_plot(out, out / "loss.png")
    ledger = ledger_rows(out / METRICS_FILE)
    write_json(out / LEDGER_FILE, ledger)
    run.log_files(out, OUTPUTS, "train", missing_ok=True)  # recovery.jsonl only after a recovery
    if ledger:
        table_artifact(run, "train-ledger", ledger, "Tokens trained per data pool and mixture phase")
    if warning := mirror_warning(mirror):
        get_run_logger().warning(warning)
    markdown_artifact(run, "train", (f"**{warning}**\n\n" if warning else "")
                      + f"Training finished at step {result['latest_step']}.\n\n"
                      f"Final checkpoint: `{result['checkpoint_dir']}/{result['latest_checkpoint']}`"
                      + (f"\n\nHugging Face export: `{result['hf_export']}`" if result.get("hf_export") else ""),
                      "Training result")


def train_steps(run: StageRun, version: StageVersion) -> dict:
    # the version is the config's as written: dropping a node that failed preflight changes none
    run = replace(run, cfg=without_dropped_nodes(run.cfg))
    run.log_params({"model": run.cfg.model.model_dump(), "train": run.cfg.train.model_dump()})
    with CheckpointAnnouncer(run.cfg, run.dir("train"), run.run_id):
        result = monitored_training(run)
    finish(run, result)
    log_lineage(run, version, result)
    return result


@flow(name="train", log_prints=True, persist_result=True)
def train_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None,
               force: bool = False, planned: str | None = None) -> dict:
    """Launch the DeepSpeed training program, stream its logs, and report the final checkpoint."""
    cfg = resolve_config(config, "train")
    return versioned_stage(cfg, "train", mlflow_parent_run_id, force, train_steps, planned)
