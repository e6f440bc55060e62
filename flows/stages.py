"""One flow per stage. Each reads like its steps and returns a small manifest."""
from __future__ import annotations

import re
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact

from flows.common import artifact_key, markdown_artifact, stage_run, table_artifact
from flows.events import CheckpointAnnouncer
from flows.executors import map_on
from flows.progress import StageProgress
from model.redact import redact
from pretrain.config import CleanConfig, PipelineConfig, TokenizeConfig, resolve_config
from tasks import tracking
from tasks.failures import retry_if_transient
from tasks.clean.shards import ShardSpec, clean_shard
from tasks.clean.stage import complete, prepare
from tasks.preflight.checks import gate, run_checks
from tasks.preflight.comm import check_comm_share
from tasks.preflight.nodes import run_node_checks
from tasks.tokenize import complete as complete_tokenize
from tasks.tokenize import plan_reject_counts
from tasks.tokenize import prepare as prepare_tokenize
from tasks.tokenize.parts import PartSettings, PartSpec, tokenize_part
from tasks.tokenize.rejects import RULE_TOKENS, RejectSpec, count_rejected
from tasks.tokenize.rejects import rule_table as rule_token_table
from tasks.tokenizer import run_tokenizer

DEFAULT_CONFIG = "configs/tiny.yaml"
STEP_LINE = re.compile(r"\bstep (\d+)/\d+ loss=")  # rank 0's console line per logged step


class PreflightFailed(RuntimeError):
    pass


@task(name="plan-shards")
def plan_task(cfg: CleanConfig, out_dir: str) -> tuple[list[ShardSpec], str]:
    specs, work_dir = prepare(cfg, Path(out_dir))
    return specs, str(work_dir)


@task(name="clean-shard", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def clean_shard_task(cfg: CleanConfig, spec: ShardSpec, work_dir: str) -> dict:
    return clean_shard(cfg, spec, Path(work_dir))


@task(name="dedup-and-write")
def finalize_task(cfg: CleanConfig, specs: list[ShardSpec], metas: list[dict], work_dir: str, out_dir: str) -> dict:
    return complete(cfg, specs, metas, Path(work_dir), Path(out_dir))


@task(name="train-tokenizer")
def tokenizer_task(cfg: PipelineConfig, clean_dir: str, out_dir: str) -> dict:
    from pathlib import Path

    return run_tokenizer(cfg.tokenizer, Path(clean_dir), Path(out_dir), cfg.model.max_seq_len)


@task(name="plan-token-parts")
def plan_parts_task(cfg: TokenizeConfig, clean_dir: str, tokenizer_dir: str, out_dir: str
                    ) -> tuple[list[PartSpec], PartSettings, str]:
    specs, settings, work_dir = prepare_tokenize(cfg, Path(clean_dir), Path(tokenizer_dir), Path(out_dir))
    return specs, settings, str(work_dir)


@task(name="tokenize-part", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def tokenize_part_task(spec: PartSpec, settings: PartSettings, work_dir: str) -> dict:
    import os

    # one task per worker process or Ray CPU: the tokenizer's own thread pool would oversubscribe the cores
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return tokenize_part(spec, settings, Path(work_dir))


@task(name="count-rejected-tokens", retries=2, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def count_rejected_task(spec: RejectSpec, settings: PartSettings, work_dir: str) -> dict:
    import os

    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    return count_rejected(spec, settings, Path(work_dir))


@task(name="write-token-manifest")
def tokenize_complete_task(cfg: TokenizeConfig, specs: list[PartSpec], metas: list[dict], settings: PartSettings,
                           clean_dir: str, work_dir: str, out_dir: str, counted: list[dict] | None) -> dict:
    return complete_tokenize(cfg, specs, metas, settings, Path(clean_dir), Path(work_dir), Path(out_dir), counted)


@task(name="export-hf", retries=1, retry_delay_seconds=10, retry_condition_fn=retry_if_transient)
def export_task(train_dir: str, tokenizer_dir: str, tag: str) -> dict:
    from tasks.export import export_run_checkpoint

    return export_run_checkpoint(Path(train_dir), Path(tokenizer_dir), tag=tag)


@task(name="health-checks", retries=1, retry_delay_seconds=30, retry_condition_fn=retry_if_transient)
def preflight_task(cfg: PipelineConfig, run_root: str) -> dict:
    root = Path(run_root)
    node_checks, nodes = run_node_checks(cfg, root, root / "preflight")
    checks = run_checks(cfg.preflight, root, nodes=max(1, len(nodes["hosts"]))) + node_checks
    if cfg.preflight.comm_profile_steps:
        checks.append(check_comm_share(cfg, root, get_run_logger().info))
    return {**gate(checks, cfg.preflight.ignore_failures), "nodes": nodes}


@flow(name="rollback", log_prints=True)
def rollback_flow(decision: dict, train_dir: str, key_prefix: str = "train") -> list[str]:
    """Set aside the checkpoints after the rollback target, so training goes on from before the trouble."""
    from tasks.monitored import roll_back
    from tasks.recovery import Decision

    abandoned = roll_back(Decision(**{**decision, "skip": tuple(decision["skip"]) if decision["skip"] else None}),
                          Path(train_dir))
    a = decision["anomaly"]
    create_markdown_artifact(key=f"{key_prefix}-rollback-{decision['attempt']}", description="Rollback", markdown=(
        f"**Why**: {decision['reason']}\n\n**Detected** at step {a['step']} (onset estimated at step {a['onset_step']})"
        f"\n\n**From** step {a['step']} **to** checkpoint `{decision['checkpoint'] or 'the start'}`\n\n"
        f"**Set aside**: {', '.join(abandoned) or 'none'}"))
    return abandoned


@flow(name="skip-ahead", log_prints=True)
def skip_ahead_flow(decision: dict, tokens_dir: str, train_cfg: dict, key_prefix: str = "train") -> dict:
    """Record the skipped sample range and what it covers (documents, sources, channels) for the cleaning stage."""
    from tasks.skipped import skipped_data_report

    report = skipped_data_report(Path(tokens_dir), train_cfg, [decision["skip"]])
    lr = f"; learning rate x{decision['lr_scale']}" if decision["lr_scale"] != 1.0 else ""
    create_markdown_artifact(key=f"{key_prefix}-skip-ahead-{decision['attempt']}", description="Skip-ahead", markdown=(
        f"**Skipped** sampler positions {decision['skip'][0]}..{decision['skip'][1]} "
        f"(escalation {decision['escalation']}{lr})\n\n{report['markdown']}"))
    return report


def rule_table(stats_path: Path, unreadable: list[dict]) -> list[dict]:
    """Documents and characters per outcome / rule / reason, all channels together, largest first."""
    import duckdb

    rows = duckdb.sql(f"""
        SELECT outcome, rule, reason, sum(docs)::BIGINT AS documents, sum(chars)::BIGINT AS characters
        FROM read_parquet('{stats_path}') GROUP BY ALL ORDER BY outcome, documents DESC""").fetchall()
    table = [dict(zip(("outcome", "rule", "reason", "documents", "characters"), r)) for r in rows]
    return table + [{"outcome": "unreadable file", "rule": "", "reason": u["path"],
                     "documents": u["docs_read_before_error"], "characters": 0} for u in unreadable]


def decontamination_rows(report: dict) -> list[dict]:
    """One row per eval set, those that removed nothing included: 'no leak found' is a result too."""
    return [{"outcome": "eval set", "rule": "decontam", "reason": f"{name}: {r['items']} items "
             f"({r['items_shorter_than_ngram']} shorter than a window)",
             "documents": r.get("rejected_docs", r.get("tagged_docs", 0)), "characters": 0}
            for name, r in report.items()]


@flow(name="clean", log_prints=True, persist_result=True)
def clean_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Read, normalize, tag, filter and deduplicate the corpus into kept/rejected Parquet."""
    cfg = resolve_config(config)
    with stage_run(cfg, "clean", mlflow_parent_run_id) as run:
        out = str(run.dir("clean"))
        specs, work_dir = plan_task(cfg.clean, out)
        metas = map_on(cfg.clean.executor, clean_shard_task,
                       [{"cfg": cfg.clean, "spec": spec, "work_dir": work_dir} for spec in specs],
                       StageProgress(cfg, "clean", len(specs), "shards").advance)
        manifest = finalize_task(cfg.clean, specs, metas, work_dir, out)
        tracking.log_metrics(run.mlflow_uri, run.run_id, {k: v for k, v in manifest.items() if k != "unreadable_files"})
        for name in ("manifest.json", "stats.parquet", "samples.parquet"):
            tracking.log_artifact(run.mlflow_uri, run.run_id, run.dir("clean") / name, "clean")
        table_artifact(run, "clean", rule_table(run.dir("clean") / "stats.parquet", manifest["unreadable_files"])
                       + decontamination_rows(manifest["decontamination"]),
                       f"Cleaning: {manifest['docs_in']} in = {manifest['kept']} kept + {manifest['rejected']} rejected"
                       f" ({manifest['shards']} shards, {manifest['shards_skipped']} reused)")
    return manifest


@flow(name="tokenizer", log_prints=True, persist_result=True)
def tokenizer_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Train the byte-level BPE tokenizer on the cleaned text and report its compression."""
    cfg = resolve_config(config)
    with stage_run(cfg, "tokenizer", mlflow_parent_run_id) as run:
        report = tokenizer_task(cfg, str(run.dir("clean")), str(run.dir("tokenizer")))
        tracking.log_metrics(run.mlflow_uri, run.run_id, {k: v for k, v in report.items()
                                                          if k in ("vocab_size", "total_tokens", "embedding_rows", "held_out",
                                                                   "unreachable_tokens", "partial_utf8_tokens",
                                                                   "cjk_single_token_share")})
        for name in ("tokenizer.json", "report.json", "report.md", "training_sample.parquet"):
            tracking.log_artifact(run.mlflow_uri, run.run_id, run.dir("tokenizer") / name, "tokenizer")
        markdown_artifact(run, "tokenizer", (run.dir("tokenizer") / "report.md").read_text(encoding="utf-8"),
                          "Tokenizer report on held-out text")
    return report


@flow(name="tokenize", log_prints=True, persist_result=True)
def tokenize_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Encode the cleaned corpus into Arrow IPC token shards with a manifest."""
    cfg = resolve_config(config)
    with stage_run(cfg, "tokenize", mlflow_parent_run_id) as run:
        clean_dir, out = str(run.dir("clean")), str(run.dir("tokens"))
        specs, settings, work_dir = plan_parts_task(cfg.tokenize, clean_dir, str(run.dir("tokenizer")), out)
        metas = map_on(cfg.tokenize.executor, tokenize_part_task,
                       [{"spec": spec, "settings": settings, "work_dir": work_dir} for spec in specs],
                       StageProgress(cfg, "tokenize", len(specs), "parts").advance)
        rejects = plan_reject_counts(cfg.tokenize, Path(clean_dir), settings)
        counted = map_on(cfg.tokenize.executor, count_rejected_task,
                         [{"spec": spec, "settings": settings, "work_dir": work_dir} for spec in rejects])
        manifest = tokenize_complete_task(cfg.tokenize, specs, metas, settings, clean_dir, work_dir, out,
                                          counted if cfg.tokenize.count_rejected_tokens else None)
        tracking.log_metrics(run.mlflow_uri, run.run_id, {"total_tokens": manifest["total_tokens"],
                             "total_docs": manifest["total_docs"], "shards": len(manifest["shards"]),
                             "tokens_by_channel": manifest["tokens_by_channel"],
                             "tokens_by_source": manifest["tokens_by_source"],
                             "parts_reused": sum(bool(m.get("skipped")) for m in metas)})
        tracking.log_artifact(run.mlflow_uri, run.run_id, run.dir("tokens") / "manifest.json", "tokens")
        if cfg.tokenize.count_rejected_tokens:
            tracking.log_metrics(run.mlflow_uri, run.run_id, {"rejected_tokens_by_rule": manifest["rejected_tokens_by_rule"]})
            tracking.log_artifact(run.mlflow_uri, run.run_id, run.dir("tokens") / RULE_TOKENS, "tokens")
            table_artifact(run, "rule-tokens", rule_token_table(Path(clean_dir), run.dir("tokens")),
                           "Cleaning per rule, with the tokens each rule removed (trained tokenizer, EOS included)")
        table_artifact(run, "tokenize", manifest["shards"],
                       f"{manifest['total_tokens']} tokens in {len(manifest['shards'])} shards from {len(specs)} parts "
                       f"({sum(bool(m.get('skipped')) for m in metas)} reused), dataset version {manifest['version']}")
    return {k: manifest[k] for k in ("total_tokens", "total_docs", "version", "tokens_by_channel")}


@flow(name="preflight", log_prints=True, persist_result=True)
def preflight_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Run the health checks and stop the pipeline when one fails (unless overridden)."""
    cfg = resolve_config(config)
    with stage_run(cfg, "preflight", mlflow_parent_run_id) as run:
        report = preflight_task(cfg, str(run.root))
        out = run.dir("preflight")
        out.mkdir(parents=True, exist_ok=True)
        from tasks.common.outputs import write_json

        write_json(out / "report.json", report)
        tracking.log_artifact(run.mlflow_uri, run.run_id, out / "report.json", "preflight")
        table_artifact(run, "preflight", report["checks"],
                       "Preflight: " + ("passed" if not report["failed"] else f"FAILED {report['failed']}")
                       + (" (override recorded)" if report["override"] else ""))
        if not report["passed_gate"]:
            raise PreflightFailed(f"preflight checks failed: {report['failed']}; see {out / 'report.json'}. "
                                  f"Fix them, or set preflight.ignore_failures: true to train anyway")
    return report


def without_dropped_nodes(cfg: PipelineConfig) -> PipelineConfig:
    """The config with the nodes preflight dropped (preflight.drop_failing_nodes) left out."""
    report = cfg.run_root_path() / "preflight" / "report.json"
    if not report.is_file():
        return cfg
    from tasks.common.outputs import read_json
    from tasks.launch import cluster_hosts

    dropped = set(read_json(report).get("nodes", {}).get("dropped", []))
    if not dropped:
        return cfg
    kept = [h for h in cluster_hosts(cfg.train) if h.name not in dropped]
    print(f"training without the nodes preflight dropped: {sorted(dropped)}; on {[h.name for h in kept]}")
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"hosts": kept, "hostfile": None})})


def monitored_training(cfg: PipelineConfig, tokenizer_dir: Path, tokens_dir: Path, train_dir: Path, env: dict) -> dict:
    """Train; each rollback and skip-ahead runs as a sub-flow of the train flow, with its artifact.

    The first attempt logs to the train run; each relaunch after a recovery to a child run of it
    (`<name>/train/attempt-N`), so every attempt's curve stays apart in MLflow.
    """
    from tasks.monitored import run_monitored

    uri, train_run = env["MLFLOW_TRACKING_URI"], env["MLFLOW_RUN_ID"]
    children: list[str] = []

    def env_for_attempt(attempt: int) -> dict:
        if attempt == 1:
            return {}
        if children:  # the attempt before this one ended early
            tracking.end_run(uri, children[-1], ok=False)
        exp = tracking.client(uri).get_run(train_run).info.experiment_id
        children.append(tracking.start_run(uri, exp, f"{cfg.name}/train/attempt-{attempt}", train_run,
                                           {"stage": "train", "attempt": str(attempt)}))
        return {"MLFLOW_RUN_ID": children[-1]}

    def rollback_and_skip(decision, out_dir: Path) -> list[str]:
        record = decision.record()
        abandoned = rollback_flow(record, str(out_dir), artifact_key(cfg, "train"))
        skip_ahead_flow(record, str(tokens_dir), redact(cfg.train.model_dump()), artifact_key(cfg, "train"))
        return abandoned

    progress, logger = StageProgress(cfg, "train", cfg.train.steps, "steps", every_s=10.0), get_run_logger()

    def log_line(line: str) -> None:
        logger.info(line)
        if m := STEP_LINE.search(line):
            progress.advance(int(m.group(1)))

    ok = False
    try:
        result = run_monitored(cfg.model, cfg.train, tokenizer_dir, tokens_dir, train_dir, env,
                               log_line=log_line, rollback=rollback_and_skip,
                               env_for_attempt=env_for_attempt)
        ok = True
        return result
    finally:
        if children:
            tracking.end_run(uri, children[-1], ok)


@flow(name="train", log_prints=True, persist_result=True)
def train_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Launch the DeepSpeed training program, stream its logs, and report the final checkpoint."""
    cfg = without_dropped_nodes(resolve_config(config))
    with stage_run(cfg, "train", mlflow_parent_run_id) as run:
        tracking.log_params(run.mlflow_uri, run.run_id, {"model": cfg.model.model_dump(), "train": cfg.train.model_dump()})
        env = {"MLFLOW_RUN_ID": run.run_id, "MLFLOW_TRACKING_URI": run.mlflow_uri}
        with CheckpointAnnouncer(cfg, run.dir("train"), run.run_id):
            result = monitored_training(cfg, run.dir("tokenizer"), run.dir("tokens"), run.dir("train"), env)
        client = tracking.client(run.mlflow_uri)
        client.set_tag(run.run_id, "final_checkpoint", f"{result['checkpoint_dir']}/{result['latest_checkpoint']}")
        if cfg.train.export_hf and result["latest_checkpoint"]:
            result["hf_export"] = export_task(str(run.dir("train")), str(run.dir("tokenizer")),
                                              result["latest_checkpoint"])["export_dir"]
            client.set_tag(run.run_id, "hf_export", result["hf_export"])
        from tasks.common.outputs import write_json

        write_json(run.dir("train") / "result.json", result)
        from tasks.loss_plot import loss_plot

        loss_plot(run.dir("train"), run.dir("train") / "loss.png")
        for name in ("result.json", "spec.json", "metrics.jsonl", "events.jsonl", "recovery.jsonl", "loss.png"):
            if (run.dir("train") / name).is_file():  # recovery.jsonl only after a recovery
                tracking.log_artifact(run.mlflow_uri, run.run_id, run.dir("train") / name, "train")
        markdown_artifact(run, "train", f"Training finished at step {result['latest_step']}.\n\n"
                          f"Final checkpoint: `{result['checkpoint_dir']}/{result['latest_checkpoint']}`"
                          + (f"\n\nHugging Face export: `{result['hf_export']}`" if result.get("hf_export") else ""),
                          "Training result")
    return result
