"""What the clean stage counts: documents and characters per (outcome, rule, reason, channel), the output schemas
of kept, rejected and counted rows, and the rule table read back from the counts."""
from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path

import duckdb
import pyarrow as pa

SCORES = pa.map_(pa.string(), pa.float32())
KEPT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                         ("text", pa.string()), ("repairs", pa.list_(pa.string())),
                         ("flags", pa.list_(pa.string())), ("scores", SCORES)])
REJECT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                           ("text", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                           ("score", pa.float64()), ("flags", pa.list_(pa.string())), ("scores", SCORES)])
STATS_SCHEMA = pa.schema([("outcome", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                          ("channel", pa.string()), ("docs", pa.int64()), ("chars", pa.int64())])


class Tally:
    """Documents and characters per (outcome, rule, reason, channel), plus review samples."""

    def __init__(self, samples_per_reason: int):
        self.counts: Counter = Counter()
        self.chars: Counter = Counter()
        self.samples: dict[str, list[dict]] = defaultdict(list)
        self.samples_per_reason = samples_per_reason

    def add(self, outcome: str, rule: str, reason: str, channel: str, text: str, row: dict | None = None) -> None:
        key = (outcome, rule, reason, channel)
        self.counts[key] += 1
        self.chars[key] += len(text)
        if row is not None and len(self.samples[reason]) < self.samples_per_reason:
            self.samples[reason].append(row)

    def rows(self) -> list[dict]:
        return [{"outcome": o, "rule": r, "reason": why, "channel": c, "docs": n, "chars": self.chars[(o, r, why, c)]}
                for (o, r, why, c), n in sorted(self.counts.items())]

    def to_json(self) -> dict:
        return {"rows": self.rows(), "samples": {k: v for k, v in self.samples.items()}}

    def merge(self, data: dict) -> None:
        for r in data["rows"]:
            key = (r["outcome"], r["rule"], r["reason"], r["channel"])
            self.counts[key] += r["docs"]
            self.chars[key] += r["chars"]
        for reason, rows in data["samples"].items():
            room = self.samples_per_reason - len(self.samples[reason])
            self.samples[reason].extend(rows[:max(room, 0)])

    def total(self, outcome: str) -> int:
        return sum(n for (o, *_), n in self.counts.items() if o == outcome)

    def by(self, outcome: str, field: int) -> dict[str, int]:
        out: Counter = Counter()
        for key, n in self.counts.items():
            if key[0] == outcome:
                out[key[field]] += n
        return dict(out)


def rule_table(stats_path: Path, unreadable: list[dict]) -> list[dict]:
    """Documents and characters per outcome / rule / reason, all channels together, largest first."""
    rows = duckdb.execute("""
        SELECT outcome, rule, reason, sum(docs)::BIGINT AS documents, sum(chars)::BIGINT AS characters
        FROM read_parquet(?) GROUP BY ALL ORDER BY outcome, documents DESC""", [[str(stats_path)]]).fetchall()
    table = [dict(zip(("outcome", "rule", "reason", "documents", "characters"), r)) for r in rows]
    return table + [{"outcome": "unreadable file", "rule": "", "reason": u["path"],
                     "documents": u["docs_read_before_error"], "characters": 0} for u in unreadable]
