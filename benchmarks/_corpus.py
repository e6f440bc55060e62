"""The real corpus the benchmarks share: ../shared/corpora (zh, en) plus Python source for the code channel."""
from __future__ import annotations

import argparse
import os
import sysconfig
from pathlib import Path

from pretrain import PROJECT_ROOT
from pretrain.config import CleanConfig, TokenizerConfig
from tasks.clean.stage import run_clean
from tasks.tokenizer.train import run_tokenizer


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


def default_shared() -> Path | None:
    """The folder holding corpora/ and fixtures/: $PRETRAIN_SHARED, else a `shared` folder beside the checkout
    or beside the working directory."""
    candidates = [os.environ.get("PRETRAIN_SHARED"), PROJECT_ROOT.parent / "shared",
                  Path.cwd().parent / "shared", Path.cwd() / "shared"]
    return next((Path(c) for c in candidates if c and (Path(c) / "corpora").is_dir()), None)


class BenchmarkParser(argparse.ArgumentParser):
    """Refuses to start without the shared corpora, saying where it looked and how to point at them."""

    def parse_args(self, *args, **kwargs):
        parsed = super().parse_args(*args, **kwargs)
        if parsed.shared is None or not (parsed.shared / "corpora").is_dir():
            where = f"{parsed.shared} has no corpora/ folder" if parsed.shared else (
                "no shared data folder found beside the checkout or the working directory")
            self.error(f"{where}; pass --shared DIR (the folder holding corpora/ and fixtures/, e.g. ../shared) "
                       f"or set PRETRAIN_SHARED=DIR")
        return parsed


def benchmark_parser(doc: str) -> argparse.ArgumentParser:
    """The script's docstring as --help, and --shared (the folder holding corpora/ and fixtures/)."""
    parser = BenchmarkParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=default_shared(),
                        help="the folder holding corpora/ and fixtures/ (default: $PRETRAIN_SHARED or ../shared)")
    return parser
