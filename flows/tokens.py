"""The tokenize stage: encode the cleaned corpus into Arrow IPC token shards with a manifest.

Named tokens.py, not tokenize.py: Prefect puts this folder first on sys.path when it loads a
deployment's entrypoint, where a tokenize.py would stand in for the standard library's module.
"""
from __future__ import annotations

import os
from pathlib import Path

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, StageRun, table_artifact
from flows.executors import map_on
from flows.progress import StageProgress
from flows.versions import versioned_stage
from pretrain.config import PipelineConfig, TokenizeConfig, resolve_config
from tasks.common.failures import retry_if_transient
from tasks.tokenize import complete, plan_reject_counts, prepare
from tasks.tokenize.parts import PartSettings, PartSpec, tokenize_part
from tasks.tokenize.rejects import RULE_TOKENS, RejectSpec, count_rejected, rule_table
from tasks.versions import StageVersion


@task(name="plan-token-parts")
def plan_parts_task(cfg: TokenizeConfig, clean_dir: str, tokenizer_dir: str, out_dir: str
                    ) -> tuple[list[PartSpec], PartSettings, str]:
    specs, settings, work_dir = prepare(cfg, Path(clean_dir), Path(tokenizer_dir), Path(out_dir))
    return specs, settings, str(work_dir)


@task(name="tokenize-part", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def tokenize_part_task(spec: PartSpec, settings: PartSettings, work_dir: str) -> dict:
    # one task per worker process or Ray CPU: the tokenizer's own thread pool would oversubscribe the cores
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return tokenize_part(spec, settings, Path(work_dir))


@task(name="count-rejected-tokens", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def count_rejected_task(spec: RejectSpec, settings: PartSettings, work_dir: str) -> dict:
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return count_rejected(spec, settings, Path(work_dir))


@task(name="write-token-manifest")
def complete_task(cfg: TokenizeConfig, specs: list[PartSpec], metas: list[dict], settings: PartSettings,
                  clean_dir: str, work_dir: str, out_dir: str, counted: list[dict] | None) -> dict:
    return complete(cfg, specs, metas, settings, Path(clean_dir), Path(work_dir), Path(out_dir), counted)


def record_manifest(run: StageRun, manifest: dict, reused: int, parts: int) -> None:
    """The manifest's totals in MLflow and the shard table in the Prefect UI."""
    run.log_metrics({"total_tokens": manifest["total_tokens"], "total_docs": manifest["total_docs"],
                     "shards": len(manifest["shards"]), "tokens_by_channel": manifest["tokens_by_channel"],
                     "tokens_by_source": manifest["tokens_by_source"], "parts_reused": reused})
    run.log_files(run.dir("tokens"), ("manifest.json",), "tokens")
    table_artifact(run, "tokenize", manifest["shards"],
                   f"{manifest['total_tokens']} tokens in {len(manifest['shards'])} shards from {parts} parts "
                   f"({reused} reused), dataset version {manifest['version']}")


def record_rejected(run: StageRun, manifest: dict) -> None:
    """How many tokens each cleaning rule removed, in MLflow and as a table."""
    run.log_metrics({"rejected_tokens_by_rule": manifest["rejected_tokens_by_rule"]})
    run.log_files(run.dir("tokens"), (RULE_TOKENS,), "tokens")
    table_artifact(run, "rule-tokens", rule_table(run.dir("clean"), run.dir("tokens")),
                   "Cleaning per rule, with the tokens each rule removed (trained tokenizer, EOS included)")


def tokenize_steps(run: StageRun, version: StageVersion) -> dict:
    cfg, clean_dir, out = run.cfg, str(run.dir("clean")), str(run.dir("tokens"))
    specs, settings, work_dir = plan_parts_task(cfg.tokenize, clean_dir, str(run.dir("tokenizer")), out)
    metas = map_on(cfg.tokenize.executor, tokenize_part_task,
                   [{"spec": spec, "settings": settings, "work_dir": work_dir} for spec in specs],
                   StageProgress(cfg, "tokenize", len(specs), "parts").advance)
    rejects = plan_reject_counts(cfg.tokenize, Path(clean_dir), settings)
    counted = map_on(cfg.tokenize.executor, count_rejected_task,
                     [{"spec": spec, "settings": settings, "work_dir": work_dir} for spec in rejects])
    manifest = complete_task(cfg.tokenize, specs, metas, settings, clean_dir, work_dir, out,
                             counted if cfg.tokenize.count_rejected_tokens else None)
    record_manifest(run, manifest, sum(bool(m.get("skipped")) for m in metas), len(specs))
    if cfg.tokenize.count_rejected_tokens:
        record_rejected(run, manifest)
    return manifest


@flow(name="tokenize", log_prints=True, persist_result=True)
def tokenize_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None,
                  force: bool = False, planned: str | None = None) -> dict:
    """Encode the cleaned corpus into Arrow IPC token shards with a manifest."""
    cfg = resolve_config(config, "tokenize")
    return summary(versioned_stage(cfg, "tokenize", mlflow_parent_run_id, force, tokenize_steps, planned))


def summary(manifest: dict) -> dict:
    return {k: manifest[k] for k in ("total_tokens", "total_docs", "version", "tokens_by_channel")}
