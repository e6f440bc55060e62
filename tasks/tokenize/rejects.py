"""Tokens per cleaning rule: what each rule removed, counted in tokens of the trained tokenizer.

The clean stage counts documents and characters per rule before any tokenizer
exists; once one does, the tokenize stage encodes the rejected documents too
and writes rule_tokens.parquet beside the shards (tokens include the EOS each
document would have cost, as the kept counts do).
"""
from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.common.outputs import read_json, write_json
from tasks.tokenize.parts import PartSettings, tokenizer_at

RULE_TOKENS = "rule_tokens.parquet"
RULE_TOKENS_SCHEMA = pa.schema([("outcome", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                                ("channel", pa.string()), ("docs", pa.int64()), ("tokens", pa.int64())])


@dataclass(frozen=True)
class RejectSpec:
    input: str
    part_id: str
    fingerprint: str


def plan_rejects(clean_dir: Path, tokenizer_hash: str, file_hash) -> list[RejectSpec]:
    specs = []
    for path in sorted((Path(clean_dir) / "rejects").glob("*.parquet")):
        key = f"{file_hash(path)}:{tokenizer_hash}"
        specs.append(RejectSpec(str(path.resolve()), path.stem, hashlib.sha256(key.encode()).hexdigest()))
    return specs


def count_rejected(spec: RejectSpec, settings: PartSettings, work_dir: Path) -> dict:
    """Documents and tokens per (rule, reason, channel) of one rejects file; skips a counted one."""
    out = Path(work_dir) / f"rejects-{spec.part_id}.json"
    if out.is_file() and read_json(out).get("fingerprint") == spec.fingerprint:
        return {**read_json(out), "skipped": True}
    tok, _, _ = tokenizer_at(settings.tokenizer_json)
    counts: dict[tuple[str, str, str], list[int]] = {}
    columns = ["rule", "reason", "channel", "text"]
    for batch in pq.ParquetFile(spec.input).iter_batches(batch_size=settings.batch_docs, columns=columns):
        rules, reasons, channels, texts = (batch.column(c).to_pylist() for c in columns)
        for key, enc in zip(zip(rules, reasons, channels), tok.encode_batch_fast(texts, add_special_tokens=False)):
            docs_tokens = counts.setdefault(key, [0, 0])
            docs_tokens[0] += 1
            docs_tokens[1] += len(enc.ids) + 1
    result = {"part_id": spec.part_id, "fingerprint": spec.fingerprint,
              "rows": [{"outcome": "rejected", "rule": r, "reason": why, "channel": c, "docs": d, "tokens": t}
                       for (r, why, c), (d, t) in sorted(counts.items())]}
    tmp = out.with_name(out.name + f".tmp-{os.getpid()}")
    write_json(tmp, result)
    os.replace(tmp, out)
    return {**result, "skipped": False}


def write_rule_tokens(path: Path, manifest: dict, counted: list[dict]) -> dict:
    """rule_tokens.parquet: kept tokens per channel and rejected tokens per rule; returns tokens per rule."""
    rows = [{"outcome": "kept", "rule": "", "reason": "kept", "channel": c, "docs": manifest["docs_by_channel"][c],
             "tokens": t} for c, t in sorted(manifest["tokens_by_channel"].items())]
    rows += [row for part in counted for row in part["rows"]]
    pq.write_table(pa.Table.from_pylist(rows, schema=RULE_TOKENS_SCHEMA), path)
    by_rule: dict[str, int] = {}
    for row in rows:
        if row["outcome"] == "rejected":
            by_rule[row["rule"]] = by_rule.get(row["rule"], 0) + row["tokens"]
    return by_rule


def rule_table(clean_dir: Path, tokens_dir: Path) -> list[dict]:
    """The clean stage's per-rule table (documents, characters) with the token column, largest first."""
    import duckdb

    rows = duckdb.execute("""
        WITH s AS (SELECT outcome, rule, reason, sum(docs) AS docs, sum(chars) AS chars
                   FROM read_parquet(?) GROUP BY ALL),
             t AS (SELECT outcome, rule, reason, sum(tokens) AS tokens
                   FROM read_parquet(?) GROUP BY ALL)
        SELECT s.outcome, s.rule, s.reason, s.docs::BIGINT, s.chars::BIGINT, t.tokens::BIGINT
        FROM s LEFT JOIN t USING (outcome, rule, reason)
        ORDER BY s.outcome, s.docs DESC""", [[str(Path(clean_dir) / "stats.parquet")],
                                            [str(Path(tokens_dir) / RULE_TOKENS)]]).fetchall()
    return [dict(zip(("outcome", "rule", "reason", "documents", "characters", "tokens"), r)) for r in rows]
