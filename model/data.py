"""Token shards on disk, the addressable sample dataset, and the resumable sampler.

Shard format (written by tasks/tokenize/, read here): one Arrow IPC file per
shard holding one record batch, one row per document, every document of one
channel and one source:
    tokens:  list<uint16|uint32>  the document's token ids, EOS appended
    channel: uint8                index into CHANNELS
    source:  uint16               index into the manifest's `sources`

Pools: the shards are grouped into pools (all shards together, or one pool per
channel or per source). A pool's token stream is its shards' tokens
concatenated in manifest order; its sample k is stream[k*L : k*L + L + 1] for
L = seq_len (inputs and shifted targets, documents packed EOS-separated).
Sample ids are global: pool j's samples follow those of pools 0..j-1.
"""
from __future__ import annotations

import bisect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa

from model.permutation import FeistelPermutation
from model.spec import DataSpec

MANIFEST = "manifest.json"
PoolBy = Literal["all", "channel", "source", "quality"]


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


class DataError(ValueError):
    """Training data that cannot serve this training: fix the data or the settings, retrying will not help."""


class ShardError(DataError):
    """A token shard that is missing, truncated, or disagrees with the manifest."""


def _fix_hint() -> str:
    return "delete the tokens directory and re-run `pretrain tokenize --config ...`"


def open_shard(path: Path, expect: dict | None = None, vocab_size: int | None = None) -> Shard:
    """Memory-map one shard; with `expect` (its manifest entry) check documents and tokens match, with
    `vocab_size` that every id is below it (once per shard: one pass over memory it maps anyway)."""
    try:
        reader = pa.ipc.open_file(pa.memory_map(str(path), "r"))
        if reader.num_record_batches != 1:
            raise ShardError(f"token shard {path}: expected 1 record batch, found {reader.num_record_batches}; {_fix_hint()}")
        batch = reader.get_batch(0)
        col = batch.column("tokens")
        offsets = col.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        values = col.values.to_numpy(zero_copy_only=True)
        channels, sources = batch.column("channel").to_numpy(), batch.column("source").to_numpy()
    except (OSError, pa.ArrowInvalid, KeyError) as err:
        raise ShardError(f"token shard {path} cannot be read ({err}); it is missing, truncated or not a shard: "
                         f"{_fix_hint()}") from None
    base = offsets[0]
    shard = Shard(values[base:offsets[-1]], offsets - base, channels, sources)
    if expect is not None and (len(shard.tokens), len(shard.channels)) != (expect["tokens"], expect["docs"]):
        raise ShardError(f"token shard {path} holds {len(shard.tokens)} tokens in {len(shard.channels)} documents, "
                         f"the manifest says {expect['tokens']} in {expect['docs']}: the file was changed or "
                         f"replaced after tokenization; {_fix_hint()}")
    if vocab_size is not None and len(shard.tokens) and int(shard.tokens.max()) >= vocab_size:
        at = int(np.argmax(shard.tokens >= vocab_size))
        doc = int(np.searchsorted(shard.doc_offsets, at, side="right")) - 1
        raise ShardError(f"token shard {path}: document {doc} holds id {int(shard.tokens[at])}, outside the "
                         f"tokenizer's {vocab_size} ids (past the vocabulary, the model would index padding rows or "
                         f"past its embedding): the shard was written with another tokenizer or changed; "
                         f"{_fix_hint()}")
    return shard


def read_manifest(tokens_dir: Path) -> dict:
    path = Path(tokens_dir) / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; run `pretrain tokenize --config ...` first")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != 2:
        raise ShardError(f"{path} is from an older tokenize stage (format {manifest.get('format', 1)}, expected 2); "
                         f"{_fix_hint()}")
    return manifest


def pool_key(entry: dict, manifest: dict, by: PoolBy) -> str:
    if by == "all":
        return "all"
    if by == "quality":
        if "qualities" not in manifest:
            raise DataError("train.data.mixture.by: quality needs token shards split by quality, which this tokens "
                            f"directory predates; {_fix_hint()}")
        return entry["quality"]
    return entry["channel"] if by == "channel" else manifest["sources"][entry["source_id"]]


@dataclass
class Pool:
    name: str
    shards: list[int]       # indices into the manifest's shard list, in manifest order
    starts: np.ndarray      # token offset of each shard in the pool stream; last = pool tokens
    num_samples: int
    first_id: int = 0       # global id of the pool's sample 0


class TokenDataset:
    """Fixed-length packed samples with O(1) `__getitem__` over memory-mapped shards.

    The sample index is arithmetic: pool-local sample k starts at token k*L of
    the pool stream, and a precomputed table of shard starts per pool maps that
    to (shard, offset) by a binary search over the pool's shards. Access and
    resume cost the same at any position. Shards are opened on first use and
    checked against the manifest then.
    """

    def __init__(self, tokens_dir: str | Path, seq_len: int, pool_by: PoolBy = "all", eval_samples_per_channel: int = 0):
        self.dir, self.seq_len, self.pool_by = Path(tokens_dir), seq_len, pool_by
        self.manifest = read_manifest(self.dir)
        self.entries = self.manifest["shards"]
        self._open: dict[int, Shard] = {}
        self.reserved: dict[int, int] = {}  # shard index -> tokens held out at its end
        self.eval_spans: dict[str, list[tuple[int, int, int]]] = {}
        self.eval_counts: dict[str, int] = {}
        if eval_samples_per_channel:
            self._hold_out(eval_samples_per_channel)
        self.pools = self._build_pools()
        self.num_samples = sum(p.num_samples for p in self.pools)
        if self.num_samples == 0:
            raise DataError(f"{self.dir} holds {self.manifest['total_tokens']} tokens, fewer than one sample of "
                             f"seq_len+1={seq_len + 1} in any pool; add data or lower train.batch.seq_len")
        self.pool_first_ids = np.array([p.first_id for p in self.pools] + [self.num_samples], dtype=np.int64)

    def _hold_out(self, per_channel: int) -> None:
        """Reserve the last samples of each channel's data (at most 10% of it) for eval; training never sees them."""
        for channel in sorted({e["channel"] for e in self.entries}):
            members = [i for i, e in enumerate(self.entries) if e["channel"] == channel]
            total = sum(self.entries[i]["tokens"] for i in members)
            count = min(per_channel, max(0, int(0.1 * total) - 1) // self.seq_len)
            if count == 0:
                continue
            need, spans = count * self.seq_len + 1, []
            for i in reversed(members):
                size = self.entries[i]["tokens"]
                take = min(need, size)
                self.reserved[i] = take
                spans.insert(0, (i, size - take, size))
                need -= take
                if need == 0:
                    break
            self.eval_spans[channel], self.eval_counts[channel] = spans, count

    def eval_tokens(self, channel: str) -> np.ndarray:
        """The held-out token stream of a channel: eval sample j is [j*L, j*L + L + 1)."""
        return np.concatenate([self.shard(s).tokens[a:b] for s, a, b in self.eval_spans[channel]]).astype(np.int64)

    def _build_pools(self) -> list[Pool]:
        members: dict[str, list[int]] = {}
        for index, entry in enumerate(self.entries):
            if self.entries[index]["tokens"] > self.reserved.get(index, 0):
                members.setdefault(pool_key(entry, self.manifest, self.pool_by), []).append(index)
        pools, first = [], 0
        for name in sorted(members):
            sizes = np.array([self.entries[i]["tokens"] - self.reserved.get(i, 0) for i in members[name]], dtype=np.int64)
            starts = np.concatenate([[0], np.cumsum(sizes)])
            n = max(0, int(starts[-1] - 1) // self.seq_len)
            pools.append(Pool(name, members[name], starts, n, first))
            first += n
        return pools

    def __len__(self) -> int:
        return self.num_samples

    def pool_sizes(self) -> dict[str, int]:
        return {p.name: p.num_samples for p in self.pools}

    def shard(self, index: int) -> Shard:
        if index not in self._open:
            self._open[index] = open_shard(self.dir / self.entries[index]["file"], self.entries[index],
                                           self.manifest["vocab_size"])
        return self._open[index]

    def _locate(self, i: int) -> tuple[Pool, int]:
        if not 0 <= i < self.num_samples:
            raise IndexError(f"sample {i} out of range [0, {self.num_samples})")
        pool = self.pools[int(np.searchsorted(self.pool_first_ids, i, side="right")) - 1]
        return pool, i - pool.first_id

    def _span(self, i: int) -> list[tuple[int, int, int]]:
        """(shard index, start, stop) pieces holding sample i's seq_len+1 tokens."""
        pool, k = self._locate(i)
        start = k * self.seq_len
        j = bisect.bisect_right(pool.starts, start) - 1
        offset, length, pieces = start - int(pool.starts[j]), self.seq_len + 1, []
        while length > 0:
            size = int(pool.starts[j + 1] - pool.starts[j])
            take = min(length, size - offset)
            pieces.append((pool.shards[j], offset, offset + take))
            length -= take
            j, offset = j + 1, 0
        return pieces

    def __getitem__(self, i: int) -> dict:
        pieces = self._span(i)
        if len(pieces) == 1:
            s, a, b = pieces[0]
            return {"tokens": self.shard(s).tokens[a:b].astype(np.int64),
                    "channels": self._token_channels(s, a, b)}
        tokens = np.concatenate([self.shard(s).tokens[a:b] for s, a, b in pieces]).astype(np.int64)
        channels = np.concatenate([self._token_channels(s, a, b) for s, a, b in pieces])
        return {"tokens": tokens, "channels": channels}

    def _token_channels(self, index: int, start: int, stop: int) -> np.ndarray:
        sh = self.shard(index)
        if sh.channels[0] == sh.channels[-1]:  # every shard holds one channel
            return np.full(stop - start, sh.channels[0], dtype=np.int64)
        first = bisect.bisect_right(sh.doc_offsets, start) - 1
        last = bisect.bisect_right(sh.doc_offsets, stop - 1) - 1
        bounds = np.clip(sh.doc_offsets[first:last + 2], start, stop) - start
        return np.repeat(sh.channels[first:last + 1], np.diff(bounds)).astype(np.int64)

    def documents_of(self, i: int) -> list[dict]:
        """The documents (shard file, row, source name) that sample i draws tokens from."""
        names = self.manifest["sources"]
        out = []
        for s, a, b in self._span(i):
            sh = self.shard(s)
            for row in range(bisect.bisect_right(sh.doc_offsets, a) - 1, bisect.bisect_right(sh.doc_offsets, b - 1)):
                out.append({"shard": self.entries[s]["file"], "row": row, "source": names[int(sh.sources[row])]})
        return out


@dataclass
class SamplerState:
    """The whole data position: independent of world size and worker count."""

    consumed_samples: int = 0
    skipped: list[tuple[int, int]] = field(default_factory=list)  # [start, end) in position space
    order: str = "feistel"  # how positions map to samples: a position means nothing without it
    decay_from: int | None = None  # where the mixture's decay phase began (a position); None: not (yet)

    def to_dict(self) -> dict:
        return {"consumed_samples": self.consumed_samples, "skipped": [list(r) for r in self.skipped],
                "order": self.order, "decay_from": self.decay_from}

    @classmethod
    def from_dict(cls, d: dict) -> "SamplerState":
        # checkpoints from before the Feistel order record no order: theirs was the materialised shuffle
        return cls(int(d["consumed_samples"]), [tuple(r) for r in d.get("skipped", [])],
                   d.get("order", "numpy_shuffle"), d.get("decay_from"))

    def copy(self) -> "SamplerState":
        return SamplerState(self.consumed_samples, list(self.skipped), self.order, self.decay_from)


def union_of(ranges) -> list[tuple[int, int]]:
    """[start, end) ranges merged where they overlap or touch (skip ranges of several rollbacks may)."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


class BlendSchedule:
    """Which pool each global position draws from, for given sampling weights, in O(1).

    Positions repeat a period of PERIOD slots in which pool j holds round(w_j *
    PERIOD) slots (at least one for any positive weight), spread so that every
    prefix of the period is as close to the weights as possible (the greedy of
    Megatron's blended datasets). Position p is slot p % PERIOD of period
    p // PERIOD, so a pool-local position is a count, not a scan.
    """

    PERIOD = 4096

    def __init__(self, weights: list[float]):
        w = np.asarray(weights, dtype=np.float64)
        if len(w) == 0 or (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"mixture weights {weights} must be non-negative with a positive sum")
        self.counts = self._slot_counts(w / w.sum())
        placed = np.zeros(len(w), dtype=np.int64)
        slots = np.empty(self.PERIOD, dtype=np.int64)
        for t in range(self.PERIOD):
            j = int(np.argmax((t + 1) * self.counts / self.PERIOD - placed))
            slots[t] = j
            placed[j] += 1
        self.slots = slots
        # prefix[t, j]: slots of pool j before slot t of a period
        self.prefix = np.zeros((self.PERIOD + 1, len(w)), dtype=np.int64)
        np.add.at(self.prefix[1:], (np.arange(self.PERIOD), slots), 1)
        self.prefix = np.cumsum(self.prefix, axis=0)

    def _slot_counts(self, w: np.ndarray) -> np.ndarray:
        raw = w * self.PERIOD
        counts = np.floor(raw).astype(np.int64)
        counts[(w > 0) & (counts == 0)] = 1
        for j in np.argsort(-(raw - counts))[: self.PERIOD - counts.sum()]:
            counts[j] += 1
        while counts.sum() > self.PERIOD:  # the minimum-one rule can overshoot; take from the largest
            counts[int(np.argmax(counts))] -= 1
        return counts

    def locate(self, position: int) -> tuple[int, int]:
        """(pool, pool-local position) of a global position."""
        period, t = divmod(position, self.PERIOD)
        j = int(self.slots[t])
        return j, period * int(self.counts[j]) + int(self.prefix[t, j])

    def drawn_before(self, position: int) -> np.ndarray:
        """Per pool, how many of the positions before `position` it holds."""
        period, t = divmod(position, self.PERIOD)
        return period * self.counts + self.prefix[t]

    def shares(self) -> np.ndarray:
        return self.counts / self.PERIOD


DATA_ORDERS = ("feistel", "numpy_shuffle")


class GlobalSampler:
    """Position p -> global sample id: a seeded permutation per pool and epoch, pools blended by weight.

    Every rank computes the same global order; a global batch is the next
    `global_batch` positions, of which rank r takes its contiguous slice. The
    state is consumed_samples plus skipped position ranges, so resuming is
    O(1) and independent of world size. Without weights there is one pool or
    the pools are drawn in proportion to their sizes.

    The permutation is a Feistel network evaluated per position (constant
    memory at any size). "numpy_shuffle", the order of earlier versions, holds
    a shuffled index per pool and epoch in memory; it is kept so runs started
    with it can finish in their own order.
    """

    def __init__(self, pool_sizes: list[int] | int, seed: int, state: SamplerState | None = None,
                 weights: list[float] | None = None, decay_weights: list[float] | None = None):
        self.sizes = [pool_sizes] if isinstance(pool_sizes, int) else list(pool_sizes)
        self.first_ids = np.concatenate([[0], np.cumsum(self.sizes)]).astype(np.int64)
        weights = list(self.sizes) if weights is None else list(weights)
        for key, shares in (("weights", weights), ("decay_weights", decay_weights or [])):
            if any(w > 0 and size == 0 for size, w in zip(self.sizes, shares)):
                raise DataError(f"a pool with positive mixture weight holds no complete sample; "
                                f"drop it from train.data.mixture.{key} or add data")
        self.seed = seed
        self.state = state or SamplerState()
        if self.state.order not in DATA_ORDERS:
            raise DataError(f"unknown data order {self.state.order!r}; known: {DATA_ORDERS}")
        multi = len(self.sizes) > 1
        self.blend = BlendSchedule(weights) if multi else None
        self.decay_blend = BlendSchedule(decay_weights) if multi and decay_weights is not None else None
        self._perms: dict[int, tuple[int, object]] = {}
        self._decay_offsets: tuple[int | None, np.ndarray | None] = (None, None)
        self.last_positions: list[int] = []  # positions of the last global batch (skipped ones left out)

    def _permuted(self, pool: int, q: int) -> int:
        epoch, k = divmod(q, self.sizes[pool])
        cached = self._perms.get(pool)
        if cached is None or cached[0] != epoch:
            cached = (epoch, self._epoch_order(pool, epoch))
            self._perms[pool] = cached
        return int(cached[1](k)) if self.state.order == "feistel" else int(cached[1][k])

    def _epoch_order(self, pool: int, epoch: int):
        if self.state.order == "feistel":
            return FeistelPermutation(self.sizes[pool], self.seed, pool, epoch)
        order = np.arange(self.sizes[pool], dtype=np.int32 if self.sizes[pool] < 2**31 else np.int64)
        np.random.default_rng([self.seed, pool, epoch]).shuffle(order)  # int32: half the memory per rank
        return order

    def start_decay(self) -> None:
        """From the next position on, draw by the decay weights (once: a resumed decay keeps where it began)."""
        if self.decay_blend is not None and self.state.decay_from is None:
            self.state.decay_from = self.state.consumed_samples

    def locate(self, position: int) -> tuple[int, int]:
        """(pool, pool-local position); in the decay phase each pool goes on where the stable phase left it, so
        no sample repeats before its pool's epoch ends."""
        start = self.state.decay_from
        if self.blend is None:
            return 0, position
        if self.decay_blend is None or start is None or position < start:
            return self.blend.locate(position)
        pool, local = self.decay_blend.locate(position - start)
        if self._decay_offsets[0] != start:  # each pool's count at the boundary, once (the boundary is fixed)
            self._decay_offsets = (start, self.blend.drawn_before(start))
        return pool, int(self._decay_offsets[1][pool]) + local

    def sample_at(self, position: int) -> int:
        pool, q = self.locate(position)
        return int(self.first_ids[pool]) + self._permuted(pool, q)

    def drawn(self, start: int, end: int, decay_from: int | None = None) -> np.ndarray:
        """Per pool, the positions in [start, end) it holds, with the decay phase beginning at `decay_from`."""
        if end <= start:
            return np.zeros(len(self.sizes), dtype=np.int64)
        if self.blend is None:
            return np.array([end - start], dtype=np.int64)
        if self.decay_blend is None or decay_from is None or end <= decay_from:
            return self.blend.drawn_before(end) - self.blend.drawn_before(start)
        if start < decay_from:
            return self.drawn(start, decay_from) + self.drawn(decay_from, end, decay_from)
        return self.decay_blend.drawn_before(end - decay_from) - self.decay_blend.drawn_before(start - decay_from)

    def trained(self, start: int, end: int, state: SamplerState) -> np.ndarray:
        """Per pool, the samples trained on in positions [start, end): the skipped ranges left out."""
        counts = self.drawn(start, end, state.decay_from)
        for a, b in union_of(state.skipped):
            counts -= self.drawn(max(a, start), min(b, end), state.decay_from)
        return counts

    def epochs_at(self, position: int, decay_from: int | None = None) -> dict[int, float]:
        """Epochs of each pool consumed by `position`: above 1 means the pool repeats (upsampling)."""
        counts = self.drawn(0, position, decay_from)
        return {j: counts[j] / size for j, size in enumerate(self.sizes) if size}

    def _skip(self, position: int) -> int:
        for start, end in sorted(self.state.skipped):
            if start <= position < end:
                position = end
        return position

    def next_global_batch(self, global_batch: int, decaying: bool = False) -> list[int]:
        """Sample ids of the next global batch (`decaying`: a step of the schedule's decay); advances consumed_samples
        past skipped ranges."""
        if decaying:
            self.start_decay()
        ids, pos, self.last_positions = [], self.state.consumed_samples, []
        while len(ids) < global_batch:
            pos = self._skip(pos)
            ids.append(self.sample_at(pos))
            self.last_positions.append(pos)
            pos += 1
        self.state.consumed_samples = pos
        return ids


def sampler_for(dataset: TokenDataset, seed: int, state: SamplerState | None = None,
                weights: dict[str, float] | None = None, order: str = "feistel",
                decay_weights: dict[str, float] | None = None) -> GlobalSampler:
    """The sampler over a dataset's pools; `weights` (and `decay_weights`, from the decay on) name pools (channels
    or sources) and their shares."""
    names = [p.name for p in dataset.pools]
    state = state or SamplerState(order=order)
    shares = {key: pool_shares(given, names, key, dataset.pool_by)
              for key, given in (("weights", weights), ("decay_weights", decay_weights))}
    return GlobalSampler([p.num_samples for p in dataset.pools], seed, state, shares["weights"],
                         shares["decay_weights"])


def pool_shares(weights: dict[str, float] | None, names: list[str], key: str, pool_by: str) -> list[float] | None:
    if weights is None:
        return None
    unknown = sorted(set(weights) - set(names))
    if unknown:
        raise DataError(f"train.data.mixture.{key} names {unknown}, which the dataset's pools by "
                        f"{pool_by} do not include; available: {names}")
    return [weights.get(n, 0.0) for n in names]


LEDGER_PREFIX = "tokens/"  # MLflow groups the ledger's metrics under it


def token_ledger(sampler: GlobalSampler, state: SamplerState, pools: list[str], seq_len: int) -> dict[str, int]:
    """Tokens trained per pool up to `state` (skipped ranges left out): `tokens/all/<pool>`, or with a decay mix
    `tokens/stable/<pool>` and `tokens/decay/<pool>` (zero until the decay begins)."""
    end, start = state.consumed_samples, state.decay_from
    if sampler.decay_blend is None:
        phases = {"all": (0, end)}
    else:
        split = end if start is None else start
        phases = {"stable": (0, split), "decay": (split, end)}
    return {f"{LEDGER_PREFIX}{phase}/{metric_name(pool)}": int(n) * seq_len
            for phase, (a, b) in phases.items() for pool, n in zip(pools, sampler.trained(a, b, state))}


def metric_name(pool: str) -> str:
    return re.sub(r"[^\w.\-]", "_", pool)  # source names are free text; MLflow keys are not


def rank_slice(batch: list[int], rank: int, world_size: int) -> list[int]:
    per_rank = len(batch) // world_size
    return batch[rank * per_rank:(rank + 1) * per_rank]


def training_dataset(tokens_dir: str | Path, data: DataSpec) -> TokenDataset:
    """The dataset as training sees it (pools of the mixture, the held-out samples set aside), from the run's
    model.spec.DataSpec: every reader of sampler positions (training, skip reports, the eval flow) builds it here.
    tokens_dir: the shards the data spec names, or a staged copy of them."""
    return TokenDataset(tokens_dir, data.seq_len, pool_by=data.pool_by,
                        eval_samples_per_channel=data.eval_samples_per_channel)


def training_sampler(dataset: TokenDataset, data: DataSpec, state: SamplerState | None = None) -> GlobalSampler:
    return sampler_for(dataset, data.seed, state, weights=data.weights, order=data.data_order,
                       decay_weights=data.decay_weights)
