"""The real corpus the benchmarks share: ../shared/corpora (zh, en) plus Python source for the code channel."""
from __future__ import annotations

import argparse
import sysconfig
from pathlib import Path

from pretrain.config import CleanConfig, TokenizerConfig
from tasks.clean.stage import run_clean
from tasks.tokenizer import run_tokenizer


def sources(corpora: Path, code_glob: str = "/**/*.py") -> list[dict]:
    return [
        {"path": str(corpora / "zh" / "cnews.val.txt"), "format": "tsv", "columns": ["label", "text"], "name": "zh-news"},
        {"path": str(corpora / "zh" / "ChnSentiCorp_htl_all.csv"), "text_field": "review", "name": "zh-reviews"},
        {"path": str(corpora / "zh" / "zhwiki_simplified_00.jsonl"), "name": "zh-wiki"},
        {"path": str(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"), "name": "en-web"},
        {"path": str(corpora / "en" / "ag_news_test.csv"), "columns": ["label", "title", "text"], "name": "en-news"},
        {"path": str(corpora / "en" / "wikitext2_test.raw"), "text_unit": "line", "name": "en-wiki"},
        {"path": sysconfig.get_paths()["stdlib"] + code_glob, "channel_hint": "code", "name": "python-stdlib"},
    ]


def clean_corpus(corpora: Path, out: Path, code_glob: str = "/**/*.py") -> dict:
    return run_clean(CleanConfig(sources=sources(corpora, code_glob)), out)


def train_small_tokenizer(clean_dir: Path, out: Path, vocab: int = 32000) -> dict:
    cfg = TokenizerConfig(vocab_size=vocab, reserved_tokens=1000, max_training_chars=20_000_000)
    return run_tokenizer(cfg, clean_dir, out)


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """The script's docstring as --help, and --shared (the folder holding corpora/ and fixtures/)."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    return parser
