"""The tokenize stage: plan one part per kept file -> tokenize parts (in parallel, resumable) -> manifest.

Output (complete or absent, see tasks.common.outputs):
    <part>.<channel>.s<source>.<k>.arrow   token shards (format in model/data.py)
    manifest.json                           the dataset's version, shard list and counts
    rule_tokens.parquet                     tokens kept per channel and rejected per cleaning rule
Parts are written to `<out>.parts/` first, so an interrupted stage resumes
without redoing finished parts.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Callable

from model.data import MANIFEST
from pretrain.channels import CHANNELS
from pretrain.config import TokenizeConfig
from tasks.common.outputs import read_json, require_complete, staged_output, write_json
from tasks.common.pool import map_local
from tasks.tokenize.parts import PARTS_LAYOUT, QUALITIES, PartSettings, PartSpec, tokenize_part, tokenizer_at
from tasks.tokenize.rejects import RULE_TOKENS, RejectSpec, count_rejected, plan_rejects, write_rule_tokens
from tasks.tokenizer.train import file_sha256, load_tokenizer

PartRunner = Callable[[TokenizeConfig, list[PartSpec], PartSettings, Path], list[dict]]


def work_dir_for(out_dir: Path) -> Path:
    return out_dir.parent / f"{out_dir.name}.parts"


def source_names(clean_dir: Path) -> list[str]:
    names = sorted(read_json(clean_dir / "manifest.json")["docs_by_source"])
    if len(names) > 65535:
        raise ValueError(f"{len(names)} sources; token shards address at most 65535 (uint16); merge sources")
    return names


def prepare(cfg: TokenizeConfig, clean_dir: Path, tokenizer_dir: Path, out_dir: Path
            ) -> tuple[list[PartSpec], PartSettings, Path]:
    """One part per kept Parquet file, fingerprinted by input, tokenizer and settings."""
    require_complete(clean_dir, "clean")
    load_tokenizer(tokenizer_dir)  # fails here, before any work, when the tokenizer is missing or incomplete
    tokenizer_json = Path(tokenizer_dir).resolve() / "tokenizer.json"
    tokenizer_hash = file_sha256(tokenizer_json)
    encoder, why = encoder_choice(cfg, tokenizer_dir, tokenizer_hash)
    settings = PartSettings(str(tokenizer_json), tokenizer_hash, cfg.shard_max_tokens, cfg.batch_docs,
                            encoder == "tiktoken", why)
    source_ids = {name: i for i, name in enumerate(source_names(clean_dir))}
    specs = []
    for path in sorted((clean_dir / "kept").glob("*.parquet")):
        digest = file_sha256(path)
        key = json.dumps([digest, tokenizer_hash, cfg.shard_max_tokens, source_ids, PARTS_LAYOUT], sort_keys=True)
        specs.append(PartSpec(str(path.resolve()), digest, path.stem, hashlib.sha256(key.encode()).hexdigest(), source_ids))
    work_dir = work_dir_for(Path(out_dir))
    work_dir.mkdir(parents=True, exist_ok=True)
    return specs, settings, work_dir


def encoder_choice(cfg: TokenizeConfig, tokenizer_dir: Path, tokenizer_hash: str) -> tuple[str, str]:
    """(encoder, why): tiktoken only where the tokenizer stage proved it equal to HF for this very file."""
    if cfg.encoder == "tokenizers":
        return "tokenizers", "tokenize.encoder: tokenizers"
    report = read_json(Path(tokenizer_dir) / "report.json")
    proof = report.get("fast_encoding") or {"reason": "the tokenizer stage predates the equivalence check"}
    if report.get("tokenizer_sha256") != tokenizer_hash:
        return "tokenizers", "tokenizer.json changed after its report was written"
    if proof.get("encoder") != "tiktoken":
        return "tokenizers", f"not proven equal: {proof.get('reason')}"
    return "tiktoken", (f"proven equal: 0 of {proof['compared']:,} strings differ ({proof['random_strings']:,} random, "
                        f"{proof['texts']:,} held-out texts)")


def plan_reject_counts(cfg: TokenizeConfig, clean_dir: Path, settings: PartSettings) -> list[RejectSpec]:
    if not cfg.count_rejected_tokens:
        return []
    return plan_rejects(clean_dir, settings.tokenizer_sha256, file_sha256)


def run_parts_locally(cfg: TokenizeConfig, specs: list[PartSpec], settings: PartSettings, work_dir: Path) -> list[dict]:
    # spawn, not fork: a forked child of a process that used the tokenizer's thread
    # pool runs single-threaded (tokenizers disables it after fork)
    return map_local(tokenize_part, [(spec, settings, work_dir) for spec in specs], cfg.executor.workers,
                     "tokenize", "parts", spawn=True, initializer=_one_thread_each)


def count_rejects_locally(cfg: TokenizeConfig, specs: list[RejectSpec], settings: PartSettings,
                          work_dir: Path) -> list[dict]:
    return map_local(count_rejected, [(spec, settings, work_dir) for spec in specs], cfg.executor.workers,
                     "count rejected tokens", "files", spawn=True, initializer=_one_thread_each)


def _one_thread_each() -> None:
    # the pool already has a process per core; a thread pool in each would oversubscribe them
    os.environ["RAYON_NUM_THREADS"] = "1"


def complete(cfg: TokenizeConfig, specs: list[PartSpec], metas: list[dict], settings: PartSettings,
             clean_dir: Path, work_dir: Path, out_dir: Path, counted: list[dict] | None = None) -> dict:
    """Move every part's shards into the output with the manifest and rule token counts, then drop the scratch."""
    with staged_output(out_dir) as tmp:
        shards = []
        for spec, meta in zip(specs, metas):
            for shard in meta["shards"]:
                os.replace(work_dir / spec.part_id / shard["file"], tmp / shard["file"])
                shards.append({**shard, "input": Path(spec.input).name})
        manifest = build_manifest(cfg, shards, settings, clean_dir, specs)
        if counted is not None:
            manifest["rejected_tokens_by_rule"] = write_rule_tokens(tmp / RULE_TOKENS, manifest, counted)
        write_json(tmp / MANIFEST, manifest)
    shutil.rmtree(work_dir, ignore_errors=True)
    return manifest


def build_manifest(cfg: TokenizeConfig, shards: list[dict], settings: PartSettings, clean_dir: Path,
                   specs: list[PartSpec]) -> dict:
    names = source_names(clean_dir)
    _, eos, vocab = tokenizer_at(settings.tokenizer_json)
    manifest = {
        "format": 2,
        "shards": shards,
        "total_tokens": sum(s["tokens"] for s in shards),
        "total_docs": sum(s["docs"] for s in shards),
        "tokens_by_channel": _sum_by(shards, "channel", "tokens"),
        "docs_by_channel": _sum_by(shards, "channel", "docs"),
        "tokens_by_source": {names[k]: v for k, v in _sum_by(shards, "source_id", "tokens").items()},
        "docs_by_source": {names[k]: v for k, v in _sum_by(shards, "source_id", "docs").items()},
        "tokens_by_quality": _sum_by(shards, "quality", "tokens"),
        "docs_by_quality": _sum_by(shards, "quality", "docs"),
        "channels": list(CHANNELS),
        "sources": names,
        "qualities": list(QUALITIES),
        "vocab_size": vocab,
        "eos_id": eos,
        "tokenizer_sha256": settings.tokenizer_sha256,
        "encoder": {"used": "tiktoken" if settings.fast else "tokenizers", "why": settings.encoder_reason},
        "config_sha256": hashlib.sha256(json.dumps({"shard_max_tokens": cfg.shard_max_tokens}).encode()).hexdigest(),
        "input_sha256": {Path(s.input).name: s.input_sha256 for s in specs},
    }
    manifest["version"] = hashlib.sha256(json.dumps(
        [manifest["tokenizer_sha256"], manifest["config_sha256"], manifest["input_sha256"]],
        sort_keys=True).encode()).hexdigest()[:16]
    return manifest


def _sum_by(rows: list[dict], key: str, value: str) -> dict:
    out: dict = {}
    for row in rows:
        out[row[key]] = out.get(row[key], 0) + row[value]
    return out


def run_tokenize(cfg: TokenizeConfig, clean_dir: Path, tokenizer_dir: Path, out_dir: Path,
                 run_parts: PartRunner = run_parts_locally) -> dict:
    specs, settings, work_dir = prepare(cfg, Path(clean_dir), Path(tokenizer_dir), Path(out_dir))
    metas = run_parts(cfg, specs, settings, work_dir)
    rejects = plan_reject_counts(cfg, Path(clean_dir), settings)
    counted = count_rejects_locally(cfg, rejects, settings, work_dir) if cfg.count_rejected_tokens else None
    return complete(cfg, specs, metas, settings, Path(clean_dir), work_dir, Path(out_dir), counted)
