"""Tokenizer training on the real corpora: time and peak memory against corpus size, and the report.

    python benchmarks/tokenizer_training.py [--shared ../shared] [--vocab 32000]

Cleans ../shared/corpora (zh and en) plus the Python standard library's own source
(the code channel) with the default rules, then trains the tokenizer stage on 25%,
50% and 100% of the kept text (tokenizer.max_training_chars), each in a fresh
process, and once more at 100% without cutting long CJK runs (tokenizer.max_cjk_run=0).
Table 1: training seconds, peak RSS (sampled) and held-out zh compression per run. Then the full-size report:
compression per channel with cl100k_base / o200k_base columns, diagnostics, pruning.
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402

from benchmarks._corpus import benchmark_parser, clean_corpus  # noqa: E402
from benchmarks._memory import run_measured  # noqa: E402
from tasks.common.outputs import read_json  # noqa: E402
from tasks.tokenizer.train import kept_chars_by_channel  # noqa: E402
from tasks.tokenizer.report import report_markdown  # noqa: E402


def train_in_subprocess(clean_dir: Path, out: Path, vocab: int, max_chars: int, max_cjk_run: int = 32) -> dict:
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from pretrain.config import TokenizerConfig
from tasks.tokenizer.train import run_tokenizer
cfg = TokenizerConfig(vocab_size={vocab}, reserved_tokens=1000, held_out_docs=200, max_training_chars={max_chars},
                      max_cjk_run={max_cjk_run}, channel_mix={{"zh": 0.4, "en": 0.4, "code": 0.2}})
t = time.perf_counter()
report = run_tokenizer(cfg, Path({str(clean_dir)!r}), Path({str(out)!r}))
print(json.dumps({{"seconds": time.perf_counter() - t,
                   "training_chars": sum(report["training_chars_by_channel"].values()),
                   "zh_chars_per_token": report["held_out"].get("zh", {{}}).get("chars_per_token"),
                   "longest_token_chars": max(len(t) for t in report["longest_tokens"])}}))
"""
    result, peak_mb = run_measured([sys.executable, "-c", code])
    return {**result, "max_rss_mb": peak_mb}


def unpunctuated_zh(clean_dir: Path, dest: Path) -> Path:
    """The kept Chinese with every non-CJK character removed: text as some scraped pages and OCR give it."""
    import re

    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    shutil.copytree(clean_dir, dest)
    for path in sorted((dest / "kept").glob("*.parquet")):
        table = pq.read_table(path)
        table = table.filter(pc.equal(table.column("channel"), "zh"))
        texts = [re.sub(r"[^\u4e00-\u9fff]", "", t) for t in table.column("text").to_pylist()]
        pq.write_table(table.set_column(table.schema.get_field_index("text"), "text", pa.array(texts)), path)
    return dest


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tok-bench-"))
    try:
        manifest = clean_corpus(args.shared / "corpora", tmp / "clean")
        kept_chars = kept_chars_by_channel(tmp / "clean")
        total = sum(kept_chars.values())
        print(f"corpus kept: {manifest['kept']} docs, characters by channel {kept_chars}\n")
        print(f"Table 1: training the tokenizer stage (vocab {args.vocab} + 1000 reserved), fresh process each")
        print(f"{'share':<8}{'max_cjk_run':>12}{'max_training_chars':>20}{'chars trained on':>18}{'seconds':>10}"
              f"{'peak RSS MB':>12}{'zh chars/token':>16}")
        for share, max_cjk_run in ((0.25, 32), (0.5, 32), (1.0, 32), (1.0, 0)):
            out = tmp / f"tok-{share}-{max_cjk_run}"
            r = train_in_subprocess(tmp / "clean", out, args.vocab, int(total * share), max_cjk_run)
            print(f"{share:<8}{max_cjk_run or 'no cut':>12}{int(total * share):>20,}{r['training_chars']:>18,}"
                  f"{r['seconds']:>10.1f}{r['max_rss_mb']:>12.0f}{r['zh_chars_per_token']:>16}")
        print("\nTable 2: the same, on the kept Chinese with punctuation, digits, Latin and whitespace removed")
        print(f"{'max_cjk_run':>12}{'seconds':>10}{'peak RSS MB':>12}{'longest token (chars)':>23}")
        bare = unpunctuated_zh(tmp / "clean", tmp / "clean-unpunctuated")
        for max_cjk_run in (32, 0):
            r = train_in_subprocess(bare, tmp / f"tok-bare-{max_cjk_run}", args.vocab, total, max_cjk_run)
            print(f"{max_cjk_run or 'no cut':>12}{r['seconds']:>10.1f}{r['max_rss_mb']:>12.0f}{r['longest_token_chars']:>23}")
        report = read_json(tmp / "tok-1.0-32" / "report.json")
        print("\nReport of the full-size tokenizer:\n")
        print(report_markdown(report))
        print("pruning:", json.dumps(report["pruning"], ensure_ascii=False))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
