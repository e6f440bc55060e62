"""The demo corpus as a benchmark's run root: its config (the tiny config, a 4-layer model of the given width) and
its clean -> tokenizer -> tokens stages."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from pretrain.config import merged_train, parse_config
from tasks.clean.stage import run_clean
from tasks.tokenize import run_tokenize
from tasks.tokenizer.train import run_tokenizer

ROOT = Path(__file__).resolve().parents[1]


def demo_config(tmp: Path, dim: int, max_seq_len: int, train: dict, preflight: dict | None = None):
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["run_root"] = str(tmp)
    data["clean"]["sources"] = [{"path": str(ROOT / "demo/corpus/paragraphs.jsonl"), "name": "demo", "id_field": "id"}]
    data["model"] = {"dim": dim, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4, "ffn_hidden": dim * 8 // 3 // 64 * 64,
                     "max_seq_len": max_seq_len}
    data["train"] = merged_train(data["train"], train)
    data["preflight"].update(preflight or {})
    return parse_config(data)


def prepare(cfg, tmp: Path) -> int:
    """The three data stages into tmp; the model's embedding rows."""
    run_clean(cfg.clean, tmp / "clean")
    run_tokenizer(cfg.tokenizer, tmp / "clean", tmp / "tokenizer")
    run_tokenize(cfg.tokenize, tmp / "clean", tmp / "tokenizer", tmp / "tokens")
    return json.loads((tmp / "tokenizer" / "report.json").read_text())["embedding_rows"]
