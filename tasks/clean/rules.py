"""Quality and dirty-content rules, in the style of datatrove's filters.

Each rule is a small class: settings in __init__, one `filter(doc)` that
returns None to keep or a reason string to drop. Rules read the shared
DocFeatures and never recompute per-document work.
"""
from __future__ import annotations

from dataclasses import dataclass

from pretrain.config import CleanConfig
from tasks.clean.features import DocFeatures
from tasks.clean.lexicon import Lexicon


@dataclass
class Doc:
    text: str
    channel: str
    feats: DocFeatures


class LengthRule:
    name = "length"

    def __init__(self, min_chars: int, max_chars: int):
        self.min_chars, self.max_chars = min_chars, max_chars

    def filter(self, doc: Doc) -> str | None:
        if doc.feats.n_chars < self.min_chars:
            return "too_short"
        if doc.feats.n_chars > self.max_chars:
            return "too_long"
        return None


class ChannelRule:
    """Only zh / en / code documents are trained on in this pipeline."""

    name = "channel"

    def filter(self, doc: Doc) -> str | None:
        return "unsupported_language" if doc.channel == "other" else None


class SymbolRatioRule:
    name = "symbol_ratio"

    def __init__(self, max_ratio: float):
        self.max_ratio = max_ratio

    def filter(self, doc: Doc) -> str | None:
        if doc.channel == "code":  # code is legitimately full of symbols
            return None
        return "too_many_symbols" if doc.feats.symbol_ratio > self.max_ratio else None


class RepetitionRule:
    name = "repetition"

    def __init__(self, max_duplicate_line_ratio: float):
        self.max_ratio = max_duplicate_line_ratio

    def filter(self, doc: Doc) -> str | None:
        if doc.channel == "code":
            return None
        return "repeated_lines" if doc.feats.duplicate_line_ratio > self.max_ratio else None


class EnglishWordsRule:
    name = "en_words"

    def __init__(self, min_words: int):
        self.min_words = min_words

    def filter(self, doc: Doc) -> str | None:
        if doc.channel != "en":
            return None
        return "too_few_words" if len(doc.feats.words) < self.min_words else None


class ChineseRatioRule:
    name = "zh_cjk_ratio"

    def __init__(self, min_ratio: float):
        self.min_ratio = min_ratio

    def filter(self, doc: Doc) -> str | None:
        if doc.channel != "zh":
            return None
        return "low_cjk_ratio" if doc.feats.cjk_ratio < self.min_ratio else None


class CodeLineRule:
    name = "code_lines"

    def __init__(self, max_line_chars: int):
        self.max_line_chars = max_line_chars

    def filter(self, doc: Doc) -> str | None:
        if doc.channel != "code":
            return None
        return "code_line_too_long" if doc.feats.max_line_chars > self.max_line_chars else None


class LexiconRule:
    """Drops documents dense in porn / gambling / spam terms.

    A density threshold rather than any hit: a news story that mentions a
    casino once is fine; an advert repeating three betting terms is not.
    """

    name = "dirty_lexicon"

    def __init__(self, lexicon: Lexicon, max_hits_per_kchar: float, min_hits: int):
        self.lexicon, self.max_density, self.min_hits = lexicon, max_hits_per_kchar, min_hits

    def filter(self, doc: Doc) -> str | None:
        hits = self.lexicon.hits(doc.text)
        if len(hits) < self.min_hits:
            return None
        density = 1000 * len(hits) / max(doc.feats.n_chars, 1)
        return "dirty_lexicon" if density > self.max_density else None


def build_rules(cfg: CleanConfig, lexicon: Lexicon) -> list:
    return [
        LengthRule(cfg.min_chars, cfg.max_chars),
        ChannelRule(),
        SymbolRatioRule(cfg.max_symbol_ratio),
        RepetitionRule(cfg.max_duplicate_line_ratio),
        EnglishWordsRule(cfg.min_words_en),
        ChineseRatioRule(cfg.min_cjk_ratio_zh),
        CodeLineRule(cfg.max_code_line_chars),
        LexiconRule(lexicon, cfg.max_lexicon_hits_per_kchar, cfg.min_lexicon_hits),
    ]


def first_failure(rules: list, doc: Doc) -> str | None:
    for rule in rules:
        reason = rule.filter(doc)
        if reason:
            return reason
    return None
