"""A spam/advert classifier learned from labeled examples the user gives by path (off without them).

Character 1-3-grams (no word segmentation, so Chinese and English alike), naive Bayes
with Laplace smoothing over the grams seen in training; a document's score is the mean
log-odds of spam over the distinct grams it shares with the training data, so a long
article with one advert-like phrase is not flipped. Trained in well under a second
from a few thousand short messages, when the clean stage starts.
"""
from __future__ import annotations

import csv
import io
import math
from collections import Counter

import fsspec

SPAM_LABELS = {"1", "spam", "true", "yes"}
HAM_LABELS = {"0", "ham", "false", "no"}


def grams(text: str, max_chars: int) -> set[str]:
    t = text[:max_chars].lower()
    return {t[i:i + n] for n in (1, 2, 3) for i in range(len(t) - n + 1) if not t[i:i + n].isspace()}


def read_examples(path: str) -> list[tuple[bool, str]]:
    """`label<TAB>text` lines (label 1/0, spam/ham, true/false; a header line is skipped)."""
    try:
        with fsspec.open(path, "rt", encoding="utf-8", errors="replace") as f:
            raw = f.read()
    except FileNotFoundError:
        raise FileNotFoundError(f"labeled examples {path} do not exist; fix clean.rules.dirty.classifier_examples") from None
    examples, bad = [], 0
    for row in csv.reader(io.StringIO(raw), delimiter="\t", quoting=csv.QUOTE_NONE):
        if len(row) < 2:
            continue
        label = row[0].strip().lower()
        if label in SPAM_LABELS or label in HAM_LABELS:
            examples.append((label in SPAM_LABELS, "\t".join(row[1:])))
        else:
            bad += 1
    if bad > 1 or not examples:  # one unknown label is a header line
        raise ValueError(f"{path}: {bad} lines without a spam/ham label (1/0, spam/ham) in the first column; "
                         f"the file must be 'label<TAB>text' lines")
    return examples


def channel_models(examples: list[tuple[bool, str]], max_chars: int = 2000) -> dict[str, "SpamModel"]:
    """One model per channel of the examples (zh, en, ...): a pooled model flags most Chinese ham when the English
    examples outnumber the Chinese ones. A channel without both spam and ham gets no model."""
    from tasks.clean.channel import detect_channel
    from tasks.clean.features import DocFeatures
    from tasks.clean.normalize import normalize_text

    by_channel: dict[str, list[tuple[bool, str]]] = {}
    for is_spam, text in examples:
        text, _ = normalize_text(text)
        if text.strip():
            by_channel.setdefault(detect_channel(DocFeatures(text)), []).append((is_spam, text))
    return {c: SpamModel(rows, max_chars) for c, rows in by_channel.items() if 0 < sum(s for s, _ in rows) < len(rows)}


class SpamModel:
    def __init__(self, examples: list[tuple[bool, str]], max_chars: int = 2000, min_known: int = 5):
        spam_docs = sum(s for s, _ in examples)
        if spam_docs == 0 or spam_docs == len(examples):
            raise ValueError("the labeled examples need both spam and ham to learn from")
        self.max_chars, self.min_known = max_chars, min_known
        counts = {True: Counter(), False: Counter()}
        for is_spam, text in examples:
            counts[is_spam].update(grams(text, max_chars))
        vocab = set(counts[True]) | set(counts[False])
        total = {k: sum(c.values()) + len(vocab) for k, c in counts.items()}
        self.log_odds = {g: math.log((counts[True][g] + 1) / total[True]) - math.log((counts[False][g] + 1) / total[False])
                         for g in vocab}

    def score(self, text: str) -> float | None:
        """Mean log-odds of spam over the known grams; None when too few grams are known to judge."""
        known = [self.log_odds[g] for g in grams(text, self.max_chars) if g in self.log_odds]
        return sum(known) / len(known) if len(known) >= self.min_known else None
