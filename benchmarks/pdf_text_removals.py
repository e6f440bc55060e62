"""What the default rules remove from a PDF's text: a diagram's labels cut loose, or prose.

    python benchmarks/pdf_text_removals.py --data DIR [--shared ../shared]

The genre benchmark's UK building regulations' guidance (benchmarks/_genre_data.py; `bash
benchmarks/get_genre_data.sh DIR` fetches it) is PDF text, cut every 20 paragraphs. On its tune half only (the
held-out half is genre_keep.py's), every run goes through the clean stage at the defaults; a run counts as
labels when a quarter or more of its paragraphs are a label (under five words, no sentence end: "Fd", "See para
2.10"; a short list item with no end, "a. safely; and", counts too). Prints the removed and the kept runs by
that measure, and the rules that removed the runs that are prose.
"""
from __future__ import annotations

import re
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._genre_data import SOURCES  # noqa: E402
from benchmarks.genre_keep import judged, load_genre  # noqa: E402

GENRE = "en government regulation ("
SENTENCE_END = re.compile(r"[.:;?!]\s*$")


def label_share(text: str) -> float:
    """The share of a run's paragraphs that are a label: under five words and no sentence end."""
    paragraphs = [p.strip() for p in text.split("\n\n") if p.strip()]
    labels = [p for p in paragraphs if len(p.split()) < 5 and not SENTENCE_END.search(p)]
    return len(labels) / max(1, len(paragraphs))


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--data", type=Path, required=True, help="folder get_genre_data.sh filled")
    args = parser.parse_args()
    source = next(s for s in SOURCES if s.genre.startswith(GENRE))
    found = load_genre(source, args.data, args.shared / "corpora")
    if isinstance(found, str):
        sys.exit(f"{source.genre}: {found}")
    tune = found[0]
    with tempfile.TemporaryDirectory(prefix="pdf-removals-") as tmp:
        removed = judged({"runs": tune}, Path(tmp), None)[0]["runs"]
    print(f"{source.genre}, tune half: {len(tune)} runs of 20 paragraphs")
    print(f"{'runs':<10}{'count':>7}{'labels >= 1/4':>16}{'median label share':>21}")
    for name, ks in (("removed", sorted(removed)), ("kept", [k for k in range(len(tune)) if k not in removed])):
        shares = sorted(label_share(tune[k]) for k in ks)
        labels = sum(s >= 0.25 for s in shares)
        median = shares[len(shares) // 2] if shares else 0.0
        print(f"{name:<10}{len(ks):>7}{labels:>9} {100 * labels / max(1, len(ks)):>5.1f}%{median:>21.2f}")
    prose = Counter(removed[k] for k in removed if label_share(tune[k]) < 0.25)
    print(f"removed runs that are prose: {sum(prose.values())}, by rule: "
          + ", ".join(f"{rule} {n}" for rule, n in prose.most_common()))


if __name__ == "__main__":
    main()
