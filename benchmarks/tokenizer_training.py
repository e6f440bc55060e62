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

from benchmarks._corpus import benchmark_parser, clean_corpus  # noqa: E402
from benchmarks._memory import run_measured  # noqa: E402
from tasks.common.outputs import read_json  # noqa: E402
from tasks.tokenizer import kept_chars_by_channel  # noqa: E402
from tasks.tokenizer_report import report_markdown  # noqa: E402


def train_in_subprocess(clean_dir: Path, out: Path, vocab: int, max_chars: int, max_cjk_run: int = 32) -> dict:
    code = f"""
import json, sys, time
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from pretrain.config import TokenizerConfig
from tasks.tokenizer import run_tokenizer
cfg = TokenizerConfig(vocab_size={vocab}, reserved_tokens=1000, held_out_docs=200, max_training_chars={max_chars},
                      max_cjk_run={max_cjk_run}, channel_mix={{"zh": 0.4, "en": 0.4, "code": 0.2}})
t = time.perf_counter()
report = run_tokenizer(cfg, Path({str(clean_dir)!r}), Path({str(out)!r}))
print(json.dumps({{"seconds": time.perf_counter() - t,
                   "training_chars": sum(report["training_chars_by_channel"].values()),
                   "zh_chars_per_token": report["held_out"].get("zh", {{}}).get("chars_per_token")}}))
"""
    result, peak_mb = run_measured([sys.executable, "-c", code])
    return {**result, "max_rss_mb": peak_mb}


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
        report = read_json(tmp / "tok-1.0-32" / "report.json")
        print("\nReport of the full-size tokenizer:\n")
        print(report_markdown(report))
        print("pruning:", json.dumps(report["pruning"], ensure_ascii=False))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
