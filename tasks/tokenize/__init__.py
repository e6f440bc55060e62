"""Tokenize stage: cleaned Parquet -> memory-mappable Arrow IPC token shards + manifest."""
from tasks.tokenize.stage import complete, prepare, run_tokenize

__all__ = ["complete", "prepare", "run_tokenize"]
