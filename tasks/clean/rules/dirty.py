"""Porn / gambling / spam content: weighted lexicons through one Aho-Corasick automaton, and domain blocklists.

A density threshold, not a single hit: a news story that mentions a casino once
is kept; an advert stacking betting terms is not.
"""
from __future__ import annotations

import re
from importlib import resources

import ahocorasick
import fsspec

from tasks.clean.rules.base import Doc, Outcome, Rule
from tasks.clean.spam_model import channel_models, read_examples

_HOST = re.compile(r"(?<![\w.-])((?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?\.)+[a-z]{2,24})(?![\w-])")
DOMAIN_WEIGHT = 2.0


def builtin_paths(suffix: str) -> list[str]:
    folder = resources.files("tasks.clean") / "lexicons"
    return sorted(str(p) for p in folder.iterdir() if p.name.endswith(suffix))


def read_list(path: str) -> list[str]:
    try:
        with fsspec.open(path, "rt", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise FileNotFoundError(f"list {path} does not exist; fix clean.rules.dirty.lexicons / domain_blocklists") from None
    return [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]


def parse_terms(lines: list[str]) -> dict[str, float]:
    terms: dict[str, float] = {}
    for line in lines:
        term, _, weight = line.partition("\t")
        term = term.strip().lower()
        if len(term) >= 2:
            terms[term] = max(terms.get(term, 0.0), float(weight) if weight.strip() else 1.0)
    return terms


class Lexicon:
    """Weighted terms; CJK terms match anywhere, Latin terms only on word boundaries."""

    def __init__(self, terms: dict[str, float]):
        self.size = len(terms)
        self._auto = ahocorasick.Automaton()
        for term, weight in terms.items():
            self._auto.add_word(term, (term, weight, term[0].isascii() and term[0].isalnum()))
        if terms:
            self._auto.make_automaton()

    @classmethod
    def from_paths(cls, paths: list[str]) -> "Lexicon":
        terms: dict[str, float] = {}
        for path in paths:
            for term, weight in parse_terms(read_list(path)).items():
                terms[term] = max(terms.get(term, 0.0), weight)
        return cls(terms)

    def hits(self, text: str) -> list[tuple[str, float]]:
        if not self.size:
            return []
        lower = text.lower()
        found = []
        for end, (term, weight, latin) in self._auto.iter_long(lower):
            start = end - len(term) + 1
            if latin and ((start > 0 and lower[start - 1].isalnum()) or (end + 1 < len(lower) and lower[end + 1].isalnum())):
                continue
            found.append((term, weight))
        return found


class PatternSet:
    """Weighted regular expressions (prices, premium-rate numbers, short codes).

    One finditer per pattern: a single alternation of them all was measured slower,
    since alternatives that open with a lookbehind defeat the regex engine's prefix scan.
    """

    def __init__(self, patterns: list[tuple[re.Pattern, float]]):
        self.patterns = patterns

    @classmethod
    def from_paths(cls, paths: list[str]) -> "PatternSet":
        patterns = []
        for path in paths:
            for line in read_list(path):
                regex, _, weight = line.rpartition("\t") if "\t" in line else (line, "", "1")
                try:
                    patterns.append((re.compile(regex, re.I), float(weight or 1)))
                except re.error as err:
                    raise ValueError(f"{path}: bad pattern {regex!r}: {err}; fix or remove that line") from None
        return cls(patterns)

    def hits(self, text: str) -> list[tuple[str, float]]:
        return [(m.group(0), w) for pattern, w in self.patterns for m in pattern.finditer(text)]


class DomainBlocklist:
    def __init__(self, domains: set[str]):
        self.domains = domains

    @classmethod
    def from_paths(cls, paths: list[str]) -> "DomainBlocklist":
        domains: set[str] = set()
        for path in paths:
            domains.update(d.lower().lstrip("*.").removeprefix("www.") for d in read_list(path))
        return cls(domains)

    def hits(self, text: str) -> list[str]:
        if not self.domains or "." not in text:
            return []
        found = []
        for host in _HOST.findall(text.lower()):
            parts = host.removeprefix("www.").split(".")
            if any(".".join(parts[i:]) in self.domains for i in range(len(parts) - 1)):
                found.append(host)
        return found


class DirtyRule(Rule):
    name = "dirty"
    channels = ("zh", "en", "code", "other")

    def __init__(self, settings):
        super().__init__(settings)
        self.lexicon = Lexicon.from_paths(builtin_paths(".terms.txt") + list(settings.lexicons))
        self.blocklist = DomainBlocklist.from_paths(builtin_paths(".domains.txt") + list(settings.domain_blocklists))
        self.patterns = PatternSet.from_paths(builtin_paths(".patterns.txt") + list(settings.patterns))
        examples = [e for path in settings.classifier_examples for e in read_examples(path)]
        self.classifiers = channel_models(examples) if examples else {}

    def evaluate(self, doc: Doc) -> Outcome:
        s, out = self.settings, Outcome(self.name)
        score = (sum(w for _, w in self.lexicon.hits(doc.text)) + sum(w for _, w in self.patterns.hits(doc.text))
                 + DOMAIN_WEIGHT * len(self.blocklist.hits(doc.text)))
        per_k = 1000 * score / max(doc.feats.n_chars, 1)
        out.scores["dirty.score"] = score
        out.check("score_per_kchar", per_k, score < s.min_score or per_k < s.min_score_per_kchar, "dirty_content")
        model = self.classifiers.get(doc.channel)
        spam = model.score(doc.text) if model else None
        if spam is not None:
            out.check("classifier", spam, spam <= s.classifier_threshold, "spam_classifier")
        return out
