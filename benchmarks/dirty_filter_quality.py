"""Filter quality of the dirty-content rule alone on the labeled spam/ham sets in ../shared/corpora/dirty.

    python benchmarks/dirty_filter_quality.py [--shared ../shared]

For each set: the share of spam and of ham that the dirty rule rejects, with the
built-in lists alone and with the shared lexicons added by path (the way users
add theirs). Rows are split by position: 'tune' = even rows (the built-in lists
were written looking at these), 'held-out' = odd rows (never looked at), so the
held-out figures are the honest ones. Target: >= 70% spam removed, <= 5% ham removed.
'built-in + classifier' adds the n-gram classifier learned from the tune halves of all
three sets (written to a 'label<TAB>text' file and passed by path, as users do); its
threshold was chosen by 5-fold cross-validation on the tune halves alone.
"""
from __future__ import annotations

import argparse
import csv
import tempfile
from pathlib import Path

from pretrain.config import DirtyRule as DirtySettings
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.normalize import normalize_text
from tasks.clean.rules.base import Doc
from tasks.clean.rules.dirty import DirtyRule


def labeled_sets(dirty: Path) -> dict[str, list[tuple[bool, str]]]:
    """name -> [(is_spam, text)]"""
    sets: dict[str, list[tuple[bool, str]]] = {}
    with open(dirty / "zh_sms_labeled.tsv", encoding="utf-8", errors="replace") as f:
        sets["zh_sms_labeled"] = [(row[0] == "1", row[1]) for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(row) == 2]
    spam = (dirty / "zh_trec06c_spam.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    ham = (dirty / "zh_trec06c_ham.txt").read_text(encoding="utf-8", errors="replace").splitlines()
    sets["zh_trec06c"] = [(True, t) for t in spam if t.strip()] + [(False, t) for t in ham if t.strip()]
    with open(dirty / "en_sms_spam_collection.tsv", encoding="utf-8", errors="replace") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
        sets["en_sms_spam_collection"] = [(row[0] == "spam", row[1]) for row in rows if len(row) == 2]
    return sets


def clean_sets(corpora: Path) -> dict[str, list[str]]:
    """Real text that is not spam: what the rule removes here is collateral damage."""
    news = [line.split("\t", 1)[1] for line in (corpora / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "zh" / "ChnSentiCorp_htl_all.csv", encoding="utf-8") as f:
        reviews = [r["review"] for r in csv.DictReader(f) if r["review"]]
    import json

    wiki = [json.loads(line)["text"] for line in (corpora / "zh" / "zhwiki_simplified_00.jsonl").read_text(encoding="utf-8").splitlines()]
    with open(corpora / "en" / "ag_news_test.csv", encoding="utf-8") as f:
        ag = [f"{row[1]}. {row[2]}" for row in csv.reader(f) if len(row) == 3]
    return {"zh cnews (news)": news, "zh ChnSentiCorp (reviews)": reviews, "zh wikipedia": wiki, "en ag_news": ag}


def removed(rule: DirtyRule, text: str) -> bool:
    text, _ = normalize_text(text)
    feats = DocFeatures(text)
    return rule.evaluate(Doc(text, detect_channel(feats) if text.strip() else "other", feats)).failure is not None


def tune_examples(sets: dict[str, list[tuple[bool, str]]], path: Path) -> Path:
    """The tune halves of every labeled set as a 'label<TAB>text' file: what a user hands the classifier by path."""
    with open(path, "w", encoding="utf-8") as f:
        for rows in sets.values():
            for is_spam, text in rows[0::2]:
                f.write(f"{int(is_spam)}\t{' '.join(text.split())}\n")
    return path


def rates(rule: DirtyRule, rows: list[tuple[bool, str]]) -> tuple[int, float, int, float]:
    spam = [t for is_spam, t in rows if is_spam]
    ham = [t for is_spam, t in rows if not is_spam]
    s = sum(removed(rule, t) for t in spam)
    h = sum(removed(rule, t) for t in ham)
    return len(spam), 100 * s / max(len(spam), 1), len(ham), 100 * h / max(len(ham), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shared", type=Path, default=Path(__file__).resolve().parents[2] / "shared")
    args = parser.parse_args()
    corpora = args.shared / "corpora"
    lex = corpora / "lexicons"
    shared_lists = DirtySettings(
        lexicons=[str(p) for p in sorted((lex / "sensitive-lexicon").glob("*.txt")) if p.name != "illegal_urls.txt"]
        + [str(lex / "ldnoobw" / "zh"), str(lex / "ldnoobw" / "en")],
        domain_blocklists=[str(lex / "sensitive-lexicon" / "illegal_urls.txt")])
    sets = labeled_sets(corpora / "dirty")
    examples = tune_examples(sets, Path(tempfile.mkdtemp(prefix="dirty-bench-")) / "tune.tsv")
    variants = {"built-in": DirtyRule(DirtySettings()), "built-in + shared": DirtyRule(shared_lists),
                "built-in + classifier": DirtyRule(DirtySettings(classifier_examples=[str(examples)]))}
    header = f"{'set':<24}{'split':<10}{'lists':<23}{'spam':>6}{'spam removed':>14}{'ham':>6}{'ham removed':>13}  target"
    print(header)
    print("-" * len(header))
    for name, rows in sets.items():
        for split, part in (("tune", rows[0::2]), ("held-out", rows[1::2])):
            for label, rule in variants.items():
                n_spam, spam_pct, n_ham, ham_pct = rates(rule, part)
                ok = "met" if spam_pct >= 70 and ham_pct <= 5 else "MISSED"
                print(f"{name:<24}{split:<10}{label:<23}{n_spam:>6}{spam_pct:>13.1f}%{n_ham:>6}{ham_pct:>12.1f}%  {ok}")
    print()
    header = f"{'clean corpus':<28}{'lists':<23}{'docs':>7}{'removed':>10}"
    print(header)
    print("-" * len(header))
    for name, texts in clean_sets(corpora).items():
        for label, rule in variants.items():
            pct = 100 * sum(removed(rule, t) for t in texts) / len(texts)
            print(f"{name:<28}{label:<23}{len(texts):>7}{pct:>9.1f}%")


if __name__ == "__main__":
    main()
