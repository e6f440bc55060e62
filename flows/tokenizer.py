"""The tokenizer stage: train the byte-level BPE on the cleaned text and report its compression."""
from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, StageRun, markdown_artifact
from flows.versions import versioned_stage
from pretrain.config import PipelineConfig, resolve_config
from tasks.tokenizer.train import run_tokenizer
from tasks.versions import StageVersion

OUTPUTS = ("tokenizer.json", "report.json", "report.md", "training_sample.parquet")
METRICS = ("vocab_size", "total_tokens", "embedding_rows", "held_out", "unreachable_tokens", "partial_utf8_tokens",
           "cjk_single_token_share")


@task(name="train-tokenizer")
def tokenizer_task(cfg: PipelineConfig, clean_dir: str, out_dir: str) -> dict:
    return run_tokenizer(cfg.tokenizer, Path(clean_dir), Path(out_dir), cfg.model.max_seq_len if cfg.model else None)


def tokenizer_steps(run: StageRun, version: StageVersion) -> dict:
    out = run.dir("tokenizer")
    report = tokenizer_task(run.cfg, str(run.dir("clean")), str(out))
    run.log_metrics({k: v for k, v in report.items() if k in METRICS})
    run.log_files(out, OUTPUTS, "tokenizer")
    markdown_artifact(run, "tokenizer", (out / "report.md").read_text(encoding="utf-8"),
                      "Tokenizer report on held-out text")
    return report


@flow(name="tokenizer", log_prints=True, persist_result=True)
def tokenizer_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None,
                   force: bool = False, planned: str | None = None) -> dict:
    """Train the byte-level BPE tokenizer on the cleaned text and report its compression."""
    cfg = resolve_config(config, "tokenizer")
    return versioned_stage(cfg, "tokenizer", mlflow_parent_run_id, force, tokenizer_steps, planned)
