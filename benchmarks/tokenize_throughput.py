"""Tokenization throughput of the tokenize stage against its baselines, and its peak memory at 1x and 10x.

    python benchmarks/tokenize_throughput.py [--shared ../shared] [--datatrove-python /tmp/dt-venv/bin/python]

Cleans ../shared/corpora (zh, en) plus Python source (the code channel), trains a
32k tokenizer on it, then encodes the same kept documents, with the same
tokenizer, on the same cores, several ways (median of --repeats runs each):
  raw encode_batch        all texts already in memory, no I/O (the practical limit)
  raw encode_batch_fast   the same without offsets (what the stage calls)
  per-document loop       tok.encode(text) for each text, as many prepare scripts do
  stage, N workers        `run_tokenize`: read Parquet, encode, write Arrow shards + manifest, with the encoder
                          the tokenizer stage proved exact (tiktoken, tasks/tokenizer/fast_bpe.py) and with HF
                          tokenizers (tokenize.encoder: tokenizers); their shards must be byte-identical
  datatrove               DocumentTokenizer (shuffle off) on LocalPipelineExecutor, tasks = workers = cores,
                          reading the same Parquet (needs a Python with datatrove: --datatrove-python)
The throughput table runs on --scale (10) hard-linked copies of the kept files, so
fixed start-up costs do not dominate. Then the stage's peak memory (its process
and its workers together) on the corpus and on the copies.
Target: the stage with tiktoken on all cores >= 3x raw encode_batch_fast (which uses all cores), ids identical.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow.dataset as ds  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from benchmarks._corpus import benchmark_parser, clean_corpus, train_small_tokenizer  # noqa: E402
from benchmarks._memory import run_measured  # noqa: E402

STAGE = """
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from pretrain.config import TokenizeConfig
from tasks.tokenize import run_tokenize
cfg = TokenizeConfig(executor={{"workers": {workers}}}, count_rejected_tokens=False, encoder={encoder!r})
t = time.perf_counter()
m = run_tokenize(cfg, Path({clean!r}), Path({tok!r}), Path({out!r}))
print(json.dumps({{"seconds": time.perf_counter() - t, "tokens": m["total_tokens"], "encoder": m["encoder"]["used"]}}))
"""

DATATROVE = """
import json, sys, time
from datatrove.executor import LocalPipelineExecutor
from datatrove.pipeline.readers import ParquetReader
from datatrove.pipeline.tokens import DocumentTokenizer
workers = {workers}
pipeline = [ParquetReader({kept!r}, glob_pattern="*.parquet", text_key="text", id_key="id"),
            DocumentTokenizer({out!r}, tokenizer_name_or_path={tok!r}, eos_token="<|eos|>", shuffle_documents=False)]
t = time.perf_counter()
LocalPipelineExecutor(pipeline, tasks=workers, workers=workers, logging_dir={logs!r}).run()
seconds = time.perf_counter() - t
tokens = 0
import glob, os
for path in glob.glob({out!r} + "/*.ds"):
    tokens += os.path.getsize(path) // 2
print(json.dumps({{"seconds": seconds, "tokens": tokens}}))
"""


def in_memory_runs(tok_path: Path, texts: list[str], repeats: int) -> dict[str, tuple[float, int]]:
    tok = Tokenizer.from_file(str(tok_path))
    tok.encode_batch(texts[:100])  # warm the thread pool
    ways = {
        "raw encode_batch": lambda batch: tok.encode_batch(batch, add_special_tokens=False),
        "raw encode_batch_fast": lambda batch: tok.encode_batch_fast(batch, add_special_tokens=False),
        "per-document loop": lambda batch: [tok.encode(t, add_special_tokens=False) for t in batch],
    }
    out = {}
    for name, encode in ways.items():
        times, tokens = [], 0
        for _ in range(repeats):
            t = time.perf_counter()
            tokens = sum(len(e.ids) + 1 for i in range(0, len(texts), 1000) for e in encode(texts[i:i + 1000]))
            times.append(time.perf_counter() - t)
        out[name] = (statistics.median(times), tokens)
    return out


def stage_run(clean: Path, tok: Path, out: Path, workers: int, encoder: str = "auto") -> dict:
    """The stage in a fresh process: seconds, tokens, and peak MB of it and its workers together."""
    shutil.rmtree(out, ignore_errors=True)
    code = STAGE.format(root=str(ROOT), workers=workers, clean=str(clean), tok=str(tok), out=str(out), encoder=encoder)
    result, peak_mb = run_measured([sys.executable, "-c", code])
    return {**result, "peak_mb": peak_mb}


def datatrove_run(python: str, clean: Path, tok: Path, tmp: Path, workers: int) -> dict:
    out = tmp / "dt-out"
    shutil.rmtree(out, ignore_errors=True)
    shutil.rmtree(tmp / "dt-logs", ignore_errors=True)
    code = DATATROVE.format(workers=workers, kept=str(clean / "kept"), out=str(out), tok=str(tok),
                            logs=str(tmp / "dt-logs"))
    return run_measured([python, "-c", code])[0]


def shard_digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.arrow"))}


def copies(clean: Path, dest: Path, n: int) -> Path:
    if n == 1:
        return clean
    """A clean output holding n hard-linked copies of every kept file (distinct names, same bytes)."""
    shutil.copytree(clean, dest, ignore=shutil.ignore_patterns("kept"))
    (dest / "kept").mkdir()
    for path in sorted((clean / "kept").glob("*.parquet")):
        for k in range(n):
            os.link(path, dest / "kept" / f"{path.stem}-copy{k:02d}.parquet")
    return dest


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--datatrove-python", default=None, help="a Python with datatrove and tokenizers installed")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--scale", type=int, default=10, help="copies of the corpus for the throughput table")
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    tmp = Path(tempfile.mkdtemp(prefix="tokenize-bench-"))
    try:
        clean_corpus(args.shared / "corpora", tmp / "clean-x1", code_glob="/*.py")
        train_small_tokenizer(tmp / "clean-x1", tmp / "tokenizer")
        tok_path = tmp / "tokenizer" / "tokenizer.json"
        clean = copies(tmp / "clean-x1", tmp / f"clean-x{args.scale}", args.scale)
        texts = ds.dataset(tmp / "clean-x1" / "kept").to_table(columns=["text"]).column("text").to_pylist()
        mb1 = sum(len(t.encode()) for t in texts) / 1e6
        texts = texts * args.scale
        mb = mb1 * args.scale
        print(f"corpus: the kept documents x{args.scale}: {len(texts):,} documents, {mb:.1f} MB of UTF-8 text; "
              f"{cores} cores; median of {args.repeats} runs\n")
        rows = dict(in_memory_runs(tok_path, texts, args.repeats))
        proof = json.loads((tmp / "tokenizer" / "report.json").read_text())["fast_encoding"]
        print(f"tokenizer stage's equivalence check: {proof}\n")
        for encoder in ("auto", "tokenizers"):
            for workers in sorted({1, cores}):
                runs = [stage_run(clean, tmp / "tokenizer", tmp / f"tokens-{encoder}", workers, encoder)
                        for _ in range(args.repeats)]
                rows[f"stage, {workers} worker(s), {runs[0]['encoder']}"] = (
                    statistics.median(r["seconds"] for r in runs), runs[0]["tokens"])
        same = shard_digests(tmp / "tokens-auto") == shard_digests(tmp / "tokens-tokenizers")
        if args.datatrove_python:
            runs = [datatrove_run(args.datatrove_python, clean, tok_path, tmp, cores) for _ in range(args.repeats)]
            rows[f"datatrove, {cores} workers"] = (statistics.median(r["seconds"] for r in runs), runs[0]["tokens"])
        limit, fast = rows["raw encode_batch"][0], rows["raw encode_batch_fast"][0]
        print(f"{'way':<38}{'seconds':>9}{'tokens':>12}{'tokens/s':>12}{'MB/s':>8}{'vs encode_batch':>16}"
              f"{'vs _fast':>10}")
        for name, (seconds, tokens) in rows.items():
            print(f"{name:<38}{seconds:>9.2f}{tokens:>12,}{tokens / seconds:>12,.0f}{mb / seconds:>8.2f}"
                  f"{limit / seconds:>15.0%}{fast / seconds:>9.2f}x")
        best = min(v[0] for k, v in rows.items() if k.startswith(f"stage, {cores} worker") and k.endswith("tiktoken"))
        print(f"\nstage with tiktoken on {cores} cores: {fast / best:.2f}x raw encode_batch_fast (target >= 3); "
              f"shards byte-identical to the stage with HF tokenizers: {same}")
        print("\nPeak memory of the stage process and its workers together (sampled every 20 ms):")
        print(f"{'corpus':<8}{'MB text':>9}{'workers':>9}{'seconds':>9}{'peak MB':>9}")
        for n in (1, args.scale):
            for workers in sorted({1, cores}):
                r = stage_run(tmp / f"clean-x{n}", tmp / "tokenizer", tmp / f"tokens-x{n}", workers)
                print(f"{n}x{'':<6}{mb1 * n:>9.1f}{workers:>9}{r['seconds']:>9.1f}{r['peak_mb']:>9.0f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
