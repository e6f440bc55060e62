"""The dirty rule against spam in disguise, with and without unmask (tasks/clean/disguise.py).

    python benchmarks/disguised_spam.py [--shared ../shared] [--limit 3000]

The labeled sets of ../shared/corpora/dirty (zh_sms_labeled, zh_trec06c, en_sms_spam_collection), split as
benchmarks/dirty_filter_quality.py splits them (tune = even rows, held-out = odd rows less copies of tune rows
and of each other, counted); only held-out rows are scored, at most --limit of each set. No public set of
disguised spam was reachable from here (the camouflaged-spam corpora of the papers that define the problem are
masked or unreleased), so the held-out spam is disguised here the ways chat spam is: an emoji after every CJK
character and between Latin letters, full-width letters and digits, mathematical bold letters and digits,
Cyrillic look-alikes in Latin words, words spelled out with dots (Latin) or spaces (CJK). Reported per set and
disguise: the share of spam the rule removes (lists only, the rule's defaults), plain matching against unmask;
per set and per clean corpus (../shared/corpora/zh, en: their held-out halves, at most --limit rows): the share
of ham removed, plain against unmask (unmask must not cost ham). Targets: unmask keeps each disguise's recall
within 5 points of the undisguised text's; ham removed does not rise by more than 0.2 points anywhere.
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks.dirty_filter_quality import removed  # noqa: E402  the rule's verdict on one text, as that one asks
from benchmarks._quality_data import clean_corpora, labeled_sets, rate, split  # noqa: E402
from pretrain.config import DirtySettings  # noqa: E402
from tasks.clean.rules.dirty import DirtyRule  # noqa: E402

LOOK = {"a": "а", "c": "с", "e": "е", "i": "і", "o": "о", "p": "р", "x": "х", "y": "у"}
RECALL_DROP, HAM_RISE = 5.0, 0.2


def is_cjk(ch: str) -> bool:
    return "\u4e00" <= ch <= "\u9fff"


def emoji(text: str) -> str:
    out = []
    for i, ch in enumerate(text):
        out.append(ch)
        nxt = text[i + 1] if i + 1 < len(text) else ""
        if is_cjk(ch) or (ch.isascii() and ch.isalpha() and nxt.isascii() and nxt.isalpha()):
            out.append("❤")
    return "".join(out)


def full_width(text: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if c.isascii() and c.isalnum() else c for c in text)


def math_bold(text: str) -> str:
    def bold(c: str) -> str:
        if "a" <= c <= "z":
            return chr(0x1D41A + ord(c) - ord("a"))
        if "A" <= c <= "Z":
            return chr(0x1D400 + ord(c) - ord("A"))
        return chr(0x1D7CE + ord(c) - ord("0")) if "0" <= c <= "9" else c
    return "".join(bold(c) for c in text)


def look_alikes(text: str) -> str:
    return "".join(LOOK.get(c, c) for c in text)


def spelled(text: str) -> str:
    out = []
    for word in text.split(" "):
        if len(word) >= 4 and word.isascii() and word.isalpha():
            word = ".".join(word)
        out.append(word)
    return " ".join("".join(ch + " " if is_cjk(ch) else ch for ch in w).rstrip() for w in out)


DISGUISES = {"none": lambda t: t, "emoji": emoji, "full width": full_width, "math bold": math_bold,
             "look-alikes": look_alikes, "spelled out": spelled}


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--limit", type=int, default=3000, help="held-out rows scored per set or corpus")
    args = parser.parse_args()
    corpora = Path(args.shared) / "corpora"
    rules = {"plain": DirtyRule(DirtySettings(unmask=False)), "unmask": DirtyRule(DirtySettings())}
    worst_drop, worst_rise = 0.0, 0.0
    print(f"{'set':<24} {'rows':<16} {'disguise':<12} {'plain: removed':>26} {'unmask: removed':>26}")
    for name, rows in labeled_sets(corpora / "dirty").items():
        _, held = split(rows)
        spam = [t for s, t in held.rows if s][:args.limit]
        ham = [t for s, t in held.rows if not s][:args.limit]
        copies = f"{held.exact_copies}+{held.near_copies} copies out"
        base = None
        for disguise, fold in DISGUISES.items():
            hits = {k: sum(removed(r, fold(t)) for t in spam) for k, r in rules.items()}
            base = hits["unmask"] if base is None else base
            worst_drop = max(worst_drop, 100 * (base - hits["unmask"]) / max(len(spam), 1))
            print(f"{name:<24} {f'{len(spam)} spam':<16} {disguise:<12} {rate(hits['plain'], len(spam)):>26} "
                  f"{rate(hits['unmask'], len(spam)):>26}", flush=True)
        hits = {k: sum(removed(r, t) for t in ham) for k, r in rules.items()}
        worst_rise = max(worst_rise, 100 * (hits["unmask"] - hits["plain"]) / max(len(ham), 1))
        print(f"{name:<24} {f'{len(ham)} ham':<16} {'none':<12} {rate(hits['plain'], len(ham)):>26} "
              f"{rate(hits['unmask'], len(ham)):>26}   ({copies})", flush=True)
    for name, rows in clean_corpora(corpora, None).items():
        texts = [t for _, t in rows[1::2] if t.strip()][:args.limit]
        hits = {k: sum(removed(r, t) for t in texts) for k, r in rules.items()}
        worst_rise = max(worst_rise, 100 * (hits["unmask"] - hits["plain"]) / max(len(texts), 1))
        print(f"{name:<24} {f'{len(texts)} clean':<16} {'none':<12} {rate(hits['plain'], len(texts)):>26} "
              f"{rate(hits['unmask'], len(texts)):>26}", flush=True)
    print(f"\nunmask: largest recall drop of a disguise against the undisguised spam {worst_drop:.1f} points "
          f"(target <= {RECALL_DROP:g}); largest rise of ham or clean text removed {worst_rise:.2f} points "
          f"(target <= {HAM_RISE:g})")


if __name__ == "__main__":
    main()
