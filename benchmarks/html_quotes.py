"""What marking an HTML page's quotes costs the clean stage's extractor (tasks/clean/warc.py: html_text).

    bash benchmarks/get_genre_data.sh DIR && python benchmarks/html_quotes.py --data DIR [--repeats 5]

The pages are Beer Stack Exchange's threads (the genre benchmark's forum genre, every thread, no halves: no keep
rate is scored here), each a question and its answers as one HTML page. Each page is made text by resiliparse
alone (`extract_plain_text`, called as `html_text` calls it: main content only, no image's alternative text) and
by `html_text` (the same call, a blockquote's lines marked "> "); per page the median of --repeats runs
of each, one extractor after the other. Printed: the pages with and without a quote, the median time per page of
each extractor and their ratio, the median time the clean stage's rules (every rule at its defaults) take to judge
the page's text, and the extra time of marking as a share of it; and the pages whose text differs other than by
the marks and runs of blank lines (must be 0: the marks change nothing else). Targets: the extra time is under 5%
of the judging time, with and without a quote; no page differs.
"""
from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._genre_data import stack_exchange_pages  # noqa: E402
from pretrain.config import CleanConfig  # noqa: E402
from tasks.clean.judge import Cleaner  # noqa: E402
from tasks.clean.readers import RawDoc  # noqa: E402
from tasks.clean.warc import EXTRACT_SETTINGS, html_text  # noqa: E402

POSTS = "kevswanberg+beer_tentrr/Posts.xml"
MAX_EXTRA_SHARE = 0.05


def median_time(extract, page: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        extract(page)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def unmarked(text: str) -> str:
    """The text without its quote marks, a run of blank lines as one (a mark can leave a second blank line
    between two blocks of a quote; the rules split paragraphs at a run of blank lines, whatever its length)."""
    return re.sub(r"\n(?:[ \t]*\n)+", "\n\n", re.sub(r"(?m)^(?:> )+", "", text))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, required=True, help="the directory get_genre_data.sh filled")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from resiliparse.extract.html2text import extract_plain_text

    def plain(page: str) -> str:
        return extract_plain_text(page, main_content=True, **EXTRACT_SETTINGS)

    def marked(page: str) -> str:
        return html_text(page, main_content=True)

    cleaner = Cleaner(CleanConfig(sources=[{"path": "unused.jsonl"}], dedup={"exact": False, "near": False}))

    def judge(text: str) -> None:
        cleaner.judge(RawDoc("page", text, "forum", None))

    rows: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    differs = 0
    for _, page in stack_exchange_pages([args.data / POSTS]):
        quoted = "<blockquote" in page.lower()
        base, ours = median_time(plain, page, args.repeats), median_time(marked, page, args.repeats)
        text = marked(page)
        rows[quoted].append((base, ours, median_time(judge, text, args.repeats)))
        differs += unmarked(text) != unmarked(plain(page))
    print(f"{'pages':16s} {'n':>5s} {'resiliparse ms':>15s} {'html_text ms':>13s} {'ratio':>6s} {'judge ms':>9s} "
          f"{'extra/judge':>12s}  target")
    ok = differs == 0
    for quoted, label in ((False, "without a quote"), (True, "with a quote")):
        base, ours, judged = (statistics.median(row[k] for row in rows[quoted]) * 1e3 for k in range(3))
        ratio = statistics.median(o / b for b, o, _ in rows[quoted])
        extra = statistics.median((o - b) / j for b, o, j in rows[quoted])
        ok &= extra <= MAX_EXTRA_SHARE
        print(f"{label:16s} {len(rows[quoted]):5d} {base:15.3f} {ours:13.3f} {ratio:6.2f} {judged:9.3f} "
              f"{extra:12.1%}  <= {MAX_EXTRA_SHARE:.0%}")
    print(f"pages whose text differs beyond the marks and runs of blank lines: {differs} (target 0)")
    print("all targets met" if ok else "TARGET MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
