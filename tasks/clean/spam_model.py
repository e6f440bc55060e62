"""A spam/advert classifier learned from labeled examples the user gives by path (off without them).

scikit-learn: TF-IDF over character 1-3-grams inside word boundaries (no segmentation, so
Chinese and English alike; sublinear counts, so a long text is not judged by its length),
and a class-balanced logistic regression; one model per channel of the examples. Ham examples
from the corpus's own genres (news, reviews, web pages; label 0) teach it that commerce
vocabulary is not spam: without them a model learned from messages flags formal prose.

Its threshold comes from stratified 5-fold cross-validation over the examples, run when the
stage starts, with copies and near-copies of an example kept in its fold: the lowest
probability whose out-of-fold ham removal stays within `max_ham_rate`. The same out-of-fold
scores choose its scope: whether it judges only texts with lexicon evidence (`evidence`, what
`judged` says) or every text up to its length cap (`all`), whichever removes more spam out of
fold within that ham rate (lexicons miss what a spammer words around them: 15.5% of the
benchmark's Chinese spam examples have no hit). The model keeps the threshold, scope and out-of-fold
rates; the clean manifest reports them. With a sample of the corpus (the clean stage draws one) it judges only
text that resembles its examples more than that sample (tasks/clean/resemblance.py): SMS examples do not judge e-mail.

The model is also a second opinion on the lexicons, which do not read context: a text the lists reject
is kept when the model, which has seen the corpus's own genres as ham, scores it below a veto
threshold (an app's description of its loans or coupons, written in the words of loan and coupon
spam). The same out-of-fold scores set that threshold: at most where the vetoes would keep `max_spam_loss` of
the spam examples, and no higher than the ham examples it keeps need (above the highest of them, a higher
veto only gives up spam).
"""
from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import fsspec

from pretrain.config import DedupConfig
from tasks.clean.channel import detect_channel
from tasks.clean.char_ngrams import char_ngram_classifier
from tasks.clean.dedup import UnionFind
from tasks.clean.features import DocFeatures
from tasks.clean.minhash import MinHasher, NearIndex
from tasks.clean.normalize import normalize_text
from tasks.clean.resemblance import ResemblanceGate, learned_gate

SPAM_LABELS = {"1", "spam", "true", "yes"}
MIN_CLASS_EXAMPLES = 20  # spam and ham each, per channel: fewer cannot be cross-validated into a threshold
HAM_LABELS = {"0", "ham", "false", "no"}


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


def channel_models(examples: list[tuple[bool, str]], max_chars: int = 2000, max_ham_rate: float = 0.005,
                   judged: Callable[[str], bool] = lambda text: True, scope: str = "auto",
                   listed: Callable[[str, str], bool] | None = None,
                   max_spam_loss: float | None = None, reference: dict[str, list[str]] | None = None,
                   gate_spam_loss: float = 0.05) -> dict[str, "SpamModel"]:
    """One model per channel of the examples (zh, en, ...): a pooled model flags most Chinese ham when the English
    examples outnumber the Chinese ones. A channel with fewer than MIN_CLASS_EXAMPLES of spam or of ham gets none.
    reference: the corpus sample's texts by channel, from which each model learns its resemblance gate (None: no gate)."""

    by_channel: dict[str, list[tuple[bool, str]]] = {}
    for is_spam, text in examples:
        text, _ = normalize_text(text)
        if text.strip():
            by_channel.setdefault(detect_channel(DocFeatures(text)), []).append((is_spam, text))
    return {c: SpamModel.cross_validated(rows, c, max_chars, max_ham_rate, judged, scope=scope,
                                         listed=listed, max_spam_loss=max_spam_loss,
                                         reference=None if reference is None else reference.get(c, []),
                                         gate_spam_loss=gate_spam_loss)
            for c, rows in by_channel.items()
            if min(sum(s for s, _ in rows), sum(not s for s, _ in rows)) >= MIN_CLASS_EXAMPLES}


@dataclass
class CrossValidation:
    threshold: float
    spam_recall: float   # out of fold, at the threshold
    ham_rate: float
    spam: int
    ham: int
    folds: int
    scope: str = "all"   # 'evidence': judges only texts with a lexicon, pattern or domain hit; 'all': every text
    recall_by_scope: dict[str, float] = field(default_factory=dict)  # out-of-fold spam recall each scope reached
    spam_with_evidence: float = 1.0  # share of spam examples scope 'evidence' may judge: the most it can remove
    veto_threshold: float = 0.0  # a list rejection of a text the model scores below this is overruled (0: never)
    veto_spam_lost: float = 0.0  # out of fold: share of the spam examples the lists reject that a veto keeps
    veto_ham_kept: float = 0.0   # ... and of the ham examples


class SpamModel:
    def __init__(self, examples: list[tuple[bool, str]], max_chars: int = 2000):
        labels = [s for s, _ in examples]
        if not 0 < sum(labels) < len(labels):
            raise ValueError("the labeled examples need both spam and ham to learn from")
        self.max_chars = max_chars
        self.pipeline = char_ngram_classifier()
        self.pipeline.fit([t[:max_chars] for _, t in examples], labels)
        self.judges_up_to_chars = spam_length_cap(examples)
        self.cv: CrossValidation | None = None
        self.gate: ResemblanceGate | None = None
        self.no_gate = "no corpus sample given"  # why there is no gate, when there is none

    @classmethod
    def cross_validated(cls, examples: list[tuple[bool, str]], channel: str, max_chars: int = 2000,
                        max_ham_rate: float = 0.005, judged: Callable[[str], bool] = lambda text: True,
                        folds: int = 5, scope: str = "auto", listed: Callable[[str, str], bool] | None = None,
                        max_spam_loss: float | None = None, reference: list[str] | None = None,
                        gate_spam_loss: float = 0.05) -> "SpamModel":
        """The model on all examples (of one channel), with the threshold, scope and veto that out-of-fold scores
        support. listed(text, channel): whether the lexicons alone reject the text; no veto without it. reference:
        the corpus sample of this channel, from which the resemblance gate is learned (None: no gate)."""
        labels = [s for s, _ in examples]
        model = cls(examples, max_chars)
        scores: list[float | None] = [None] * len(examples)
        splits = grouped_folds(examples, channel, folds)
        for train, held in splits:
            fold_model = cls([examples[i] for i in train], max_chars)
            asked = [i for i in held if len(examples[i][1]) <= model.judges_up_to_chars]
            for i, score in zip(asked, fold_model.scores([examples[i][1] for i in asked])):
                scores[i] = score
        evidence = [s is not None and judged(text) for s, (_, text) in zip(scores, examples)]
        model.cv = choose_scope(labels, scores, evidence, max_ham_rate, len(splits), scope)
        if listed is not None and max_spam_loss is not None:
            rejected = [s is not None and listed(text, channel) for s, (_, text) in zip(scores, examples)]
            choose_veto(model.cv, labels, scores, rejected, max_spam_loss)
        if reference is not None:
            gate = learned_gate(examples, reference, splits, gate_spam_loss, max_chars)
            model.gate, model.no_gate = (gate, "") if isinstance(gate, ResemblanceGate) else (None, gate)
        return model

    def resembles(self, text: str) -> bool:
        """Whether the text is like the examples rather than like the corpus (always, without a gate)."""
        return self.gate is None or self.gate.judges(text)

    def report(self) -> dict:
        gate = asdict(self.gate.report) if self.gate else {"off": self.no_gate}
        return {**asdict(self.cv), "judges_up_to_chars": self.judges_up_to_chars, "gate": gate}

    def scores(self, texts: list[str]) -> list[float]:
        """Probability of spam of each text."""
        if not texts:
            return []
        return [float(p) for p in self.pipeline.predict_proba([t[:self.max_chars] for t in texts])[:, 1]]

    def score(self, text: str) -> float:
        return self.scores([text])[0]


def grouped_folds(examples: list[tuple[bool, str]], channel: str, folds: int = 5) -> list[tuple[list[int], list[int]]]:
    """(train, held) index lists of stratified folds in which copies and near-copies never sit on both sides."""
    from sklearn.model_selection import StratifiedGroupKFold

    labels = [s for s, _ in examples]
    groups = near_duplicate_groups([t for _, t in examples], channel)
    spam_groups = len({g for g, y in zip(groups, labels) if y})
    folds = max(2, min(folds, spam_groups, len(set(groups)) - spam_groups))
    splitter = StratifiedGroupKFold(folds, shuffle=True, random_state=0)
    return [(list(train), list(held)) for train, held in splitter.split(examples, labels, groups)]


def near_duplicate_groups(texts: list[str], channel: str, min_jaccard: float = 0.7) -> list[int]:
    """A group id per text of one channel: copies and near-copies (the clean stage's MinHash, Jaccard estimate >=
    min_jaccard) share one, so cross-validation keeps them in one fold. Spam campaigns repeat a message with small
    edits; a copy on each side of a fold scores the model on text it learned and promises a recall it will not reach."""

    index, groups = NearIndex(MinHasher(DedupConfig())), UnionFind()
    first_of: dict[str, int] = {}
    text_of_signature: list[int] = []  # the text each indexed signature belongs to
    for i, text in enumerate(texts):
        key = " ".join(text.lower().split())
        if key in first_of:  # an exact copy: no signature needed, and the LSH buckets stay short
            groups.union(first_of[key], i)
            continue
        first_of[key] = i
        signature = index.hasher.signature(text, channel)
        for j in index.near(signature, min_jaccard):
            groups.union(text_of_signature[j], i)
        index.add(signature)
        text_of_signature.append(i)
    return [groups.find(i) for i in range(len(texts))]


def spam_length_cap(examples: list[tuple[bool, str]]) -> int:
    """Twice the length of 95% of the spam examples: the model has not seen spam much longer than that, and a long
    article is not a message (a model learned from messages flagged web pages)."""
    lengths = sorted(len(t) for s, t in examples if s)
    return 2 * lengths[int(0.95 * (len(lengths) - 1))]


def choose_scope(labels: list[bool], scores: list[float | None], evidence: list[bool], max_ham_rate: float,
                 folds: int, scope: str = "auto") -> CrossValidation:
    """Threshold and scope from out-of-fold scores: 'evidence' counts only the scores of texts with evidence, 'all'
    every score; 'auto' takes the one that removes more spam within max_ham_rate (the narrower one on a tie)."""
    by_scope = {"evidence": choose_threshold(labels, [s if e else None for s, e in zip(scores, evidence)],
                                             max_ham_rate, folds),
                "all": choose_threshold(labels, scores, max_ham_rate, folds)}
    chosen = scope if scope != "auto" else max(by_scope, key=lambda k: (by_scope[k].spam_recall, k == "evidence"))
    cv = by_scope[chosen]
    cv.scope, cv.recall_by_scope = chosen, {k: v.spam_recall for k, v in by_scope.items()}
    cv.spam_with_evidence = sum(e for e, y in zip(evidence, labels) if y) / max(labels.count(True), 1)
    return cv


def choose_threshold(labels: list[bool], scores: list[float | None], max_ham_rate: float, folds: int) -> CrossValidation:
    """The lowest threshold whose out-of-fold ham rate is at most max_ham_rate (unjudged examples count as kept)."""
    ham = sorted((s for s, y in zip(scores, labels) if not y and s is not None), reverse=True)
    n_ham, n_spam = labels.count(False), labels.count(True)
    allowed = int(max_ham_rate * n_ham)  # ham above the threshold we may remove
    threshold = ham[allowed] if allowed < len(ham) else min(ham, default=0.0) - 1e-9
    spam_hits = sum(1 for s, y in zip(scores, labels) if y and s is not None and s > threshold)
    ham_hits = sum(1 for s in ham if s > threshold)
    return CrossValidation(round(threshold, 6), spam_hits / n_spam, ham_hits / n_ham, n_spam, n_ham, folds)


def choose_veto(cv: CrossValidation, labels: list[bool], scores: list[float | None], rejected: list[bool],
                max_spam_loss: float) -> None:
    """The veto threshold, from the out-of-fold scores of the examples the lists reject. Its bound: the highest (at
    most the model's own threshold) below which at most max_spam_loss of the spam examples score. Under the bound it
    sits midway between the highest ham example it keeps and the next spam score above that: higher keeps no more
    ham and, past that spam, gives it up; midway leaves a margin either side. No ham under the bound: no veto (0)."""
    listed = [(s, y) for s, y, r in zip(scores, labels, rejected) if r and s is not None]
    listed_spam = sorted(s for s, y in listed if y)
    allowed = int(max_spam_loss * cv.spam)
    bound = min(listed_spam[allowed] if allowed < len(listed_spam) else cv.threshold, cv.threshold)
    top_ham = max((s for s, y in listed if not y and s < bound), default=None)
    if top_ham is None:
        veto = 0.0
    else:
        next_spam = min((s for s in listed_spam if s > top_ham), default=bound)
        veto = min(bound, (top_ham + next_spam) / 2)
    kept = [y for s, y in listed if s < veto]
    cv.veto_threshold = round(veto, 6)
    cv.veto_spam_lost = sum(kept) / max(cv.spam, 1)
    cv.veto_ham_kept = (len(kept) - sum(kept)) / max(cv.ham, 1)
