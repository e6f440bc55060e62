"""Porn / gambling / spam content: weighted lexicons through one Aho-Corasick automaton, and domain blocklists.

A density threshold, not a single hit: a news story that mentions a casino once
is kept; an advert stacking betting terms is not.
"""
from __future__ import annotations

import bisect
import functools
import re
from importlib import resources

import ahocorasick
import fsspec

from pretrain.channels import CHANNELS
from tasks.clean.disguise import unmask
from tasks.clean.rules.base import Doc, Outcome, Rule
from tasks.clean.resemblance import read_reference
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
    """Weighted terms; Latin terms match on word boundaries; CJK terms, with word_aware, only where they do not
    straddle a word of the text's segmentation (色情 is not found in 白色|情人节, 贷款 is in 小额贷款)."""

    def __init__(self, terms: dict[str, float], word_aware: bool = False):
        self.size, self.word_aware = len(terms), word_aware
        self._auto = ahocorasick.Automaton()
        for term, weight in terms.items():
            self._auto.add_word(term, (term, weight, term[0].isascii() and term[0].isalnum()))
        if terms:
            self._auto.make_automaton()

    @classmethod
    def from_paths(cls, paths: list[str], word_aware: bool = False) -> "Lexicon":
        terms: dict[str, float] = {}
        for path in paths:
            for term, weight in parse_terms(read_list(path)).items():
                terms[term] = max(terms.get(term, 0.0), weight)
        return cls(terms, word_aware)

    def hits(self, text: str) -> list[tuple[str, float]]:
        if not self.size:
            return []
        lower = text.lower()
        found, cjk = [], []
        for end, (term, weight, latin) in self._auto.iter_long(lower):
            start = end - len(term) + 1
            if latin:
                if not ((start > 0 and lower[start - 1].isalnum()) or (end + 1 < len(lower) and lower[end + 1].isalnum())):
                    found.append((term, weight))
            else:
                cjk.append((start, end + 1, term, weight))
        if cjk and self.word_aware:
            words = Segmentation(lower)
            cjk = [hit for hit in cjk if words.holds(hit[0], hit[1])]
        # weight 0: an everyday phrase that only hides the terms inside it
        return [(term, weight) for term, weight in found + [(t, w) for _, _, t, w in cjk] if weight > 0]


class Segmentation:
    """Word spans of a text by rjieba (jieba's dictionary and HMM in Rust: about 17 MB/s here)."""

    def __init__(self, text: str):
        import rjieba

        spans = rjieba.tokenize(text)
        self.starts = [s for _, s, _ in spans]
        self.ends = [e for _, _, e in spans]

    def _word_at(self, pos: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.starts, pos) - 1
        return self.starts[i], self.ends[i]

    def holds(self, start: int, end: int) -> bool:
        """[start, end) is whole words, or lies inside one word: it straddles no word boundary halfway."""
        first_start, first_end = self._word_at(start)
        last_start, last_end = self._word_at(end - 1)
        return (first_start == start or first_end >= end) and (last_end == end or last_start <= start)


class PatternSet:
    """Weighted regular expressions (prices, premium-rate numbers, short codes, contact details).

    A pattern may name a group (a third column): every match of the group's patterns is one piece of evidence, at
    the group's largest weight. A press release that lists a hotline, a mobile and a QQ number gives one way to
    reach its sender, not three signs of an advert.

    One finditer per pattern: a single alternation of them all was measured slower,
    since alternatives that open with a lookbehind defeat the regex engine's prefix scan.
    """

    def __init__(self, patterns: list[tuple[re.Pattern, float, str | None]]):
        self.patterns = patterns

    @classmethod
    def from_paths(cls, paths: list[str]) -> "PatternSet":
        return cls([parse_pattern(path, line) for path in paths for line in read_list(path)])

    def hits(self, text: str) -> list[tuple[str, float]]:
        found, groups = [], {}
        for pattern, weight, group in self.patterns:
            if group is None:
                found += [(m.group(0), weight) for m in pattern.finditer(text)]
            elif pattern.search(text):  # one match is the group's evidence; more add nothing
                groups[group] = max(groups.get(group, 0.0), weight)
        return found + list(groups.items())


def parse_pattern(path: str, line: str) -> tuple[re.Pattern, float, str | None]:
    """'regex', 'regex<TAB>weight' or 'regex<TAB>weight<TAB>group'; a group comes back as its hit, '<group>'."""
    fields = line.split("\t")
    if len(fields) > 3:
        raise ValueError(f"{path}: {line!r} has {len(fields)} tab-separated fields; write regex<TAB>weight<TAB>group "
                         "(a tab inside the regex as \\t)")
    regex, weight, group = (fields + ["", ""])[:3]
    try:
        return re.compile(regex, re.I), float(weight.strip() or 1), f"<{group.strip()}>" if group.strip() else None
    except re.error as err:
        raise ValueError(f"{path}: bad pattern {regex!r}: {err}; fix or remove that line") from None
    except ValueError:
        raise ValueError(f"{path}: weight {weight!r} of pattern {regex!r} is not a number; "
                         "write regex<TAB>weight<TAB>group") from None


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
    channels = CHANNELS

    def __init__(self, settings):
        super().__init__(settings)
        self.lexicon = Lexicon.from_paths(builtin_paths(".terms.txt") + list(settings.lexicons), settings.word_aware)
        self.blocklist = DomainBlocklist.from_paths(builtin_paths(".domains.txt") + list(settings.domain_blocklists))
        self.patterns = PatternSet.from_paths(builtin_paths(".patterns.txt") + list(settings.patterns))
        self.matched = unmask if settings.unmask else (lambda text: text)  # what the lists and classifier read
        examples = [(spam, self.matched(text)) for path in settings.classifier_examples
                    for spam, text in read_examples(path)]
        hits_of = functools.lru_cache(maxsize=None)(self.hits)  # the cross-validation asks twice per example
        self.classifiers = channel_models(examples, max_ham_rate=settings.classifier_max_ham_rate,
                                          judged=lambda text: bool(hits_of(text)),
                                          scope=settings.classifier_scope,
                                          listed=lambda text, channel: not self.lists_verdict(
                                              hits_of(text), len(text), channel)[-1],
                                          max_spam_loss=settings.classifier_veto_max_spam_loss,
                                          reference=self.reference(settings),
                                          gate_spam_loss=settings.classifier_gate_spam_loss) if examples else {}

    def reference(self, settings) -> dict[str, list[str]] | None:
        """The corpus sample by channel, as the lists and the classifier read it (None: no gate)."""
        if settings.classifier_reference is None or not settings.classifier_reference_docs:
            return None
        by_channel: dict[str, list[str]] = {}
        for channel, text in read_reference(settings.classifier_reference):
            by_channel.setdefault(channel, []).append(self.matched(text))
        return by_channel

    def hits(self, text: str) -> list[tuple[str, float]]:
        """Every lexicon term, pattern match and blocklisted domain found, with its weight."""
        return (self.lexicon.hits(text) + self.patterns.hits(text)
                + [(host, DOMAIN_WEIGHT) for host in self.blocklist.hits(text)])

    def lists_verdict(self, hits: list[tuple[str, float]], n_chars: int, channel: str) -> tuple[float, int, float, bool]:
        """(score, distinct hits, score per 1000 characters, clean) of the lexicons, patterns and domains alone."""
        s = self.settings
        weights = dict(hits)  # each term, pattern match or domain counts once: an article about loans says 贷款 often
        score, distinct = sum(weights.values()), len(weights)
        per_k = 1000 * score / max(n_chars, 1)
        min_per_k = s.min_score_per_kchar_zh if channel == "zh" else s.min_score_per_kchar
        # one term, however often repeated or however heavy, is a mention, not an advert
        return score, distinct, per_k, score < s.min_score or per_k < min_per_k or distinct < s.min_distinct_hits

    def evaluate(self, doc: Doc) -> Outcome:
        s, out = self.settings, Outcome(self.name)
        text = self.matched(doc.text)
        hits = self.hits(text)
        folded_away = max(0, len(doc.text) - len(text))  # a disguise's padding does not dilute the density
        score, distinct, per_k, clean = self.lists_verdict(hits, doc.feats.n_chars - folded_away, doc.channel)
        out.scores["dirty.score"] = score
        out.scores["dirty.distinct_hits"] = distinct
        model = self.classifiers.get(doc.channel)
        spam = threshold = None
        # texts of a length the model has seen spam at; with scope 'evidence', only those with a hit
        if model and (hits or model.cv.scope == "all") and doc.feats.n_chars <= model.judges_up_to_chars:
            spam = model.score(text)
            threshold = s.classifier_threshold if s.classifier_threshold is not None else model.cv.threshold
            veto = not clean and spam < min(model.cv.veto_threshold, threshold)
            # the gate is asked only where the model's verdict changes something: most texts score below threshold
            if (veto or spam > threshold) and not model.resembles(text):
                spam = None  # not like its examples: the lists decide alone
            elif veto:
                out.scores["dirty.overruled"] = 1.0  # the lists rejected it; the classifier reads it as its ham examples
                clean = True
        out.check("score_per_kchar", per_k, clean, "dirty_content")
        if spam is not None:
            out.check("classifier", spam, spam <= threshold, "spam_classifier")
        return out
