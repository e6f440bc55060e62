"""Labeled spam/ham sets and clean corpora for the dirty-filter benchmark, split so that quality is measured on
rows nobody tuned on.

Every set is split by position: tune = even rows (what the lists, the classifier and its threshold may see),
held-out = odd rows. Held-out rows that repeat a tune row (the same normalized text, or a near-duplicate by the
clean stage's own MinHash LSH) or an earlier held-out row are removed, and counted, before anything is scored:
copies of tune rows would credit the filter with memorised answers.
"""
from __future__ import annotations

import csv
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path

from pretrain.config import DedupConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.minhash import MinHasher, jaccard_estimate
from tasks.clean.normalize import normalize_text

NEAR_JACCARD = 0.7


def labeled_sets(dirty: Path) -> dict[str, list[tuple[bool, str]]]:
    """name -> [(is_spam, text)] in file order."""
    sets: dict[str, list[tuple[bool, str]]] = {}
    with open(dirty / "zh_sms_labeled.tsv", encoding="utf-8", errors="replace") as f:
        sets["zh_sms_labeled"] = [(row[0] == "1", row[1]) for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                                  if len(row) == 2]
    spam = (dirty / "zh_trec06c_spam.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    ham = (dirty / "zh_trec06c_ham.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    sets["zh_trec06c"] = [(True, t) for t in spam if t.strip()] + [(False, t) for t in ham if t.strip()]
    with open(dirty / "en_sms_spam_collection.tsv", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
        sets["en_sms_spam_collection"] = [(row[0] == "spam", row[1]) for row in rows if len(row) == 2]
    return sets


def clean_corpora(corpora: Path, extra: Path | None) -> dict[str, list[tuple[str, str]]]:
    """Real text that is not spam, as source -> [(genre, text)]: what the rule removes here is collateral."""
    out: dict[str, list[tuple[str, str]]] = {}
    out["zh cnews (news)"] = [tuple(line.split("\t", 1)) for line in
                              (corpora / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "zh" / "ChnSentiCorp_htl_all.csv", encoding="utf-8") as f:
        out["zh ChnSentiCorp (hotel reviews)"] = [("positive" if r["label"] == "1" else "negative", r["review"])
                                                  for r in csv.DictReader(f) if r["review"]]
    out["zh wikipedia"] = [("article", json.loads(line)["text"]) for line in
                           (corpora / "zh" / "zhwiki_simplified_00.jsonl").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "en" / "ag_news_test.csv", encoding="utf-8") as f:
        classes = {"1": "world", "2": "sports", "3": "business", "4": "sci/tech"}
        out["en ag_news"] = [(classes[row[0]], f"{row[1]}. {row[2]}") for row in csv.reader(f) if len(row) == 3]
    with gzip.open(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt", encoding="utf-8") as f:
        out["en CC-MAIN (web pages)"] = [("page", json.loads(line)["text"]) for line in f]
    raw = (corpora / "en" / "wikitext2_test.raw").read_text(encoding="utf-8")
    out["en wikitext-2"] = [("paragraph", line) for line in raw.splitlines() if len(line) > 200]
    if extra:
        out.update(extra_corpora(extra))
    return out


def extra_corpora(extra: Path) -> dict[str, list[tuple[str, str]]]:
    """Clean Chinese genres from SophonPlus/ChineseNlpCorpus (see benchmarks/README or the script's --help)."""
    out = {}
    if (extra / "waimai_10k.csv").is_file():
        with open(extra / "waimai_10k.csv", encoding="utf-8") as f:
            out["zh waimai_10k (delivery reviews)"] = [("positive" if r["label"] == "1" else "negative", r["review"])
                                                       for r in csv.DictReader(f) if r["review"]]
    if (extra / "online_shopping_10_cats.csv").is_file():
        with open(extra / "online_shopping_10_cats.csv", encoding="utf-8") as f:
            out["zh online_shopping_10_cats (product reviews)"] = [(r["cat"], r["review"]) for r in csv.DictReader(f)
                                                                   if r["review"]]
    return out


def key(text: str) -> str:
    return " ".join(normalize_text(text)[0].lower().split())


@dataclass
class HeldOut:
    rows: list
    exact_copies: int    # same normalized text as a tune row or an earlier held-out row
    near_copies: int     # MinHash near-duplicates of one (Jaccard estimate >= NEAR_JACCARD)


def split(rows: list, text_of=lambda r: r[1], dedup: bool = True) -> tuple[list, HeldOut]:
    """tune = even rows; held-out = odd rows without copies of tune rows or of each other."""
    tune, held = rows[0::2], rows[1::2]
    if not dedup:
        return tune, HeldOut(held, 0, 0)
    hasher = MinHasher(DedupConfig())
    seen = {key(text_of(r)) for r in tune}
    bands: dict[tuple[int, int], list] = {}

    def remember(sig) -> None:
        for b, h in enumerate(hasher.bands_of(sig)):
            bands.setdefault((b, h), []).append(sig)

    for r in tune:
        remember(hasher.signature(text_of(r), channel_of(text_of(r))))
    kept, exact, near = [], 0, 0
    for r in held:
        text = text_of(r)
        if key(text) in seen:
            exact += 1
            continue
        sig = hasher.signature(text, channel_of(text))
        candidates = [s for b, h in enumerate(hasher.bands_of(sig)) for s in bands.get((b, h), [])]
        if any(jaccard_estimate(sig, s) >= NEAR_JACCARD for s in candidates):
            near += 1
            continue
        seen.add(key(text))
        remember(sig)
        kept.append(r)
    return tune, HeldOut(kept, exact, near)


def channel_of(text: str) -> str:
    return detect_channel(DocFeatures(text)) if text.strip() else "other"


def wilson(hits: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion, in percent."""
    if n == 0:
        return 0.0, 100.0
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return 100 * max(centre - half, 0.0), 100 * min(centre + half, 1.0)


def rate(hits: int, n: int) -> str:
    low, high = wilson(hits, n)
    return f"{100 * hits / max(n, 1):5.1f}% [{low:4.1f}-{high:4.1f}]"
