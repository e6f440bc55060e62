"""Per-shard cleaning: a group of input files -> a shard directory that is complete or absent.

A shard is a run of consecutive files of one source (up to clean.shard_max_mb). Its directory holds kept.parquet (with the exact hash
and LSH band hashes that the global dedup step reads), rejects.parquet,
tally.json and meta.json, and is renamed into place with _SUCCESS at the end.
A rerun skips a shard whose _SUCCESS exists and whose fingerprint (input paths,
sizes, modification times, and the cleaning settings) is unchanged, so a crash or
a Prefect retry resumes without redoing finished shards or duplicating output.
"""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from pretrain.config import CleanConfig, SourceConfig
from tasks.clean.judge import Cleaner
from tasks.clean.minhash import MinHasher
from tasks.clean.readers import SourceError, expand_source, iter_files, source_fs
from tasks.clean.tally import REJECT_SCHEMA, Tally
from tasks.common.outputs import is_complete, read_json, staged_output, write_json

KEPT_SHARD_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                               ("text", pa.string()), ("repairs", pa.list_(pa.string())),
                               ("flags", pa.list_(pa.string())), ("scores", pa.map_(pa.string(), pa.float32())),
                               ("hash", pa.binary(16)), ("bands", pa.list_(pa.int64()))])


@dataclass(frozen=True)
class ShardSpec:
    index: int            # global order: dedup keeps the first occurrence in this order
    shard_id: str
    source_index: int
    paths: tuple[str, ...]  # consecutive files of one source, up to clean.shard_max_mb together
    fingerprint: str
    settings: str           # settings_hash of the plan: the same for every shard of a run
    files: str = ""         # the files alone (paths, sizes, modification times): what changed outside the config


def settings_hash(cfg: CleanConfig) -> str:
    relevant = {"normalize": cfg.normalize.model_dump(), "rules": cfg.rules.model_dump(),
                "dedup": cfg.dedup.model_dump(), "keep_channels": cfg.keep_channels,
                "samples": cfg.reject_samples_per_reason, "rule_files": rule_file_stamps(cfg)}
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()[:16]


def rule_file_stamps(cfg: CleanConfig) -> list:
    """Size and modification time of every file the rules read (lists, labeled examples, eval sets): a rerun
    after one of them changed cleans again instead of reusing shards judged by the old contents."""
    dirty = cfg.rules.dirty
    paths = [*dirty.lexicons, *dirty.domain_blocklists, *dirty.patterns, *dirty.classifier_examples,
             *(s.path for s in cfg.rules.decontam.eval_sets)]
    stamps = []
    for path in paths:
        try:
            fs, files = expand_source(SourceConfig(path=path))
        except SourceError:
            stamps.append([path, None, None])  # the rule that reads it names the missing file and its setting
            continue
        for f in files:
            info = fs.info(f)
            stamps.append([f, info.get("size"), str(info.get("mtime") or info.get("LastModified"))])
    return stamps


def plan_shards(cfg: CleanConfig) -> list[ShardSpec]:
    """Every input file of every source, in config order, grouped into shards of up to shard_max_mb.

    Grouping amortizes the per-shard cost (a directory, two Parquet files) over many
    small files; a file larger than the budget is a shard of its own. Fails before
    any work when a source names nothing.
    """
    settings = settings_hash(cfg)
    budget = cfg.shard_max_mb * 1e6
    specs: list[ShardSpec] = []
    for s_idx, source in enumerate(cfg.sources):
        fs, files = expand_source(source)
        group: list[tuple[str, int, str]] = []
        group_size = 0
        for path in files:
            try:
                info = fs.info(path)
            except FileNotFoundError:  # a dangling link: listed as unreadable by the shard that holds it
                info = {"size": 0, "mtime": "missing"}
            size = int(info.get("size") or 0)
            if group and group_size + size > budget:
                specs.append(_spec(len(specs), s_idx, source, group, settings))
                group, group_size = [], 0
            group_size += size
            group.append((path, size, str(info.get("mtime") or info.get("LastModified") or info.get("created"))))
        if group:
            specs.append(_spec(len(specs), s_idx, source, group, settings))
    return specs


def _spec(index: int, source_index: int, source: SourceConfig, group: list[tuple[str, int, str]], settings: str) -> ShardSpec:
    stamp = json.dumps([source.model_dump(), group, settings])
    return ShardSpec(index, f"{index:06d}", source_index, tuple(p for p, _, _ in group),
                     hashlib.sha256(stamp.encode()).hexdigest()[:16], settings,
                     hashlib.sha256(json.dumps(group).encode()).hexdigest()[:16])


@lru_cache(maxsize=4)  # a source with rules of its own has its own cleaner
def _cleaner(cfg_json: str, settings: str) -> tuple[Cleaner, MinHasher]:
    # one set of compiled rules and lexicons per worker process, not per shard; `settings` (the plan's settings_hash,
    # which stamps the files the rules read) rebuilds them when such a file changed between runs of one process
    cfg = CleanConfig.model_validate_json(cfg_json)
    return Cleaner(cfg), MinHasher(cfg.dedup)


def shard_done(work_dir: Path, spec: ShardSpec) -> bool:
    d = work_dir / spec.shard_id
    return is_complete(d) and read_json(d / "meta.json").get("fingerprint") == spec.fingerprint


def judge_into(cleaner: Cleaner, hasher: MinHasher, cfg: CleanConfig, raw, kept_rows: list, reject_rows: list,
               tally: Tally, repairs: Counter, lines_removed: Counter) -> None:
    v = cleaner.judge(raw)
    repairs.update(v.repairs)
    lines_removed.update(v.lines_removed)
    row = {"id": raw.doc_id, "source": raw.source, "channel": v.channel, "text": v.text,
           "flags": v.flags, "scores": v.scores}
    if v.failure:
        row.update(rule=v.failure.rule, reason=v.failure.reason, score=v.failure.score)
        reject_rows.append(row)
        tally.add("rejected", v.failure.rule, v.failure.reason, v.channel, v.text, row)
    else:
        row.update(repairs=v.repairs, hash=hashlib.blake2b(v.text.encode(), digest_size=16).digest(),
                   bands=hasher.band_hashes(v.text, v.channel) if cfg.dedup.near else [])
        kept_rows.append(row)
    for flag in v.flags:
        rule, _, reason = flag.partition(":")
        tally.add("tagged", rule, reason, v.channel, v.text)


def clean_shard(cfg: CleanConfig, spec: ShardSpec, work_dir: Path) -> dict:
    """Clean one shard's files into work_dir/<shard_id>; returns its meta (skips a finished shard)."""
    out = Path(work_dir) / spec.shard_id
    if shard_done(work_dir, spec):
        return {**read_json(out / "meta.json"), "skipped": True}
    cfg = cfg.for_source(spec.source_index)
    cleaner, hasher = _cleaner(cfg.model_dump_json(), spec.settings)
    source: SourceConfig = cfg.sources[spec.source_index]
    tally = Tally(cfg.reject_samples_per_reason)
    kept_rows, reject_rows, unreadable = [], [], []
    docs, repairs, lines_removed = 0, Counter(), Counter()
    cap = 4 * cfg.rules.length.max_chars  # bytes: a document past it is too long, so never read whole
    for raw in iter_files(source_fs(source), spec.paths, source, unreadable, cap):
        docs += 1
        judge_into(cleaner, hasher, cfg, raw, kept_rows, reject_rows, tally, repairs, lines_removed)
    with staged_output(out) as tmp:
        pq.write_table(pa.Table.from_pylist(kept_rows, schema=KEPT_SHARD_SCHEMA), tmp / "kept.parquet", compression="zstd")
        pq.write_table(pa.Table.from_pylist(reject_rows, schema=REJECT_SCHEMA), tmp / "rejects.parquet", compression="zstd")
        write_json(tmp / "tally.json", tally.to_json())
        meta = {"shard_id": spec.shard_id, "paths": list(spec.paths), "fingerprint": spec.fingerprint, "docs": docs,
                "kept": len(kept_rows), "rejected": len(reject_rows), "repairs": dict(repairs),
                "lines_removed": dict(lines_removed),
                "unreadable": [asdict(u) for u in unreadable], "classifier": cleaner.classifier_report(),
                "eval_sets": cleaner.eval_set_report()}
        write_json(tmp / "meta.json", meta)
    return {**meta, "skipped": False}
