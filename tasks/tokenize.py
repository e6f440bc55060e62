"""Tokenize stage: cleaned Parquet -> Arrow IPC token shards + manifest."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds

from model.data import CHANNELS, MANIFEST, shard_schema
from pretrain.config import TokenizeConfig
from tasks.common.outputs import require_complete, staged_output, write_json
from tasks.common.progress import Progress
from tasks.tokenizer import EOS, file_sha256, load_tokenizer


class ShardWriter:
    def __init__(self, folder: Path, vocab_size: int, max_tokens: int):
        self.folder, self.max_tokens = folder, max_tokens
        self.schema = shard_schema(vocab_size)
        self.np_dtype = np.uint16 if self.schema.field("tokens").type.value_type == pa.uint16() else np.uint32
        self.docs: list[np.ndarray] = []
        self.channels: list[int] = []
        self.sources: list[int] = []
        self.n_tokens = 0
        self.shards: list[dict] = []

    def add(self, ids: list[int], channel: int, source: int) -> None:
        self.docs.append(np.asarray(ids, dtype=self.np_dtype))
        self.channels.append(channel)
        self.sources.append(source)
        self.n_tokens += len(ids)
        if self.n_tokens >= self.max_tokens:
            self.flush()

    def flush(self) -> None:
        if not self.docs:
            return
        offsets = np.concatenate([[0], np.cumsum([len(d) for d in self.docs])]).astype(np.int32)
        values = pa.array(np.concatenate(self.docs), type=self.schema.field("tokens").type.value_type)
        batch = pa.record_batch([pa.ListArray.from_arrays(pa.array(offsets), values),
                                 pa.array(self.channels, pa.uint8()), pa.array(self.sources, pa.uint16())],
                                schema=self.schema)
        name = f"shard-{len(self.shards):05d}.arrow"
        with pa.OSFile(str(self.folder / name), "wb") as sink, pa.ipc.new_file(sink, self.schema) as writer:
            writer.write_batch(batch)
        self.shards.append({"file": name, "docs": len(self.docs), "tokens": int(self.n_tokens)})
        self.docs, self.channels, self.sources, self.n_tokens = [], [], [], 0


def input_hashes(kept_dir: Path) -> dict[str, str]:
    return {p.name: file_sha256(p) for p in sorted(kept_dir.glob("*.parquet"))}


def run_tokenize(cfg: TokenizeConfig, clean_dir: Path, tokenizer_dir: Path, out_dir: Path) -> dict:
    require_complete(clean_dir, "clean")
    tok = load_tokenizer(tokenizer_dir)
    eos = tok.token_to_id(EOS)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    dataset = ds.dataset(clean_dir / "kept", format="parquet")
    sources: dict[str, int] = {}
    tokens_by_channel: dict[str, int] = {}
    docs_by_channel: dict[str, int] = {}
    with staged_output(out_dir) as tmp:
        writer = ShardWriter(tmp, vocab, cfg.shard_max_tokens)
        progress = Progress("tokenize", "docs")
        for batch in dataset.to_batches(columns=["text", "channel", "source"], batch_size=cfg.batch_docs):
            texts, chans, srcs = (batch.column(c).to_pylist() for c in ("text", "channel", "source"))
            for enc, channel, source in zip(tok.encode_batch(texts, add_special_tokens=False), chans, srcs):
                ids = enc.ids + [eos]
                channel = channel if channel in CHANNELS else "other"
                writer.add(ids, CHANNELS.index(channel), sources.setdefault(source, len(sources)))
                tokens_by_channel[channel] = tokens_by_channel.get(channel, 0) + len(ids)
                docs_by_channel[channel] = docs_by_channel.get(channel, 0) + 1
            progress.add(len(texts))
        writer.flush()
        progress.done()
        manifest = {
            "shards": writer.shards,
            "total_tokens": sum(s["tokens"] for s in writer.shards),
            "total_docs": sum(s["docs"] for s in writer.shards),
            "tokens_by_channel": tokens_by_channel,
            "docs_by_channel": docs_by_channel,
            "channels": list(CHANNELS),
            "sources": list(sources),
            "vocab_size": vocab,
            "eos_id": eos,
            "tokenizer_sha256": file_sha256(tokenizer_dir / "tokenizer.json"),
            "config_sha256": hashlib.sha256(json.dumps(cfg.model_dump(), sort_keys=True).encode()).hexdigest(),
            "input_sha256": input_hashes(clean_dir / "kept"),
        }
        manifest["version"] = hashlib.sha256(json.dumps(
            [manifest["tokenizer_sha256"], manifest["config_sha256"], manifest["input_sha256"]],
            sort_keys=True).encode()).hexdigest()[:16]
        write_json(tmp / MANIFEST, manifest)
    return manifest
