"""The learned spam classifier of the dirty rule: file format, one model per channel, quality on real SMS."""
import csv

import pytest

from pretrain.config import DirtySettings
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.normalize import normalize_text
from tasks.clean.rules.base import Doc
from tasks.clean.rules.dirty import DirtyRule
from tasks.clean.spam_model import channel_models, grouped_folds, near_duplicate_groups, read_examples
from tests.conftest import CORPORA, need_shared


def judge(rule: DirtyRule, text: str):
    text, _ = normalize_text(text)
    feats = DocFeatures(text)
    return rule.evaluate(Doc(text, detect_channel(feats), feats)).failure


def test_examples_file_format_and_its_errors(tmp_path):
    good = tmp_path / "ok.tsv"
    good.write_text("label\ttext\nspam\tWIN a prize now\n0\thello there\n1\t回复TD退订\n")
    assert read_examples(str(good)) == [(True, "WIN a prize now"), (False, "hello there"), (True, "回复TD退订")]
    bad = tmp_path / "bad.tsv"
    bad.write_text("maybe\tone\nperhaps\ttwo\n1\tthree\n")
    with pytest.raises(ValueError, match="2 lines without a spam/ham label"):
        read_examples(str(bad))
    with pytest.raises(FileNotFoundError, match="classifier_examples"):
        read_examples(str(tmp_path / "missing.tsv"))


def sms_rows():
    with open(need_shared(CORPORA / "dirty" / "zh_sms_labeled.tsv"), encoding="utf-8", errors="replace") as f:
        zh = [(r[0] == "1", r[1]) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) == 2]
    with open(CORPORA / "dirty" / "en_sms_spam_collection.tsv", encoding="utf-8", errors="replace") as f:
        en = [(r[0] == "spam", r[1]) for r in list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:] if len(r) == 2]
    return zh, en


def same_text(text: str) -> str:
    return " ".join(text.lower().split())


def test_one_model_per_channel_and_quality_on_real_sms_it_did_not_learn(tmp_path):
    """Tune rows only (even rows: the odd ones are the benchmark's held-out half): the model learns from every
    other tune row and is judged on the rest, less any copy of a row it learned from. Figures when written:
    zh 15 of 28 spam (53.6%, from 27 spam examples) and 0 of 246 ham; en 152 of 168 spam (90.5%) and 6 of
    1,154 ham (0.52%)."""
    zh, en = sms_rows()
    tune = {"zh": zh[0::2], "en": en[0::2]}
    learned = tune["zh"][0::2] + tune["en"][0::2]
    examples = tmp_path / "tune.tsv"
    examples.write_text("".join(f"{int(s)}\t{' '.join(t.split())}\n" for s, t in learned), encoding="utf-8")
    models = channel_models(read_examples(str(examples)))
    assert {"zh", "en"} <= set(models)  # English examples outnumber Chinese 5:1; pooled, they flag Chinese ham
    assert all(m.cv.veto_threshold == 0 for m in models.values())  # no veto budget (null): no veto
    rule = DirtyRule(DirtySettings(classifier_examples=[str(examples)], min_score=1e9))  # the classifier alone
    seen = {same_text(t) for _, t in learned}
    floors = {"zh": (0.50, 0.005), "en": (0.88, 0.01)}  # spam removed at least, ham removed at most
    for channel, rows in tune.items():
        judged = [(s, judge(rule, t)) for s, t in rows[1::2] if same_text(t) not in seen]
        spam = [f for s, f in judged if s]
        ham = [f for s, f in judged if not s]
        assert len(spam) >= 25 and len(ham) >= 200
        assert sum(f is not None for f in spam) / len(spam) >= floors[channel][0], channel
        assert sum(f is not None for f in ham) / len(ham) <= floors[channel][1], channel
    zh_spam = [t for s, t in tune["zh"][1::2] if s]
    failure = next(f for f in (judge(rule, t) for t in zh_spam) if f is not None)
    assert (failure.rule, failure.reason) == ("dirty", "spam_classifier")


def test_without_examples_the_rule_is_the_lexicons_alone():
    assert DirtyRule(DirtySettings()).classifiers == {}


def test_copies_of_an_example_stay_in_one_fold_so_cross_validation_promises_no_more_than_it_holds():
    """Spam campaigns send one message with small edits. With a copy on each side of a fold, the out-of-fold
    recall measures memory: the English SMS set's tune half has 85 of 382 spam in such groups."""
    _, en = sms_rows()
    spam = [t for s, t in en if s and len(t.split()) >= 15][:60]
    ham = [t for s, t in en if not s][:600]
    edited = [t.replace(" ", "  ", 1) + " Txt STOP" for t in spam]  # a near-copy: two more words, spacing changed
    groups = near_duplicate_groups(spam + edited + ham, "en")
    assert all(groups[i] == groups[60 + i] for i in range(60))
    assert len(set(groups[:60])) >= 55  # distinct messages stay apart (a few real ones are near-copies already)
    examples = [(True, t) for t in spam + edited] + [(False, t) for t in ham]
    splits = grouped_folds(examples, "en")
    assert len(splits) == 5 and sorted(i for _, held in splits for i in held) == list(range(len(examples)))
    for train, held in splits:
        held_groups = {groups[i] for i in held}
        assert not any(groups[i] in held_groups for i in train)
        assert 0.05 < sum(examples[i][0] for i in held) / len(held) < 0.3  # still stratified
