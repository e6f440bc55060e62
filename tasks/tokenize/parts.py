"""One tokenize task: a kept Parquet file -> token shards, one series per channel, source and quality.

A document's quality is `clean` when no rule in tag mode flagged it, else the family of the first rule that did:
the mixture can weight those pools (train.data.mixture.by: quality) instead of the clean stage dropping the text.

A part is idempotent: its shards and meta.json are written under a temporary
name and renamed into place, so a retried or resumed stage finds a finished
part (same input file, same tokenizer, same settings) and skips it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tokenizers import Tokenizer

from model.data import shard_schema
from pretrain.channels import CHANNELS
from tasks.clean.rules import RULE_FAMILIES
from tasks.common.outputs import read_json, staged_output, write_json
from tasks.tokenizer.fast_bpe import FastBPE, fast_bpe
from tasks.tokenizer.train import EOS

QUALITIES = ("clean",) + RULE_FAMILIES
QUALITY_INDEX = {name: i for i, name in enumerate(QUALITIES)}
PARTS_LAYOUT = 2  # in each part's fingerprint: 2 splits shards by quality too, so parts of layout 1 are redone


@dataclass(frozen=True)
class PartSpec:
    input: str                # kept Parquet file
    input_sha256: str
    part_id: str              # names the part's folder and shards
    fingerprint: str          # input hash + tokenizer hash + settings: a changed one redoes the part
    source_ids: dict[str, int]


@dataclass(frozen=True)
class PartSettings:
    tokenizer_json: str
    tokenizer_sha256: str
    shard_max_tokens: int
    batch_docs: int
    fast: bool = False        # encode with tiktoken: the tokenizer stage proved it gives this file's ids
    encoder_reason: str = ""


@lru_cache(maxsize=2)
def tokenizer_at(path: str) -> tuple[Tokenizer, int, int]:
    tok = Tokenizer.from_file(path)
    return tok, tok.token_to_id(EOS), tok.get_vocab_size(with_added_tokens=True)


@lru_cache(maxsize=2)
def fast_at(path: str) -> FastBPE:
    fast = fast_bpe(Path(path))
    if isinstance(fast, str):  # the stage checked the report first: this is a changed file or a missing library
        raise ValueError(f"{path} cannot be encoded by tiktoken ({fast}); re-run `pretrain tokenizer --config ...`")
    return fast


class ShardSeries:
    """Documents of one (channel, source, quality), flushed to numbered shards of at most shard_max_tokens tokens.

    Keeping channels, sources and qualities in separate shards lets the reader build its
    mixture pools (by channel, source or quality) from whole shards.
    """

    def __init__(self, folder: Path, part_id: str, key: int, schema: pa.Schema, max_tokens: int):
        self.folder = folder
        self.channel, self.quality, self.source = key >> 24, key >> 16 & 0xFF, key & 0xFFFF
        self.prefix = f"{part_id}.{CHANNELS[self.channel]}.s{self.source}" + (
            f".{QUALITIES[self.quality]}" if self.quality else "")
        self.schema, self.max_tokens = schema, max_tokens
        self.value_type = schema.field("tokens").type.value_type
        self.chunks: list[np.ndarray] = []
        self.lengths: list[np.ndarray] = []
        self.n_tokens = 0
        self.written: list[dict] = []

    def add(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """Append documents, cutting shards at document boundaries once they reach max_tokens."""
        while len(lengths):
            ends = np.cumsum(lengths)
            fit = int(np.searchsorted(ends, self.max_tokens - self.n_tokens, side="right"))
            if fit == 0 and self.n_tokens:
                self.flush()
                continue
            fit = max(fit, 1)  # a document longer than a shard gets a shard of its own
            take = int(ends[fit - 1])
            self.chunks.append(ids[:take])
            self.lengths.append(lengths[:fit])
            self.n_tokens += take
            ids, lengths = ids[take:], lengths[fit:]
            if self.n_tokens >= self.max_tokens or len(lengths):
                self.flush()

    def flush(self) -> None:
        if not self.chunks:
            return
        lengths = np.concatenate(self.lengths)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int32)
        np.cumsum(lengths, out=offsets[1:])
        batch = pa.record_batch([
            pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(self.chunks), type=self.value_type)),
            pa.array(np.full(len(lengths), self.channel, dtype=np.uint8)),
            pa.array(np.full(len(lengths), self.source, dtype=np.uint16))], schema=self.schema)
        name = f"{self.prefix}.{len(self.written):03d}.arrow"
        with pa.OSFile(str(self.folder / name), "wb") as sink, pa.ipc.new_file(sink, self.schema) as writer:
            writer.write_batch(batch)
        self.written.append({"file": name, "channel": CHANNELS[self.channel], "source_id": self.source,
                             "quality": QUALITIES[self.quality],
                             "docs": len(lengths), "tokens": int(offsets[-1]),
                             "bytes": (self.folder / name).stat().st_size})
        self.chunks, self.lengths, self.n_tokens = [], [], 0


def encode(tok: Tokenizer, texts: list[str], eos: int, dtype) -> tuple[np.ndarray, np.ndarray]:
    """All documents' ids with EOS appended, as one flat array, and each document's length."""
    encs = tok.encode_batch_fast(texts, add_special_tokens=False)
    lengths = np.fromiter((len(e.ids) + 1 for e in encs), dtype=np.int64, count=len(encs))
    flat = np.empty(int(lengths.sum()), dtype=dtype)
    ends = np.cumsum(lengths)
    for enc, end, n in zip(encs, ends, lengths):
        flat[end - n:end - 1] = enc.ids
    flat[ends - 1] = eos
    return flat, lengths


def part_done(work_dir: Path, spec: PartSpec) -> bool:
    meta = work_dir / spec.part_id / "meta.json"
    return meta.is_file() and read_json(meta).get("fingerprint") == spec.fingerprint


def tokenize_part(spec: PartSpec, settings: PartSettings, work_dir: Path) -> dict:
    """Tokenize one kept file into work_dir/<part_id>; returns its meta (skips a finished part)."""
    out = Path(work_dir) / spec.part_id
    if part_done(work_dir, spec):
        return {**read_json(out / "meta.json"), "skipped": True}
    tok, eos, vocab = tokenizer_at(settings.tokenizer_json)
    schema = shard_schema(vocab)
    dtype = np.uint16 if schema.field("tokens").type.value_type == pa.uint16() else np.uint32
    with staged_output(out) as tmp:
        series: dict[int, ShardSeries] = {}
        for batch in pq.ParquetFile(spec.input).iter_batches(batch_size=settings.batch_docs,
                                                              columns=["text", "channel", "source", "flags"]):
            texts = batch.column("text").to_pylist()
            fast = fast_at(settings.tokenizer_json).flat(texts, eos, dtype) if settings.fast else None
            flat, lengths = fast if fast is not None else encode(tok, texts, eos, dtype)
            keys = np.array([_channel_index(c) << 24 | _quality_index(f) << 16 | spec.source_ids[s] for c, s, f in
                             zip(*(batch.column(k).to_pylist() for k in ("channel", "source", "flags")))])
            for key, ids, lens in _split_by_key(flat, lengths, keys):
                if key not in series:
                    series[key] = ShardSeries(tmp, spec.part_id, key, schema, settings.shard_max_tokens)
                series[key].add(ids, lens)
        for key in sorted(series):
            series[key].flush()
        meta = {"part_id": spec.part_id, "input": spec.input, "fingerprint": spec.fingerprint,
                "shards": [w for key in sorted(series) for w in series[key].written]}
        write_json(tmp / "meta.json", meta)
    return {**meta, "skipped": False}


def _channel_index(channel: str) -> int:
    return CHANNELS.index(channel) if channel in CHANNELS else CHANNELS.index("other")


def _quality_index(flags: list[str] | None) -> int:
    """0 (clean) without flags, else the index of the first flag's rule family."""
    if not flags:
        return 0
    family = flags[0].partition(":")[0]
    if family not in QUALITY_INDEX:
        raise ValueError(f"a kept document is flagged by {flags[0]!r}, a rule this version does not know; "
                         f"re-run the clean stage (`pretrain clean --config ...`)")
    return QUALITY_INDEX[family]


def _split_by_key(flat: np.ndarray, lengths: np.ndarray, keys: np.ndarray):
    """(key, ids, lengths) per distinct key, documents in input order within a key."""
    if (keys == keys[0]).all():
        yield int(keys[0]), flat, lengths
        return
    ends = np.cumsum(lengths)
    starts = ends - lengths
    for key in np.unique(keys):
        rows = np.flatnonzero(keys == key)
        yield int(key), np.concatenate([flat[starts[r]:ends[r]] for r in rows]), lengths[rows]
