"""The pipeline's stages, each declared once: where it writes, what its flow returns, what it reads.

Read by the CLI (its commands and `--force` choices), stage versions and `pretrain status` (tasks/versions.py), the
config's check of the sections a command needs (pretrain/config/pipeline.py) and the stage flows (flows/versions.py).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Stage:
    name: str
    output: str                     # its folder under the run root
    result: str                     # the file there its flow returns, read back when the stage is reused
    version_fields: tuple[str, ...]  # config sections or dotted fields its version covers
    needs: tuple[str, ...]          # config sections it cannot run without
    inputs: tuple[str, ...]         # the stages whose output it reads
    versioned: bool = True          # False: checks the cluster as it is now, never reused


PIPELINE = (
    Stage("clean", "clean", "manifest.json", ("clean",), ("clean",), ()),
    Stage("tokenizer", "tokenizer", "report.json", ("tokenizer", "model.max_seq_len"), (), ("clean",)),
    Stage("tokenize", "tokens", "manifest.json", ("tokenize",), (), ("clean", "tokenizer")),
    Stage("preflight", "preflight", "report.json", (), ("model", "train"), (), versioned=False),
    Stage("train", "train", "result.json", ("model", "train"), ("model", "train"), ("tokenizer", "tokenize")),
)
STAGES = {s.name: s for s in PIPELINE}
STAGE_NAMES = tuple(STAGES)
VERSIONED = tuple(s.name for s in PIPELINE if s.versioned)
