"""Export a training checkpoint of a run to the Hugging Face Llama format."""
from __future__ import annotations

import json
from pathlib import Path

import torch

from model import checkpoint as ckpt
from model.export_hf import export, load_checkpoint_state
from model.llama import ModelArgs
from model.protocol import SPEC_FILE

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def export_run_checkpoint(train_dir: Path, tokenizer_dir: Path, out_dir: Path | None = None, tag: str | None = None,
                          dtype: str = "bf16") -> dict:
    """The named (or newest complete) checkpoint of train_dir -> out_dir (default: <train_dir>/hf/<tag>)."""
    ckpt_dir = Path(train_dir) / "checkpoints"
    tag = ckpt.complete_tag(ckpt_dir, tag)
    args = ModelArgs(**json.loads((Path(train_dir) / SPEC_FILE).read_text())["model"])
    out = Path(out_dir) if out_dir else Path(train_dir) / "hf" / tag
    export(load_checkpoint_state(ckpt_dir, tag), args, Path(tokenizer_dir), out, DTYPES[dtype], source=str(ckpt_dir / tag))
    return {"export_dir": str(out), "tag": tag, "dtype": dtype}
