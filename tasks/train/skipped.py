"""What skipped data was: the documents, sources and channels behind skipped sample ranges.

A loss spike is often dirty data that the cleaning stage should learn to
reject; this report points at it (shard, row, source) so it can be read.
"""
from __future__ import annotations

import pyarrow as pa

from model.data import training_dataset, training_sampler
from model.spec import DataSpec
from pretrain.channels import CHANNELS

MAX_SAMPLES_PER_RANGE = 2000  # a wide skip is summarised from an even sample of its positions


def skipped_documents(data: DataSpec, ranges: list) -> list[dict]:
    """Every document behind the samples of the ranges (an even sample of a wide range), as the run ordered them."""
    dataset = training_dataset(data.tokens_dir, data)
    sampler = training_sampler(dataset, data)
    rows = []
    for a, b in ranges:
        stride = max(1, (b - a) // MAX_SAMPLES_PER_RANGE)
        for position in range(a, b, stride):
            sample = sampler.sample_at(position)
            channels = dataset[sample]["channels"]
            for doc in dataset.documents_of(sample):
                rows.append({"range": f"{a}..{b}", "position": position, "sample": sample, **doc,
                             "channel": CHANNELS[int(channels[0])]})
    return rows


def skipped_data_report(data: DataSpec, ranges: list) -> dict:
    import duckdb

    rows = skipped_documents(data, ranges)
    if not rows:
        return {"rows": [], "markdown": "No samples in the skipped ranges."}
    skipped = pa.Table.from_pylist(rows)  # noqa: F841 - queried by name below
    summary = duckdb.sql("""
        SELECT range, source, channel, count(DISTINCT sample) AS samples, count(DISTINCT (shard, "row")) AS documents
        FROM skipped GROUP BY ALL ORDER BY range, samples DESC""").fetchall()
    lines = ["| range | source | channel | samples | documents |", "|---|---|---|---|---|"]
    lines += [f"| {r} | {s} | {c} | {n} | {d} |" for r, s, c, n, d in summary]
    first = rows[0]
    lines.append(f"\nFirst document: shard `{first['shard']}`, row {first['row']} (source {first['source']}).")
    return {"rows": [dict(zip(("range", "source", "channel", "samples", "documents"), r)) for r in summary],
            "markdown": "\n".join(lines)}
