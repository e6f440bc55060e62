"""Tokenize stage: cleaned Parquet -> memory-mappable Arrow IPC token shards + manifest."""
from tasks.tokenize.stage import complete, plan_reject_counts, prepare, run_tokenize

__all__ = ["complete", "plan_reject_counts", "prepare", "run_tokenize"]
