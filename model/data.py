"""Token shards on disk, the addressable sample dataset, and the resumable sampler.

Shard format (written by tasks/tokenize.py, read here): one Arrow IPC file per
shard holding one record batch, one row per document:
    tokens:  list<uint16|uint32>  the document's token ids, EOS appended
    channel: uint8                index into CHANNELS
    source:  uint16               index into the manifest's `sources`
The token stream is all shards' tokens concatenated in manifest order. Sample i
is stream[i*L : i*L + L + 1] for L = seq_len: inputs and shifted targets.
"""
from __future__ import annotations

import bisect
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

CHANNELS = ("zh", "en", "code", "other")
MANIFEST = "manifest.json"


def token_type(vocab_size: int) -> pa.DataType:
    return pa.uint16() if vocab_size <= 65535 else pa.uint32()


def shard_schema(vocab_size: int) -> pa.Schema:
    return pa.schema([("tokens", pa.list_(token_type(vocab_size))),
                      ("channel", pa.uint8()), ("source", pa.uint16())])


@dataclass
class Shard:
    tokens: np.ndarray       # flat token ids (memory-mapped)
    doc_offsets: np.ndarray  # len(docs)+1 offsets into tokens
    channels: np.ndarray     # per document
    sources: np.ndarray      # per document


class ShardError(ValueError):
    """A token shard that is missing or not a readable shard file."""


def open_shard(path: Path) -> Shard:
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
    except (OSError, pa.ArrowInvalid) as err:
        raise ShardError(f"token shard {path} cannot be read ({err}); re-run `pretrain tokenize --config ...`") from None
    if reader.num_record_batches != 1:
        raise ShardError(f"{path}: expected 1 record batch, found {reader.num_record_batches}; rewrite it with `pretrain tokenize`")
    batch = reader.get_batch(0)
    col = batch.column("tokens")
    offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    values = col.values.to_numpy(zero_copy_only=True)
    base = offsets[0]
    return Shard(values[base:offsets[-1]], offsets - base,
                 batch.column("channel").to_numpy(), batch.column("source").to_numpy())


def read_manifest(tokens_dir: Path) -> dict:
    path = Path(tokens_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `pretrain tokenize --config ...` first")
    return json.loads(path.read_text())


class TokenDataset:
    """Fixed-length packed samples with O(1) `__getitem__` over memory-mapped shards.

    The sample index (shard, offset in shard) of every sample's first token is
    precomputed once, so item access and resume cost the same at any position.
    """

    def __init__(self, tokens_dir: str | Path, seq_len: int):
        self.dir, self.seq_len = Path(tokens_dir), seq_len
        self.manifest = read_manifest(self.dir)
        self.shards = [open_shard(self.dir / s["file"]) for s in self.manifest["shards"]]
        sizes = np.array([len(s.tokens) for s in self.shards], dtype=np.int64)
        self.shard_starts = np.concatenate([[0], np.cumsum(sizes)])
        self.total_tokens = int(self.shard_starts[-1])
        self.num_samples = max(0, (self.total_tokens - 1) // seq_len)
        if self.num_samples == 0:
            raise ValueError(f"{self.dir} holds {self.total_tokens} tokens, fewer than one sample of "
                             f"seq_len+1={seq_len + 1}; add data or lower train.seq_len")
        starts = np.arange(self.num_samples, dtype=np.int64) * seq_len
        self.sample_shard = np.searchsorted(self.shard_starts, starts, side="right") - 1
        self.sample_offset = starts - self.shard_starts[self.sample_shard]

    def __len__(self) -> int:
        return self.num_samples

    def _span(self, shard: int, offset: int, length: int) -> list[tuple[int, int, int]]:
        """(shard, start, stop) pieces covering `length` tokens from (shard, offset)."""
        pieces = []
        while length > 0:
            take = min(length, len(self.shards[shard].tokens) - offset)
            pieces.append((shard, offset, offset + take))
            length -= take
            shard, offset = shard + 1, 0
        return pieces

    def __getitem__(self, i: int) -> dict:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range [0, {self.num_samples})")
        pieces = self._span(int(self.sample_shard[i]), int(self.sample_offset[i]), self.seq_len + 1)
        tokens = np.concatenate([self.shards[s].tokens[a:b] for s, a, b in pieces]).astype(np.int64)
        channels = np.concatenate([self._token_channels(s, a, b) for s, a, b in pieces])
        return {"tokens": tokens, "channels": channels}

    def _token_channels(self, shard: int, start: int, stop: int) -> np.ndarray:
        sh = self.shards[shard]
        first = bisect.bisect_right(sh.doc_offsets, start) - 1
        last = bisect.bisect_right(sh.doc_offsets, stop - 1) - 1
        bounds = np.clip(sh.doc_offsets[first:last + 2], start, stop) - start
        return np.repeat(sh.channels[first:last + 1], np.diff(bounds)).astype(np.int64)

    def documents_of(self, i: int) -> list[dict]:
        """The documents (shard, row, source name) that sample i draws tokens from."""
        pieces = self._span(int(self.sample_shard[i]), int(self.sample_offset[i]), self.seq_len + 1)
        names = self.manifest["sources"]
        out = []
        for s, a, b in pieces:
            sh = self.shards[s]
            for row in range(bisect.bisect_right(sh.doc_offsets, a) - 1, bisect.bisect_right(sh.doc_offsets, b - 1)):
                out.append({"shard": s, "row": row, "source": names[int(sh.sources[row])]})
        return out


@dataclass
class SamplerState:
    """The whole data position: independent of world size and worker count."""

    consumed_samples: int = 0
    skipped: list[tuple[int, int]] = field(default_factory=list)  # [start, end) in position space

    def to_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples, "skipped": [list(r) for r in self.skipped]}

    @classmethod
    def from_dict(cls, d: dict) -> "SamplerState":
        return cls(int(d["consumed_samples"]), [tuple(r) for r in d.get("skipped", [])])


class GlobalSampler:
    """A seeded permutation per epoch over the sample index; position p -> sample id.

    Every rank computes the same global order; a global batch is the next
    `global_batch` positions, of which rank r takes its contiguous slice.
    """

    def __init__(self, num_samples: int, seed: int, state: SamplerState | None = None):
        self.n, self.seed = num_samples, seed
        self.state = state or SamplerState()
        self._perm_epoch, self._perm = -1, None

    def sample_at(self, position: int) -> int:
        epoch, k = divmod(position, self.n)
        if epoch != self._perm_epoch:
            self._perm = np.random.default_rng([self.seed, epoch]).permutation(self.n)
            self._perm_epoch = epoch
        return int(self._perm[k])

    def _skip(self, position: int) -> int:
        for start, end in sorted(self.state.skipped):
            if start <= position < end:
                position = end
        return position

    def next_global_batch(self, global_batch: int) -> list[int]:
        """Sample ids of the next global batch; advances consumed_samples past skipped ranges."""
        ids, pos = [], self.state.consumed_samples
        while len(ids) < global_batch:
            pos = self._skip(pos)
            ids.append(self.sample_at(pos))
            pos += 1
        self.state.consumed_samples = pos
        return ids


def rank_slice(batch: list[int], rank: int, world_size: int) -> list[int]:
    per_rank = len(batch) // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]
