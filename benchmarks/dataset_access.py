"""Random access and resume cost of the training dataset and sampler.

    python benchmarks/dataset_access.py [--shared ../shared] [--seq-len 2048]

Builds token shards from ../shared/corpora (clean -> 32k tokenizer -> tokenize),
then measures, for one pool and for a channel mixture:
  dataset[i]   latency of random i (median, p99), as the training loop calls it
  resume       time to rebuild the sampler at consumed_samples = 0, 10^6, 10^9 and
               produce the next global batch of samples (it must not grow with the position)
A per-epoch index that is rebuilt or replayed on resume would grow with the position;
the baseline row replays the sampler up to the position (what an iterator-based loader
does), measured at the positions where it finishes in reasonable time.
  first batch  time and peak RSS of a fresh process that builds the sampler over
               --first-batch-samples samples (default 5e8 = 1T tokens at seq 2048) and draws
               one global batch of 512, in the Feistel order and in the materialised
               numpy shuffle of earlier versions (the baseline; --skip-baseline leaves it out)
"""
from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from benchmarks._corpus import benchmark_parser, clean_corpus, train_small_tokenizer  # noqa: E402
from benchmarks._memory import run_measured  # noqa: E402
from model.data import GlobalSampler, SamplerState, TokenDataset, sampler_for  # noqa: E402
from pretrain.config import TokenizeConfig  # noqa: E402
from tasks.tokenize import run_tokenize  # noqa: E402

GLOBAL_BATCH = 256


def getitem_latency(dataset: TokenDataset, n: int = 20000) -> tuple[float, float]:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, len(dataset), n)
    for i in ids[:1000]:
        dataset[int(i)]  # open every shard once: first-touch cost is not per-item cost
    times = np.empty(n)
    for k, i in enumerate(ids):
        t = time.perf_counter_ns()
        dataset[int(i)]
        times[k] = time.perf_counter_ns() - t
    return float(np.median(times)) / 1000, float(np.percentile(times, 99)) / 1000


def resume_seconds(dataset: TokenDataset, weights: dict | None, position: int, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        sampler = sampler_for(dataset, seed=1, state=SamplerState(position), weights=weights)
        batch = sampler.next_global_batch(GLOBAL_BATCH)
        for i in batch:
            dataset[i]
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def replay_seconds(n: int, position: int) -> float:
    """The iterator way: draw every sample up to the position again."""
    t = time.perf_counter()
    sampler = GlobalSampler(n, 1)
    for _ in range(position // GLOBAL_BATCH):
        sampler.next_global_batch(GLOBAL_BATCH)
    return time.perf_counter() - t


FIRST_BATCH = """
import json, sys, time
t = time.perf_counter()
from model.data import GlobalSampler, SamplerState
sampler = GlobalSampler([{n}], seed=1, state=SamplerState(order="{order}"))
batch = sampler.next_global_batch(512)
print(json.dumps({{"seconds": time.perf_counter() - t, "distinct": len(set(batch))}}))
"""


def first_batch(n: int, order: str) -> tuple[float, float]:
    """Seconds (imports included) and peak RSS in MB of a process that draws the first global batch."""
    result, peak_mb = run_measured([sys.executable, "-c", FIRST_BATCH.format(n=n, order=order)],
                                   env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result["distinct"] == 512
    return result["seconds"], peak_mb


def print_first_batch(n: int, with_baseline: bool) -> None:
    print(f"\nfirst global batch (512) of a fresh process at {n:.1e} samples, one pool:")
    print(f"{'order':<34}{'seconds':>9}{'peak RSS MB':>13}")
    orders = [("feistel (per position)", "feistel")]
    if with_baseline:
        orders.append(("numpy_shuffle (baseline, earlier)", "numpy_shuffle"))
    rows = {label: first_batch(n, order) for label, order in orders}
    for label, (seconds, mb) in rows.items():
        print(f"{label:<34}{seconds:>9.2f}{mb:>13.0f}")
    if with_baseline:
        (fs, fm), (bs, bm) = rows.values()
        print(f"feistel / baseline: time {fs / bs:.4f}x, memory {fm / bm:.3f}x")


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--first-batch-samples", type=float, default=5e8)
    parser.add_argument("--skip-baseline", action="store_true", help="leave out the numpy shuffle's first batch "
                        "(minutes and GBs at 5e8)")
    parser.add_argument("--first-batch-only", action="store_true")
    args = parser.parse_args()
    print_first_batch(int(args.first_batch_samples), not args.skip_baseline)
    if args.first_batch_only:
        return
    tmp = Path(tempfile.mkdtemp(prefix="dataset-bench-"))
    try:
        clean_corpus(args.shared / "corpora", tmp / "clean", code_glob="/*.py")
        train_small_tokenizer(tmp / "clean", tmp / "tokenizer")
        # small shards, so samples cross shard boundaries as they do in a large corpus
        manifest = run_tokenize(TokenizeConfig(shard_max_tokens=200_000), tmp / "clean", tmp / "tokenizer", tmp / "tokens")
        print(f"\n{manifest['total_tokens']:,} tokens in {len(manifest['shards'])} shards; seq_len {args.seq_len}; "
              f"global batch {GLOBAL_BATCH}\n")
        setups = {"one pool": (TokenDataset(tmp / "tokens", args.seq_len), None),
                  "mixture by channel": (TokenDataset(tmp / "tokens", args.seq_len, pool_by="channel"),
                                         {"zh": 0.4, "en": 0.3, "code": 0.3})}
        print(f"{'dataset':<20}{'samples':>9}{'getitem median us':>19}{'p99 us':>9}"
              + "".join(f"{'resume @' + f'{p:.0e}':>14}" for p in (0, 1e6, 1e9)))
        for name, (dataset, weights) in setups.items():
            median, p99 = getitem_latency(dataset)
            resumes = [resume_seconds(dataset, weights, int(p)) for p in (0, 10**6, 10**9)]
            print(f"{name:<20}{len(dataset):>9,}{median:>19.1f}{p99:>9.1f}"
                  + "".join(f"{s * 1000:>12.2f}ms" for s in resumes))
        n = len(setups["one pool"][0])
        print("\nbaseline, replaying the sampler to the position: "
              + ", ".join(f"@{p:.0e}: {replay_seconds(n, int(p)):.2f} s" for p in (10**4, 10**5, 10**6))
              + " (grows linearly; @1e9 would take ~1000x the @1e6 time)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
