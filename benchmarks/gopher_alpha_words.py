"""Gopher's "alphabetic words" check counted two ways, on real English prose and web text.

    python benchmarks/gopher_alpha_words.py [--shared ../shared]

Gopher keeps a document when >= 80% of its words hold a letter. datatrove (and this project
before) divides by every token, punctuation marks included, so ordinary prose with commas and
quotes falls below 80%. This project now divides by word tokens only. The table gives, per
corpus, the share of documents below the threshold each way, and the share the whole
gopher_quality rule rejects as it now stands (all its checks, defaults).
"""
from __future__ import annotations

import csv
import gzip
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from pretrain.config import RulesConfig  # noqa: E402
from tasks.clean.features import DocFeatures  # noqa: E402
from tasks.clean.normalize import normalize_text  # noqa: E402
from tasks.clean.rules.base import Doc  # noqa: E402
from tasks.clean.rules.english import GopherQualityRule  # noqa: E402


def english_corpora(en: Path) -> dict[str, list[str]]:
    raw = (en / "wikitext2_test.raw").read_text(encoding="utf-8")
    with open(en / "ag_news_test.csv", encoding="utf-8") as f:
        ag = [f"{row[1]}. {row[2]}" for row in csv.reader(f) if len(row) == 3]
    with gzip.open(en / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt", encoding="utf-8") as f:
        web = [json.loads(line)["text"] for line in f]
    return {"wikitext-2 articles (prose)": [a for a in re.split(r"\n = [^=].*? = \n", raw) if len(a) > 200],
            "ag_news items (news)": ag, "CC-MAIN pages (web)": web}


def below(values: list[float], threshold: float) -> str:
    return f"{100 * sum(v < threshold for v in values) / len(values):.1f}%"


def main() -> None:
    args = benchmark_parser(__doc__).parse_args()
    settings = RulesConfig().gopher_quality
    rule = GopherQualityRule(settings)
    header = f"{'corpus':<30}{'docs':>7}{'below, over all tokens':>24}{'below, over words':>19}{'rule rejects':>14}"
    print(header)
    print("-" * len(header))
    for name, texts in english_corpora(args.shared / "corpora" / "en").items():
        over_tokens, over_words, rejected = [], [], 0
        for text in texts:
            feats = DocFeatures(normalize_text(text)[0])
            over_tokens.append(sum(any(c.isalpha() for c in t) for t in feats.tokens) / max(len(feats.tokens), 1))
            over_words.append(sum(any(c.isalpha() for c in w) for w in feats.words) / max(len(feats.words), 1))
            rejected += rule.evaluate(Doc(feats.text, "en", feats)).failure is not None
        print(f"{name:<30}{len(texts):>7}{below(over_tokens, settings.min_alpha_words_ratio):>24}"
              f"{below(over_words, settings.min_alpha_words_ratio):>19}{100 * rejected / len(texts):>13.1f}%")


if __name__ == "__main__":
    main()
