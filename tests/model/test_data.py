import json
import shutil
from collections import Counter

import numpy as np
import pytest

from model.data import (BlendSchedule, DataError, GlobalSampler, SamplerState, ShardError, TokenDataset,
                        open_shard, rank_slice, sampler_for, token_ledger)
from pretrain.channels import CHANNELS


def stream(tokens_dir, entries):
    return np.concatenate([open_shard(tokens_dir / s["file"]).tokens for s in entries]).astype(np.int64)


@pytest.fixture(scope="module")
def small_shards(prepared_run, tmp_path_factory):
    """The prepared corpus re-written into many small shards, so samples cross shard boundaries."""
    from tasks.tokenize import run_tokenize

    cfg, root = prepared_run
    out = tmp_path_factory.mktemp("small") / "tokens"
    run_tokenize(cfg.tokenize.model_copy(update={"shard_max_tokens": 5000}), root / "clean", root / "tokenizer", out)
    return out


def test_getitem_equals_stream_slice_across_shards(small_shards):
    d = TokenDataset(small_shards, seq_len=64)
    assert len(d.entries) >= 3
    flat = stream(small_shards, d.entries)
    assert len(d) == (len(flat) - 1) // 64
    ends = np.cumsum([e["tokens"] for e in d.entries])
    crossing = [i for i in range(len(d)) if np.searchsorted(ends, i * 64, "right") != np.searchsorted(ends, i * 64 + 64, "right")]
    assert crossing
    for i in [0, 1, len(d) // 2, len(d) - 1] + crossing:
        np.testing.assert_array_equal(d[i]["tokens"], flat[i * 64: i * 64 + 65])
        assert d[i]["channels"].shape == (65,)
    with pytest.raises(IndexError):
        d[len(d)]


def test_pools_by_channel_pack_each_channel_separately(small_shards):
    d = TokenDataset(small_shards, seq_len=32, pool_by="channel")
    assert [p.name for p in d.pools] == sorted({e["channel"] for e in d.entries})
    for pool in d.pools:
        entries = [d.entries[i] for i in pool.shards]
        flat = stream(small_shards, entries)
        assert pool.num_samples == (len(flat) - 1) // 32
        for k in (0, pool.num_samples - 1):
            item = d[pool.first_id + k]
            np.testing.assert_array_equal(item["tokens"], flat[k * 32: k * 32 + 33])
            assert set(item["channels"].tolist()) == {CHANNELS.index(pool.name)}


def test_channels_follow_documents(prepared_run):
    _, root = prepared_run
    d = TokenDataset(root / "tokens", seq_len=32)
    eos = d.manifest["eos_id"]
    for i in range(0, len(d), max(1, len(d) // 50)):
        item = d[i]
        # the channel only changes right after an EOS (a document boundary)
        changes = np.nonzero(np.diff(item["channels"]))[0]
        assert all(item["tokens"][k] == eos for k in changes)
    docs = d.documents_of(0)
    assert docs[0]["source"] in d.manifest["sources"] and docs[0]["shard"] == d.entries[0]["file"]


def test_sampler_is_a_permutation_and_deterministic():
    s = GlobalSampler(100, seed=3)
    ids = s.next_global_batch(100)
    assert sorted(ids) == list(range(100))
    assert GlobalSampler(100, seed=3).next_global_batch(100) == ids
    assert GlobalSampler(100, seed=4).next_global_batch(100) != ids
    assert s.next_global_batch(100) != ids  # next epoch is a new permutation


def test_same_global_order_for_any_world_size():
    """Ranks of any world size together consume exactly the single-rank order, step by step."""
    reference = GlobalSampler([300, 120], 7)
    order = [i for _ in range(20) for i in reference.next_global_batch(16)]
    for world in (1, 2, 8):
        samplers = [GlobalSampler([300, 120], 7) for _ in range(world)]  # one per rank, as in training
        seen = []
        for _ in range(20):
            for rank, s in enumerate(samplers):
                seen.append(rank_slice(s.next_global_batch(16), rank, world))
        merged = [i for step in range(20) for r in range(world) for i in seen[step * world + r]]
        assert merged == order


def test_resume_from_state_continues_exactly():
    for sizes, weights in ((500, None), ([500, 80, 20], [0.5, 0.3, 0.2])):
        full = GlobalSampler(sizes, 1, weights=weights)
        seq = [full.next_global_batch(8) for _ in range(40)]
        part = GlobalSampler(sizes, 1, weights=weights)
        for _ in range(13):
            part.next_global_batch(8)
        resumed = GlobalSampler(sizes, 1, SamplerState.from_dict(part.state.to_dict()), weights=weights)
        assert [resumed.next_global_batch(8) for _ in range(27)] == seq[13:]


def test_skipped_ranges_are_skipped():
    plain = GlobalSampler(500, 1)
    order = [plain.sample_at(p) for p in range(40)]
    s = GlobalSampler(500, 1, SamplerState(consumed_samples=8, skipped=[(8, 24)]))
    assert s.next_global_batch(8) == order[24:32]
    assert s.state.consumed_samples == 32


def test_blend_schedule_is_a_count_not_a_scan():
    blend = BlendSchedule([0.6, 0.3, 0.1, 0.0])
    seen = [0, 0, 0, 0]
    for p in range(3 * BlendSchedule.PERIOD + 17):
        pool, local = blend.locate(p)
        assert local == seen[pool]  # each pool's local positions come out 0, 1, 2, ... in order
        seen[pool] += 1
    assert seen[3] == 0
    assert np.allclose(np.array(seen[:3]) / sum(seen), [0.6, 0.3, 0.1], atol=1e-3)
    # any prefix stays close to the weights: the pools interleave, they do not come in blocks
    firsts = [blend.locate(p)[0] for p in range(100)]
    assert abs(firsts.count(0) - 60) <= 1 and abs(firsts.count(2) - 10) <= 1


def test_mixture_upsamples_a_small_pool():
    s = GlobalSampler([1000, 50], seed=2, weights=[0.5, 0.5])
    ids = s.next_global_batch(2000)
    small = [i for i in ids if i >= 1000]
    assert len(small) == 1000 and sorted(set(small)) == list(range(1000, 1050))  # 20 epochs of the small pool
    assert s.epochs_at(2000)[1] == pytest.approx(20.0)


def test_mixture_names_must_exist(small_shards):
    d = TokenDataset(small_shards, seq_len=32, pool_by="channel")
    with pytest.raises(DataError, match="available"):
        sampler_for(d, 1, weights={"klingon": 1.0})
    s = sampler_for(d, 1, weights={d.pools[0].name: 1.0})
    assert all(d.pools[0].first_id <= i < d.pools[0].first_id + d.pools[0].num_samples for i in s.next_global_batch(50))


def test_too_little_data_is_a_clear_error(prepared_run):
    _, root = prepared_run
    with pytest.raises(DataError, match="lower train.batch.seq_len"):
        TokenDataset(root / "tokens", seq_len=10**9)


def test_truncated_or_replaced_shard_is_named(small_shards, tmp_path):
    copy = tmp_path / "tokens"
    shutil.copytree(small_shards, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    victim = copy / manifest["shards"][1]["file"]
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    d = TokenDataset(copy, seq_len=32)
    with pytest.raises(ShardError, match=manifest["shards"][1]["file"]):
        for i in range(len(d)):
            d[i]
    # a readable shard that is not the one the manifest describes
    shutil.copyfile(copy / manifest["shards"][2]["file"], copy / manifest["shards"][0]["file"])
    with pytest.raises(ShardError, match="changed or replaced"):
        TokenDataset(copy, seq_len=32)[0]


def test_an_id_outside_the_vocabulary_names_its_shard_and_document(small_shards, tmp_path):
    import pyarrow as pa

    copy = tmp_path / "tokens"
    shutil.copytree(small_shards, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    victim = copy / manifest["shards"][1]["file"]
    batch = pa.ipc.open_file(pa.BufferReader(victim.read_bytes())).get_batch(0)
    tokens = batch.column("tokens")
    values = tokens.values.to_numpy().copy()
    offsets = tokens.offsets.to_numpy()
    values[offsets[3] + 1] = manifest["vocab_size"] + 5  # inside the embedding's padding rows: trained silently
    fixed = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=tokens.type.value_type))
    table = pa.record_batch([fixed, batch.column("channel"), batch.column("source")], schema=batch.schema)
    with pa.OSFile(str(victim), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(table)
    d = TokenDataset(copy, seq_len=32)
    with pytest.raises(ShardError, match=rf"{manifest['shards'][1]['file']}: document 3 holds id "
                                         rf"{manifest['vocab_size'] + 5}, outside the tokenizer's"):
        for i in range(len(d)):
            d[i]


DECAY_SIZES, STABLE, DECAY = [400, 300, 200], [0.6, 0.4, 0.0], [0.2, 0.3, 0.5]


def pool_of(sample: int) -> int:
    return int(np.searchsorted(np.cumsum(DECAY_SIZES), sample, side="right"))


def decay_run(steps: int, decay_step: int, state: SamplerState | None = None, first: int = 0) -> GlobalSampler:
    s = GlobalSampler(DECAY_SIZES, 5, state, weights=STABLE, decay_weights=DECAY)
    s.batches = [s.next_global_batch(16, decaying=step >= decay_step) for step in range(first, steps)]
    return s


def test_the_decay_mix_starts_at_its_step_and_each_pool_goes_on_where_it_left():
    s = decay_run(30, decay_step=10)
    plain = GlobalSampler(DECAY_SIZES, 5, weights=STABLE)
    assert s.batches[:10] == [plain.next_global_batch(16) for _ in range(10)]  # the stable phase: the plain mix
    assert s.state.decay_from == 160
    decay = Counter(pool_of(i) for b in s.batches[10:] for i in b)
    assert [abs(decay[j] - 320 * w) <= 1 for j, w in enumerate(DECAY)] == [True] * 3  # 320 positions by DECAY
    seen = [i for b in s.batches for i in b]
    assert len(set(seen)) == len(seen)  # no pool restarts its order at the boundary: nothing repeats


@pytest.mark.parametrize("saved_after", [4, 10, 17])
def test_resume_on_either_side_of_the_decay_is_exact(saved_after):
    full = decay_run(30, decay_step=10)
    part = decay_run(saved_after, decay_step=10)
    resumed = decay_run(30, 10, SamplerState.from_dict(json.loads(json.dumps(part.state.to_dict()))), saved_after)
    assert part.batches + resumed.batches == full.batches
    assert resumed.state == full.state


def test_the_token_ledger_counts_each_phase_and_leaves_skipped_positions_out():
    s = decay_run(0, 10, SamplerState(skipped=[(20, 36), (30, 40), (180, 200)]))  # overlapping; one at the boundary
    by_phase = {"stable": Counter(), "decay": Counter()}
    for step in range(25):
        ids = s.next_global_batch(16, decaying=step >= 10)
        by_phase["decay" if step >= 10 else "stable"].update(pool_of(i) for i in ids)
        if step == 9:
            boundary = s.state.consumed_samples
    assert s.state.decay_from == boundary == 180  # the decay's first position, skipped or not
    ledger = token_ledger(s, s.state, ["a", "b", "c"], seq_len=4)
    assert ledger == {f"tokens/{phase}/{name}": 4 * by_phase[phase][j]
                      for phase in ("stable", "decay") for j, name in enumerate("abc")}
    assert ledger["tokens/stable/c"] == 0 and sum(ledger.values()) == 4 * 25 * 16
    plain = GlobalSampler(DECAY_SIZES, 5, weights=STABLE)  # no decay mix: one count per pool
    drawn = Counter(pool_of(i) for i in plain.next_global_batch(64))
    assert token_ledger(plain, plain.state, ["a", "b", "c/d"], 4) == {
        "tokens/all/a": 4 * drawn[0], "tokens/all/b": 4 * drawn[1], "tokens/all/c_d": 4 * drawn[2]}
