"""The clean stage: sources -> kept / rejected Parquet parts, per-rule stats, review samples, manifest."""
from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pretrain.config import CleanConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.normalize import normalize_text, to_simplified
from tasks.clean.readers import RawDoc, UnreadableFile, expand_source, iter_source
from tasks.clean.rules import Doc, Failure, build_rules, judge_rules
from tasks.clean.rules.english import c4_filter_lines
from tasks.common.outputs import staged_output, write_json
from tasks.common.progress import Progress

SCORES = pa.map_(pa.string(), pa.float32())
KEPT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                         ("text", pa.string()), ("repairs", pa.list_(pa.string())),
                         ("flags", pa.list_(pa.string())), ("scores", SCORES)])
REJECT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                           ("text", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                           ("score", pa.float64()), ("flags", pa.list_(pa.string())), ("scores", SCORES)])
STATS_SCHEMA = pa.schema([("outcome", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                          ("channel", pa.string()), ("docs", pa.int64()), ("chars", pa.int64())])


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


class Verdict:
    def __init__(self, text: str, channel: str, failure: Failure | None, flags: list[str],
                 scores: dict[str, float], repairs: list[str]):
        self.text, self.channel, self.failure = text, channel, failure
        self.flags, self.scores, self.repairs = flags, scores, repairs


class Cleaner:
    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.rules = build_rules(cfg.rules)
        self.seen: set[bytes] = set()

    def prepare(self, raw: RawDoc) -> tuple[str, str, list[str]]:
        """Normalize, tag the channel, and apply the text-editing steps (t2s, C4 line filters)."""
        text, repairs = normalize_text(raw.text, self.cfg.normalize, keep_indentation=raw.channel_hint == "code")
        channel = detect_channel(DocFeatures(text), raw.channel_hint) if text.strip() else "other"
        if channel == "zh" and self.cfg.normalize.traditional_to_simplified:
            simplified = to_simplified(text)
            if simplified != text:
                text, repairs = simplified, repairs + ["traditional_to_simplified"]
        if channel == "en" and self.cfg.rules.c4.mode == "drop":
            filtered, _ = c4_filter_lines(text, self.cfg.rules.c4)
            if filtered != text:
                text, repairs = filtered, repairs + ["c4_lines_removed"]
        return text, channel, repairs

    def judge(self, raw: RawDoc) -> Verdict:
        if raw.problem:
            return Verdict(raw.text, "other", Failure("input", raw.problem, 0.0), [], {}, [])
        length = self.cfg.rules.length
        if length.mode == "drop" and len(raw.text) > length.max_chars:
            # judged on the raw text: normalizing a 50 MB line first would cost seconds for nothing
            return Verdict(raw.text, "other", Failure("length", "too_long", float(len(raw.text))), [], {}, [])
        text, channel, repairs = self.prepare(raw)
        repairs = ([raw.repaired] if raw.repaired else []) + repairs
        if not text.strip():
            emptied = Failure("c4", "c4_all_lines_removed", 0.0) if "c4_lines_removed" in repairs \
                else Failure("length", "empty_after_normalization", 0.0)
            return Verdict(text, channel, emptied, [], {}, repairs)
        result = judge_rules(self.rules, Doc(text, channel, DocFeatures(text)))
        failure = result.failure
        if failure is None and channel not in self.cfg.keep_channels:
            failure = Failure("channel", "unsupported_language", 0.0)
        if failure is None:
            digest = hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()
            if digest in self.seen:
                failure = Failure("dedup", "exact_duplicate", 1.0)
            self.seen.add(digest)
        return Verdict(text, channel, failure, result.flags, result.scores, repairs)


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

    def total(self, outcome: str) -> int:
        return sum(n for (o, *_), n in self.counts.items() if o == outcome)

    def by(self, outcome: str, field: int) -> dict[str, int]:
        out: Counter = Counter()
        for key, n in self.counts.items():
            if key[0] == outcome:
                out[key[field]] += n
        return dict(out)


def check_sources(cfg: CleanConfig) -> None:
    """Fail before writing anything when a source names nothing."""
    for source in cfg.sources:
        expand_source(source)


def run_clean(cfg: CleanConfig, out_dir: Path) -> dict:
    check_sources(cfg)
    cleaner = Cleaner(cfg)
    unreadable: list[UnreadableFile] = []
    tally = Tally(cfg.reject_samples_per_reason)
    per_source: Counter = Counter()
    repaired: Counter = Counter()
    with staged_output(out_dir) as tmp:
        kept = PartWriter(tmp / "kept", KEPT_SCHEMA, cfg.batch_size)
        rejects = PartWriter(tmp / "rejects", REJECT_SCHEMA, cfg.batch_size)
        progress = Progress("clean", "docs")
        for source in cfg.sources:
            for raw in iter_source(source, unreadable):
                progress.add()
                per_source[source.source_name] += 1
                v = cleaner.judge(raw)
                repaired.update(v.repairs)
                row = {"id": raw.doc_id, "source": raw.source, "channel": v.channel, "text": v.text,
                       "flags": v.flags, "scores": v.scores}
                if v.failure:
                    row.update(rule=v.failure.rule, reason=v.failure.reason, score=v.failure.score)
                    rejects.add(row)
                    tally.add("rejected", v.failure.rule, v.failure.reason, v.channel, v.text, row)
                else:
                    kept.add({**row, "repairs": v.repairs})
                    tally.add("kept", "", "kept", v.channel, v.text)
                for flag in v.flags:
                    rule, _, reason = flag.partition(":")
                    tally.add("tagged", rule, reason, v.channel, v.text)
        kept.flush()
        rejects.flush()
        progress.done()
        pq.write_table(pa.Table.from_pylist(tally.rows(), schema=STATS_SCHEMA), tmp / "stats.parquet")
        samples = [r for rows in tally.samples.values() for r in rows]
        pq.write_table(pa.Table.from_pylist(samples, schema=REJECT_SCHEMA), tmp / "samples.parquet")
        manifest = {
            "docs_in": sum(per_source.values()),
            "kept": tally.total("kept"),
            "rejected": tally.total("rejected"),
            "kept_by_channel": tally.by("kept", 3),
            "rejected_by_reason": tally.by("rejected", 2),
            "rejected_by_rule": tally.by("rejected", 1),
            "tagged_by_reason": tally.by("tagged", 2),
            "docs_by_source": dict(per_source),
            "repairs": dict(repaired),
            "unreadable_files": [vars(u) for u in unreadable],
        }
        if manifest["docs_in"] != manifest["kept"] + manifest["rejected"]:
            raise AssertionError(f"clean accounting does not close: {manifest}")
        write_json(tmp / "manifest.json", manifest)
    return manifest
