"""What a shorter decontamination window costs: documents of unrelated corpora that share a window with an eval set.

    python benchmarks/decontam_window.py [--shared ../shared] [--items 2000] [--show 8]

Eval sets of short items, as lm-eval questions are: sentences of WikiText-2 (English, 8-30 words) and of the shared
Chinese Wikipedia file (8-40 characters). Documents: corpora those sentences do not come from (AG News items and
Common Crawl pages; Chinese news and hotel reviews). For each window length from 8 to 13 tokens the table gives the
items the window can find at all (at least that many tokens) and the documents it would remove; `--show` prints the
windows those documents share, so a reader can tell a common phrase from a real copy.
"""
from __future__ import annotations

import csv
import gzip
import json
import random
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from tasks.clean.eval_sets import token_hashes, tokens, window_hashes, windows_of  # noqa: E402

WINDOWS = range(8, 14)


def english(corpora: Path, count: int) -> tuple[list[str], dict[str, list[str]]]:
    raw = (corpora / "en" / "wikitext2_test.raw").read_text(encoding="utf-8")
    sentences = [s.strip() for line in raw.splitlines() if not line.strip().startswith("=")
                 for s in re.split(r"(?<=[.!?]) ", line) if 8 <= len(tokens(s)) <= 30]
    with open(corpora / "en" / "ag_news_test.csv", encoding="utf-8") as f:
        news = [f"{row[1]}. {row[2]}" for row in csv.reader(f) if len(row) == 3]
    with gzip.open(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt", encoding="utf-8") as f:
        pages = [json.loads(line)["text"] for line in f]
    return sample(sentences, count), {"en ag_news": news, "en CC-MAIN pages": pages}


def chinese(corpora: Path, count: int) -> tuple[list[str], dict[str, list[str]]]:
    wiki = [json.loads(line)["text"] for line in
            (corpora / "zh" / "zhwiki_simplified_00.jsonl").read_text(encoding="utf-8").splitlines()]
    sentences = [s for text in wiki for s in re.split(r"(?<=[。！？])", text) if 8 <= len(tokens(s)) <= 40]
    news = [line.split("\t", 1)[1] for line in (corpora / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "zh" / "ChnSentiCorp_htl_all.csv", encoding="utf-8") as f:
        reviews = [r["review"] for r in csv.DictReader(f) if r["review"]]
    return sample(sentences, count), {"zh cnews": news, "zh ChnSentiCorp": reviews}


def sample(items: list[str], count: int) -> list[str]:
    return items if len(items) <= count else random.Random(0).sample(items, count)


def shared_windows(item_tokens: list[list[str]], doc_hashes: list[np.ndarray], n: int) -> tuple[int, int, Counter]:
    """(items with at least n tokens, documents sharing a window of n with them, the shared windows as text)."""
    by_hash = {}
    for toks in item_tokens:
        for i, h in enumerate(window_hashes(toks, n)):
            by_hash.setdefault(int(h), toks[i:i + n])
    hashes = np.array(sorted(by_hash), dtype=np.uint64)
    hit_docs, shown = 0, Counter()
    for token_hash in doc_hashes:
        found = np.intersect1d(windows_of(token_hash, n), hashes)
        hit_docs += bool(len(found))
        shown.update(" ".join(by_hash[int(h)]) for h in found[:3])
    return sum(len(t) >= n for t in item_tokens), hit_docs, shown


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--items", type=int, default=2000, help="eval items per language")
    parser.add_argument("--show", type=int, default=0, metavar="K", help="print the K most shared windows per row")
    args = parser.parse_args()
    corpora = args.shared / "corpora"
    header = f"{'eval items':<31}{'documents':<20}{'docs':>7}" + "".join(f"{'n=' + str(n):>18}" for n in WINDOWS)
    print("each cell: items the window can find / documents that share a window with them\n")
    print(header)
    print("-" * len(header))
    for name, (items, sources) in {"en WikiText-2 sentences": english(corpora, args.items),
                                   "zh Wikipedia sentences": chinese(corpora, args.items)}.items():
        item_tokens = [tokens(t) for t in items]
        for source, docs in sources.items():
            cells, shown, doc_hashes = [], {}, [token_hashes(tokens(d)) for d in docs]
            for n in WINDOWS:
                findable, hit, windows = shared_windows(item_tokens, doc_hashes, n)
                cells.append(f"{findable} / {hit} ({100 * hit / len(docs):.1f}%)".rjust(18))
                shown[n] = windows
            print(f"{name + f' ({len(items)})':<31}{source:<20}{len(docs):>7}" + "".join(cells))
            for n in WINDOWS if args.show else ():
                if shown[n]:
                    print(f"      n={n}: " + " | ".join(f"{w} ({c})" for w, c in shown[n].most_common(args.show)))


if __name__ == "__main__":
    main()
