"""The clean stage: read, normalize, tag, filter and deduplicate the corpus into kept/rejected Parquet."""
from __future__ import annotations

import json
from pathlib import Path

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, StageRun, table_artifact
from flows.executors import map_on
from flows.progress import StageProgress
from flows.versions import versioned_stage
from pretrain.config import CleanConfig, PipelineConfig, resolve_config
from tasks.clean.shards import ShardSpec, clean_shard
from tasks.clean.stage import complete, prepare
from tasks.clean.tally import rule_table
from tasks.common.failures import retry_if_transient
from tasks.versions import StageVersion

OUTPUTS = ("manifest.json", "stats.parquet", "samples.parquet")


@task(name="plan-shards")
def plan_task(cfg: CleanConfig, out_dir: str) -> tuple[CleanConfig, list[ShardSpec], str]:
    cfg, specs, work_dir = prepare(cfg, Path(out_dir))
    return cfg, specs, str(work_dir)


@task(name="clean-shard", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def clean_shard_task(cfg: CleanConfig, spec: ShardSpec, work_dir: str) -> dict:
    return clean_shard(cfg, spec, Path(work_dir))


@task(name="dedup-and-write")
def finalize_task(cfg: CleanConfig, specs: list[ShardSpec], metas: list[dict], work_dir: str, out_dir: str) -> dict:
    return complete(cfg, specs, metas, Path(work_dir), Path(out_dir))


def decontamination_rows(report: dict) -> list[dict]:
    """One row per eval set, those that removed nothing included: 'no leak found' is a result too."""
    return [{"outcome": "eval set", "rule": "decontam", "reason": f"{name}: {r['items']} items, window "
             f"{r['window']} tokens ({r['items_shorter_than_ngram']} shorter than it)",
             "documents": r.get("rejected_docs", r.get("tagged_docs", 0)), "characters": 0}
            for name, r in report.items()]


def source_rule_rows(manifest: dict) -> list[dict]:
    """One row per source judged with its own rule settings: the settings and the documents the rules rejected."""
    return [{"outcome": "source's own rules", "rule": name, "reason": ", ".join(
                f"{family}: {json.dumps(settings, sort_keys=True)}" for family, settings in rules.items()),
             "documents": manifest["rejected_by_source"].get(name, 0), "characters": 0}
            for name, rules in manifest.get("source_rules", {}).items()]  # a manifest from before it has none


def clean_steps(run: StageRun, version: StageVersion) -> dict:
    cfg, out = run.cfg, run.dir("clean")
    clean_cfg, specs, work_dir = plan_task(cfg.clean, str(out))  # with the classifier's corpus sample, if any
    metas = map_on(cfg.clean.executor, clean_shard_task,
                   [{"cfg": clean_cfg, "spec": spec, "work_dir": work_dir} for spec in specs],
                   StageProgress(cfg, "clean", len(specs), "shards").advance)
    manifest = finalize_task(clean_cfg, specs, metas, work_dir, str(out))
    run.log_metrics({k: v for k, v in manifest.items() if k != "unreadable_files"})
    run.log_files(out, OUTPUTS, "clean")
    table_artifact(run, "clean", rule_table(out / "stats.parquet", manifest["unreadable_files"])
                   + decontamination_rows(manifest["decontamination"]) + source_rule_rows(manifest),
                   f"Cleaning: {manifest['docs_in']} in = {manifest['kept']} kept + {manifest['rejected']} rejected"
                   f" ({manifest['shards']} shards, {manifest['shards_skipped']} reused)")
    return manifest


@flow(name="clean", log_prints=True, persist_result=True)
def clean_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None,
               force: bool = False, planned: str | None = None) -> dict:
    """Read, normalize, tag, filter and deduplicate the corpus into kept/rejected Parquet."""
    cfg = resolve_config(config, "clean")
    return versioned_stage(cfg, "clean", mlflow_parent_run_id, force, clean_steps, planned)
