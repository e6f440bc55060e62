"""The clean stage: sources -> kept / rejected Parquet parts, stats and a manifest."""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pretrain.config import CleanConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.lexicon import Lexicon, default_paths
from tasks.clean.normalize import normalize_text
from tasks.clean.readers import RawDoc, UnreadableFile, expand_source, iter_source
from tasks.clean.rules import Doc, build_rules, first_failure
from tasks.common.outputs import staged_output, write_json
from tasks.common.progress import Progress

KEPT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                         ("text", pa.string()), ("repaired", pa.string())])
REJECT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                           ("text", pa.string()), ("reason", pa.string())])


class PartWriter:
    """Buffers rows and writes Parquet parts of `batch_size` rows."""

    def __init__(self, folder: Path, schema: pa.Schema, batch_size: int):
        self.folder, self.schema, self.batch_size = folder, schema, batch_size
        folder.mkdir(parents=True, exist_ok=True)
        self.rows: list[dict] = []
        self.parts = 0

    def add(self, row: dict) -> None:
        self.rows.append(row)
        if len(self.rows) >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if not self.rows and self.parts:
            return
        table = pa.Table.from_pylist(self.rows, schema=self.schema)
        pq.write_table(table, self.folder / f"part-{self.parts:05d}.parquet", compression="zstd")
        self.parts += 1
        self.rows = []


class Cleaner:
    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.rules = build_rules(cfg, Lexicon.from_paths(default_paths(cfg.lexicons)))
        self.seen: set[bytes] = set()

    def judge(self, raw: RawDoc) -> tuple[str, str, str | None]:
        """(normalized text, channel, reject reason or None)."""
        if raw.problem:
            return raw.text, "other", raw.problem
        is_code = raw.channel_hint == "code"
        text = normalize_text(raw.text, keep_indentation=is_code)
        feats = DocFeatures(text)
        if not text.strip():
            return text, "other", "empty_after_normalization"
        channel = detect_channel(feats, raw.channel_hint)
        reason = first_failure(self.rules, Doc(text, channel, feats))
        if reason is None:
            digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
            if digest in self.seen:
                reason = "exact_duplicate"
            self.seen.add(digest)
        return text, channel, reason


def check_sources(cfg: CleanConfig) -> None:
    """Fail before writing anything when a source names nothing."""
    for source in cfg.sources:
        expand_source(source)


def run_clean(cfg: CleanConfig, out_dir: Path) -> dict:
    check_sources(cfg)
    cleaner = Cleaner(cfg)
    unreadable: list[UnreadableFile] = []
    reasons: Counter = Counter()
    kept_by_channel: Counter = Counter()
    per_source: Counter = Counter()
    repaired = 0
    with staged_output(out_dir) as tmp:
        kept = PartWriter(tmp / "kept", KEPT_SCHEMA, cfg.batch_size)
        rejects = PartWriter(tmp / "rejects", REJECT_SCHEMA, cfg.batch_size)
        progress = Progress("clean", "docs")
        for source in cfg.sources:
            for raw in iter_source(source, unreadable):
                progress.add()
                per_source[source.source_name] += 1
                text, channel, reason = cleaner.judge(raw)
                repaired += raw.repaired is not None
                if reason:
                    reasons[(reason, channel)] += 1
                    rejects.add({"id": raw.doc_id, "source": raw.source, "channel": channel,
                                 "text": text, "reason": reason})
                else:
                    kept_by_channel[channel] += 1
                    kept.add({"id": raw.doc_id, "source": raw.source, "channel": channel,
                              "text": text, "repaired": raw.repaired})
        kept.flush()
        rejects.flush()
        progress.done()
        stats = [{"reason": r, "channel": c, "count": n} for (r, c), n in sorted(reasons.items())]
        stats += [{"reason": "kept", "channel": c, "count": n} for c, n in sorted(kept_by_channel.items())]
        pq.write_table(pa.Table.from_pylist(stats, schema=pa.schema(
            [("reason", pa.string()), ("channel", pa.string()), ("count", pa.int64())])), tmp / "stats.parquet")
        manifest = {
            "docs_in": sum(per_source.values()),
            "kept": sum(kept_by_channel.values()),
            "rejected": sum(reasons.values()),
            "kept_by_channel": dict(kept_by_channel),
            "rejected_by_reason": dict(_by_reason(reasons)),
            "docs_by_source": dict(per_source),
            "repaired_docs": repaired,
            "unreadable_files": [vars(u) for u in unreadable],
        }
        write_json(tmp / "manifest.json", manifest)
    assert manifest["docs_in"] == manifest["kept"] + manifest["rejected"], "clean accounting does not close"
    return manifest


def _by_reason(reasons: Counter) -> Counter:
    out: Counter = Counter()
    for (reason, _), n in reasons.items():
        out[reason] += n
    return out
