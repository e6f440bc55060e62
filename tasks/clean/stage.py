"""The clean stage: plan shards -> clean each (in parallel, resumable) -> global dedup -> final parts.

Output (complete or absent, see tasks.common.outputs):
    kept/part-<shard>.parquet      documents kept, with repairs, tag-mode flags and scores
    rejects/part-<shard>.parquet   documents rejected, with rule, reason and score
    stats.parquet                  documents and characters per (outcome, rule, reason, channel)
    samples.parquet                up to N rejected documents per reason, for review
    manifest.json                  counts (in = kept + rejected), unreadable files, repairs
"""
from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Callable

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pretrain.config import CleanConfig
from tasks.clean.dedup import find_duplicates
from tasks.clean.reference import with_reference
from tasks.clean.shards import ShardSpec, clean_shard, plan_shards
from tasks.clean.tally import KEPT_SCHEMA, REJECT_SCHEMA, STATS_SCHEMA, Tally
from tasks.common.outputs import read_json, staged_output, write_json
from tasks.common.pool import map_local

ShardRunner = Callable[[CleanConfig, list[ShardSpec], Path], list[dict]]


def work_dir_for(out_dir: Path) -> Path:
    # beside the output, kept across attempts so finished shards are not redone
    return out_dir.parent / f"{out_dir.name}.shards"


def run_shards_locally(cfg: CleanConfig, specs: list[ShardSpec], work_dir: Path) -> list[dict]:
    return map_local(clean_shard, [(cfg, spec, work_dir) for spec in specs], cfg.executor.workers, "clean", "shards")


def _reject_rows_for(kept: pa.Table, rows: list[int], dups: dict[int, tuple[str, int]], base: int) -> list[dict]:
    out = []
    for r in rows:
        reason, survivor = dups[base | r]
        row = {k: kept.column(k)[r].as_py() for k in ("id", "source", "channel", "text", "flags", "scores")}
        out.append({**row, "rule": "dedup", "reason": reason, "score": float(survivor)})
    return out


def write_final_parts(tmp: Path, work_dir: Path, specs: list[ShardSpec], dups: dict, tally: Tally) -> None:
    """Stream shard by shard: kept minus duplicates; rejects plus duplicates."""
    (tmp / "kept").mkdir()
    (tmp / "rejects").mkdir()
    for spec in specs:
        shard = work_dir / spec.shard_id
        kept = pq.read_table(shard / "kept.parquet")
        base = spec.index << 32
        dup_rows = sorted(d - base for d in dups if (d >> 32) == spec.index)
        mask = pa.array([True] * kept.num_rows, type=pa.bool_())
        if dup_rows:
            mask = pc.invert(pc.is_in(pa.array(range(kept.num_rows)), value_set=pa.array(dup_rows)))
        survivors = kept.filter(mask).select(KEPT_SCHEMA.names).cast(KEPT_SCHEMA)
        pq.write_table(survivors, tmp / "kept" / f"part-{spec.shard_id}.parquet", compression="zstd")
        for channel, text in zip(survivors.column("channel").to_pylist(), survivors.column("text").to_pylist()):
            tally.add("kept", "", "kept", channel, text)
        extra = _reject_rows_for(kept, dup_rows, dups, base)
        for row in extra:
            tally.add("rejected", "dedup", row["reason"], row["channel"], row["text"], row)
        rejects = pq.read_table(shard / "rejects.parquet")
        if extra:
            rejects = pa.concat_tables([rejects, pa.Table.from_pylist(extra, schema=REJECT_SCHEMA)])
        pq.write_table(rejects, tmp / "rejects" / f"part-{spec.shard_id}.parquet", compression="zstd")


def finalize(cfg: CleanConfig, specs: list[ShardSpec], metas: list[dict], work_dir: Path, out_dir: Path) -> dict:
    dups = find_duplicates(work_dir, {s.shard_id: s.index for s in specs}, cfg.dedup)
    tally = Tally(cfg.reject_samples_per_reason)
    for spec in specs:
        data = read_json(work_dir / spec.shard_id / "tally.json")
        data["rows"] = [r for r in data["rows"] if r["outcome"] != "kept"]  # kept is recounted after dedup
        tally.merge(data)
    with staged_output(out_dir) as tmp:
        write_final_parts(tmp, work_dir, specs, dups, tally)
        pq.write_table(pa.Table.from_pylist(tally.rows(), schema=STATS_SCHEMA), tmp / "stats.parquet")
        samples = [r for rows in tally.samples.values() for r in rows]
        pq.write_table(pa.Table.from_pylist(samples, schema=REJECT_SCHEMA), tmp / "samples.parquet")
        manifest = build_manifest(cfg, metas, tally)
        if manifest["docs_in"] != manifest["kept"] + manifest["rejected"]:
            raise AssertionError(f"clean accounting does not close: {manifest}")
        write_json(tmp / "manifest.json", manifest)
    return manifest


def build_manifest(cfg: CleanConfig, metas: list[dict], tally: Tally) -> dict:
    repairs, lines_removed, by_source, rejected_by_source = Counter(), Counter(), Counter(), Counter()
    for m in metas:
        repairs.update(m["repairs"])
        lines_removed.update(m.get("lines_removed", {}))  # a shard reused from before line counts has none
        by_source[m["source"]] += m["docs"]
        rejected_by_source[m["source"]] += m["rejected"]
    return {
        "docs_in": sum(m["docs"] for m in metas),
        "kept": tally.total("kept"),
        "rejected": tally.total("rejected"),
        "kept_by_channel": tally.by("kept", 3),
        "rejected_by_reason": tally.by("rejected", 2),
        "rejected_by_rule": tally.by("rejected", 1),
        "tagged_by_reason": tally.by("tagged", 2),
        "docs_by_source": dict(by_source),
        "rejected_by_source": dict(rejected_by_source),  # by the rules (dedup comes after)
        "source_rules": {s.source_name: s.rules for s in cfg.sources if s.rules},  # over clean.rules
        "repairs": dict(repairs),
        "lines_removed": dict(sorted(lines_removed.items())),  # by the rules' line filters, in documents kept or not
        "shards": len(metas),
        "shards_skipped": sum(bool(m.get("skipped")) for m in metas),
        "unreadable_files": [u for m in metas for u in m.get("unreadable") or []],
        # every shard read the same eval sets and learned the same model; a reused shard carries its own run's report
        "decontamination": decontamination_report(cfg, tally, next((m["eval_sets"] for m in metas
                                                                     if m.get("eval_sets")), {})),
        "classifier": next((m["classifier"] for m in metas if m.get("classifier")), {}),
    }


def decontamination_report(cfg: CleanConfig, tally: Tally, checked: dict) -> dict:
    """Per eval set: what was checked (items, and those too short for one window: `checked`, as the shards' workers
    read them) and the documents it removed."""
    rules = cfg.rules.decontam
    if rules.mode == "off":
        return {}
    removed = tally.by("rejected" if rules.mode == "drop" else "tagged", 2)
    count = "rejected_docs" if rules.mode == "drop" else "tagged_docs"
    return {s.name: {**checked[s.name], count: removed.get(f"eval_overlap_{s.name}", 0)} for s in rules.eval_sets}


def prepare(cfg: CleanConfig, out_dir: Path) -> tuple[CleanConfig, list[ShardSpec], Path]:
    """The config the shards run (with the classifier's corpus sample drawn), the shard plan and the scratch
    directory; fails here, before any output, when a source names nothing."""
    specs = plan_shards(cfg)
    work_dir = work_dir_for(Path(out_dir))
    work_dir.mkdir(parents=True, exist_ok=True)
    sampled = with_reference(cfg, work_dir)
    if sampled is not cfg:  # the sample's path is a setting: the shards' fingerprints carry it
        specs = plan_shards(sampled)
    return sampled, specs, work_dir


def complete(cfg: CleanConfig, specs: list[ShardSpec], metas: list[dict], work_dir: Path, out_dir: Path) -> dict:
    """Dedup across shards, write the final output, then drop the scratch shards."""
    for spec, meta in zip(specs, metas):
        meta["source"] = cfg.sources[spec.source_index].source_name
    manifest = finalize(cfg, specs, metas, work_dir, Path(out_dir))
    shutil.rmtree(work_dir, ignore_errors=True)
    return manifest


def run_clean(cfg: CleanConfig, out_dir: Path, run_shards: ShardRunner = run_shards_locally) -> dict:
    cfg, specs, work_dir = prepare(cfg, out_dir)
    return complete(cfg, specs, run_shards(cfg, specs, work_dir), work_dir, out_dir)

