"""Clean-stage throughput and memory on the real corpora in ../shared/corpora.

    python benchmarks/clean_throughput.py [--shared ../shared] [--datatrove-python PATH] [--repeat 3]

Table 1, per core, filters only, same English documents in memory: this project's
Gopher quality + repetition, C4 and FineWeb rules against datatrove's filters of
the same names (run with --datatrove-python, the python of a venv with datatrove,
spacy and xxhash installed; it is never a dependency of this project). Median of
--repeat runs; the ratio is datatrove's seconds / ours.
Table 1b, per core, exact dedup only: the stage's 128-bit hash per document + one DuckDB
pass (one thread) against datatrove's signature / find-duplicates / filter steps, on the
same documents (ten variants of each, plus exact copies of every tenth).
Table 2, the whole stage on one worker (read, normalize, tag, every rule family,
exact + near dedup, write): documents/s and MB/s per core, per corpus.
Table 3, peak memory (RSS of a fresh process, sampled) of the whole stage at 1x and 10x
corpus size (10x = the files copied ten times): streaming by shard keeps it flat.
"""
from __future__ import annotations

import csv
import gzip
import hashlib
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from pretrain.config import CleanConfig, SourceConfig  # noqa: E402
from tasks.clean.dedup import exact_duplicates  # noqa: E402
from tasks.clean.readers import RawDoc  # noqa: E402
from tasks.clean.judge import Cleaner  # noqa: E402
from benchmarks._corpus import benchmark_parser  # noqa: E402
from benchmarks._memory import run_measured  # noqa: E402


def english_docs(corpora: Path) -> list[str]:
    docs = []
    with gzip.open(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz", "rt", encoding="utf-8") as f:
        docs += [json.loads(line)["text"] for line in f]
    raw = (corpora / "en" / "wikitext2_test.raw").read_text(encoding="utf-8").replace("\r\n", "\n")
    docs += [a.strip() for a in re.split(r"\n (?== [^=])", raw) if a.strip()]  # one document per article
    with open(corpora / "en" / "ag_news_test.csv", encoding="utf-8") as f:
        docs += [f"{row[1]}. {row[2]}" for row in csv.reader(f) if len(row) == 3]
    return docs


def equivalent_config() -> CleanConfig:
    """Only the four English families, no normalization: what datatrove's four filters do."""
    off = {"mode": "off"}
    return CleanConfig(sources=[SourceConfig(path="unused", channel_hint="en")],
                       normalize={"unicode_form": "none", "fix_mojibake": False, "strip_control": False, "whitespace": False},
                       rules={"length": off, "garbage": off, "dirty": off, "chinese": off, "code": off})


def ours_filters(docs: list[str]) -> tuple[int, float]:
    cleaner = Cleaner(equivalent_config())
    start = time.perf_counter()
    kept = sum(cleaner.judge(RawDoc(str(i), t, "bench", "en")).failure is None for i, t in enumerate(docs))
    return kept, time.perf_counter() - start


def ours_exact_dedup(docs: list[str], tmp: Path) -> tuple[int, float]:
    """What the stage does for exact dedup: a 128-bit hash per document into Parquet, one DuckDB pass over all of them."""
    start = time.perf_counter()
    hashes = [hashlib.blake2b(t.encode(), digest_size=16).digest() for t in docs]
    path = tmp / "hashes.parquet"
    pq.write_table(pa.table({"doc": pa.array(range(len(docs)), pa.int64()), "hash": pa.array(hashes, pa.binary(16))}), path)
    con = duckdb.connect(config={"threads": 1})  # per core, like the datatrove side
    con.execute(f"CREATE TEMP TABLE docs AS SELECT doc, hash FROM read_parquet('{path}')")
    duplicates = exact_duplicates(con)
    con.close()
    kept = sum(1 for i in range(len(docs)) if i not in duplicates)
    return kept, time.perf_counter() - start


def with_duplicates(docs: list[str], scale: int = 10) -> list[str]:
    """`scale` variants of every document (a line appended, so they differ), plus an exact copy of every tenth."""
    variants = [f"{t}\n{k}" for k in range(scale) for t in docs]
    return variants + variants[::10]


def datatrove_run(mode: str, python: str, docs: list[str], tmp: Path) -> tuple[int, float]:
    path = tmp / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in docs), encoding="utf-8")
    out = subprocess.run([python, str(ROOT / "benchmarks" / "_datatrove_side.py"), mode, str(path), str(tmp / "dt-work")],
                         capture_output=True, text=True, check=True)
    shutil.rmtree(tmp / "dt-work", ignore_errors=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["kept"], result["seconds"]


def corpus_sources(corpora: Path) -> dict[str, list[dict]]:
    return {
        "en CC-MAIN (web)": [{"path": str(corpora / "en" / "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz")}],
        "en ag_news": [{"path": str(corpora / "en" / "ag_news_test.csv"), "columns": ["label", "title", "text"]}],
        "zh cnews": [{"path": str(corpora / "zh" / "cnews.val.txt"), "format": "tsv", "columns": ["label", "text"]}],
        "zh ChnSentiCorp": [{"path": str(corpora / "zh" / "ChnSentiCorp_htl_all.csv"), "text_field": "review"}],
        "zh wikipedia": [{"path": str(corpora / "zh" / "zhwiki_simplified_00.jsonl")}],
        "dirty (all)": [{"path": str(corpora / "dirty" / "zh_trec06c_spam.txt"), "text_unit": "line"},
                        {"path": str(corpora / "dirty" / "zh_trec06c_ham.txt"), "text_unit": "line"},
                        {"path": str(corpora / "dirty" / "zh_sms_labeled.tsv"), "columns": ["label", "text"]},
                        {"path": str(corpora / "dirty" / "en_sms_spam_collection.tsv")
                         , "text_field": "SMS"}],
    }


def stage_in_subprocess(sources: list[dict], out: Path) -> dict:
    """The whole stage on one worker in a fresh process; returns its manifest, seconds and peak RSS."""
    code = f"""
import json, time, sys
sys.path.insert(0, {str(ROOT)!r})
from pathlib import Path
from pretrain.config import CleanConfig
from tasks.clean.stage import run_clean
cfg = CleanConfig(sources={sources!r}, executor={{"workers": 1}})
t = time.perf_counter()
m = run_clean(cfg, Path({str(out)!r}))
print(json.dumps({{"manifest": m, "seconds": time.perf_counter() - t}}))
"""
    result, peak_mb = run_measured([sys.executable, "-c", code])
    return {**result, "max_rss_mb": peak_mb}


def size_mb(sources: list[dict]) -> float:
    return sum(Path(s["path"]).stat().st_size for s in sources) / 1e6


def compare_exact_dedup(docs: list[str], args, tmp: Path) -> None:
    mb = sum(len(t.encode()) for t in docs) / 1e6
    print(f"\nTable 1b: exact dedup only, 1 core, {len(docs)} docs (10 variants of each, {len(docs) // 11} exact copies added), {mb:.1f} MB")
    print(f"{'implementation':<16}{'kept':>7}{'median s':>10}{'docs/s':>10}{'MB/s':>8}{'ratio':>8}")
    ours = [ours_exact_dedup(docs, tmp) for _ in range(args.repeat)]
    o_sec = statistics.median(s for _, s in ours)
    print(f"{'this project':<16}{ours[0][0]:>7}{o_sec:>10.2f}{len(docs) / o_sec:>10.0f}{mb / o_sec:>8.2f}{'1.00':>8}")
    if not args.datatrove_python:
        print("datatrove          (not run: pass --datatrove-python)")
        return
    dt = [datatrove_run("exact-dedup", args.datatrove_python, docs, tmp) for _ in range(args.repeat)]
    d_sec = statistics.median(s for _, s in dt)
    print(f"{'datatrove':<16}{dt[0][0]:>7}{d_sec:>10.2f}{len(docs) / d_sec:>10.0f}{mb / d_sec:>8.2f}{d_sec / o_sec:>8.2f}"
          f"   <- ours is {d_sec / o_sec:.2f}x datatrove's throughput")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--datatrove-python", help="python of a venv with datatrove and spacy")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    corpora = args.shared / "corpora"
    tmp = Path(tempfile.mkdtemp(prefix="clean-bench-"))
    try:
        docs = english_docs(corpora)
        mb = sum(len(t.encode()) for t in docs) / 1e6
        ours = [ours_filters(docs) for _ in range(args.repeat)]
        o_sec = statistics.median(s for _, s in ours)
        print(f"Table 1: English filters only (Gopher quality + repetition, C4, FineWeb), 1 core, {len(docs)} docs, {mb:.1f} MB")
        print(f"{'implementation':<16}{'kept':>7}{'median s':>10}{'docs/s':>10}{'MB/s':>8}{'ratio':>8}")
        print(f"{'this project':<16}{ours[0][0]:>7}{o_sec:>10.2f}{len(docs) / o_sec:>10.0f}{mb / o_sec:>8.2f}{'1.00':>8}")
        if args.datatrove_python:
            dt = [datatrove_run("filters", args.datatrove_python, docs, tmp) for _ in range(args.repeat)]
            d_sec = statistics.median(s for _, s in dt)
            print(f"{'datatrove':<16}{dt[0][0]:>7}{d_sec:>10.2f}{len(docs) / d_sec:>10.0f}{mb / d_sec:>8.2f}{d_sec / o_sec:>8.2f}"
                  f"   <- ours is {d_sec / o_sec:.2f}x datatrove's throughput (target >= 2x)")
        else:
            print("datatrove          (not run: pass --datatrove-python)")

        compare_exact_dedup(with_duplicates(docs), args, tmp)

        print("\nTable 2: the whole stage, 1 worker (read, normalize, channel, all rules, exact + near dedup, write)")
        print(f"{'corpus':<20}{'docs':>8}{'MB':>7}{'kept':>8}{'median s':>10}{'docs/s':>9}{'MB/s':>7}")
        for name, sources in corpus_sources(corpora).items():
            runs = [stage_in_subprocess(sources, tmp / f"out-{name[:6]}-{i}".replace(" ", "_")) for i in range(args.repeat)]
            sec = statistics.median(r["seconds"] for r in runs)
            m = runs[0]["manifest"]
            print(f"{name:<20}{m['docs_in']:>8}{size_mb(sources):>7.1f}{m['kept']:>8}{sec:>10.2f}"
                  f"{m['docs_in'] / sec:>9.0f}{size_mb(sources) / sec:>7.2f}")

        print("\nTable 3: peak memory of the whole stage (RSS sampled every 20 ms, fresh process, 1 worker)")
        print(f"{'corpus size':<14}{'files':>7}{'MB':>8}{'docs':>9}{'seconds':>9}{'peak RSS MB':>12}")
        base = [s for group in corpus_sources(corpora).values() for s in group]
        for factor in (1, 10):
            sources = []
            for k in range(factor):
                for s in base:
                    copy = tmp / f"x{k}" / Path(s["path"]).name
                    copy.parent.mkdir(exist_ok=True)
                    if not copy.exists():
                        shutil.copy(s["path"], copy)
                    sources.append({**s, "path": str(copy)})
            r = stage_in_subprocess(sources, tmp / f"mem-{factor}")
            print(f"{f'{factor}x':<14}{len(sources):>7}{size_mb(sources):>8.1f}{r['manifest']['docs_in']:>9}"
                  f"{r['seconds']:>9.1f}{r['max_rss_mb']:>12.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
