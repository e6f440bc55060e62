"""Which texts the spam classifier may judge: those that resemble its examples more than they resemble the corpus.

A classifier learned from SMS scores whatever it is shown; on e-mail and news it found numbers, prices and company
names and removed 6% and 20% of them (the genre benchmark, before this gate). The gate is a second model of the
same kind (TF-IDF over character n-grams, class-balanced logistic regression) learned to tell the labeled examples,
spam and ham alike, from a sample of the corpus being cleaned. A text it places among the examples is judged; one
it places among the corpus is left to the lists. Its threshold is measured, not guessed: the resemblance that all
but `spam_loss` of the spam examples reach out of fold, so the gate gives up a known share of the spam the
classifier could see, and spam in the corpus that looks like the examples stays in reach.

The sample's own documents are part of the corpus the stage cleans; a model that learned a document as corpus
scores it low. So the sample is split in two halves, each with a model that never saw it, and a document of the
sample is scored by the other half's model (cross-fitting); every other text by the model of the whole sample.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import fsspec

from tasks.clean.char_ngrams import char_ngram_classifier

MIN_REFERENCE_DOCS = 50  # of one channel: fewer is no picture of the corpus, and the classifier judges every text


@dataclass
class GateReport:
    threshold: float
    reference_docs: int
    spam_judged: float       # out of fold: share of the spam examples the gate lets the classifier judge
    ham_judged: float        # ... and of the ham examples
    reference_judged: float  # share of the corpus sample it judges (each scored by the half that did not learn it)


def _key(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=12).digest()


def _domain_model(example_texts: list[str], reference: list[str], max_chars: int):
    texts = [t[:max_chars] for t in example_texts] + [t[:max_chars] for t in reference]
    return char_ngram_classifier().fit(texts, [1] * len(example_texts) + [0] * len(reference))


class ResemblanceGate:
    def __init__(self, examples: list[tuple[bool, str]], reference: list[str], folds: list[tuple[list[int], list[int]]],
                 spam_loss: float, max_chars: int = 2000):
        """examples: (is_spam, text) of one channel; reference: the corpus sample's texts of that channel; folds: the
        (train, held) index lists the classifier's cross-validation uses (near-copies on one side)."""
        self.max_chars = max_chars
        texts = [t for _, t in examples]
        resemblance = [0.0] * len(examples)
        for train, held in folds:
            fold_model = _domain_model([texts[i] for i in train], reference, max_chars)
            for i, p in zip(held, self._probabilities(fold_model, [texts[i] for i in held])):
                resemblance[i] = p
        spam = sorted(r for r, (is_spam, _) in zip(resemblance, examples) if is_spam)
        self.threshold = spam[int(spam_loss * len(spam))]
        self.model = _domain_model(texts, reference, max_chars)
        halves = (reference[0::2], reference[1::2])
        # a sample document is scored by the model of the half that did not learn it
        other_half = [_domain_model(texts, half, max_chars) for half in reversed(halves)]
        self.model_for = {_key(t): other_half[h] for h, half in enumerate(halves) for t in half}
        ham = [r for r, (is_spam, _) in zip(resemblance, examples) if not is_spam]
        judged = [p >= self.threshold for h, half in enumerate(halves)
                  for p in self._probabilities(other_half[h], half)]
        self.report = GateReport(round(self.threshold, 6), len(reference),
                                 sum(r >= self.threshold for r in spam) / max(len(spam), 1),
                                 sum(r >= self.threshold for r in ham) / max(len(ham), 1),
                                 sum(judged) / max(len(judged), 1))

    def _probabilities(self, model, texts: list[str]) -> list[float]:
        return [float(p) for p in model.predict_proba([t[:self.max_chars] for t in texts])[:, 1]] if texts else []

    def resemblance(self, text: str) -> float:
        """Probability that the text is one of the examples rather than one of the corpus (balanced classes)."""
        return self._probabilities(self.model_for.get(_key(text), self.model), [text])[0]

    def judges(self, text: str) -> bool:
        return self.resemblance(text) >= self.threshold


def learned_gate(examples: list[tuple[bool, str]], reference: list[str], folds: list[tuple[list[int], list[int]]],
                 spam_loss: float, max_chars: int = 2000) -> ResemblanceGate | str:
    """The gate, or why there is none (the classifier then judges every text up to its length cap)."""
    if len(reference) < MIN_REFERENCE_DOCS:
        return f"{len(reference)} documents of this channel in the corpus sample (fewer than {MIN_REFERENCE_DOCS})"
    return ResemblanceGate(examples, reference, folds, spam_loss, max_chars)


def read_reference(path: str) -> list[tuple[str, str]]:
    """(channel, text) of a sample file; a missing or malformed one names the setting to fix."""
    try:
        with fsspec.open(path, "rt", encoding="utf-8") as f:
            rows = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        raise FileNotFoundError(f"corpus sample {path} does not exist; fix clean.rules.dirty.classifier_reference "
                                f"(or leave it empty: the stage draws one)") from None
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not JSONL ({err}); clean.rules.dirty.classifier_reference must name lines of "
                         f'{{"channel": ..., "text": ...}}') from None
    if any(not isinstance(r, dict) or not isinstance(r.get("text"), str) for r in rows):
        raise ValueError(f'{path}: every line must be {{"channel": ..., "text": ...}} '
                         f"(clean.rules.dirty.classifier_reference)")
    return [(str(r.get("channel", "")), r["text"]) for r in rows]
