import numpy as np
import pytest

from model.data import GlobalSampler, SamplerState, TokenDataset, open_shard, rank_slice


def stream(tokens_dir, manifest_shards):
    return np.concatenate([open_shard(tokens_dir / s["file"]).tokens for s in manifest_shards]).astype(np.int64)


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
    assert len(d.shards) >= 3
    flat = stream(small_shards, d.manifest["shards"])
    assert len(d) == (len(flat) - 1) // 64
    sizes = [len(s.tokens) for s in d.shards]
    crossing = [i for i in range(len(d)) if d.sample_offset[i] + 65 > sizes[d.sample_shard[i]]]
    assert crossing
    for i in [0, 1, len(d) // 2, len(d) - 1] + crossing:
        np.testing.assert_array_equal(d[i]["tokens"], flat[i * 64: i * 64 + 65])
        assert d[i]["channels"].shape == (65,)
    with pytest.raises(IndexError):
        d[len(d)]


def test_channels_follow_documents(prepared_run):
    _, root = prepared_run
    d = TokenDataset(root / "tokens", seq_len=32)
    eos = d.manifest["eos_id"]
    for i in range(0, len(d), max(1, len(d) // 50)):
        item = d[i]
        # the channel only changes right after an EOS (a document boundary)
        changes = np.nonzero(np.diff(item["channels"]))[0]
        assert all(item["tokens"][k] == eos for k in changes)
    assert d.documents_of(0)[0]["source"] in d.manifest["sources"]


def test_sampler_is_a_permutation_and_deterministic():
    s = GlobalSampler(100, seed=3)
    ids = s.next_global_batch(100)
    assert sorted(ids) == list(range(100))
    assert GlobalSampler(100, seed=3).next_global_batch(100) == ids
    assert GlobalSampler(100, seed=4).next_global_batch(100) != ids
    assert s.next_global_batch(100) != ids  # next epoch is a new permutation


def test_same_global_order_for_any_world_size():
    batches = [GlobalSampler(1000, 7).next_global_batch(16) for _ in range(2)]
    for world in (1, 2, 8):
        merged = [i for r in range(world) for i in rank_slice(batches[0], r, world)]
        assert merged == batches[1]


def test_resume_from_state_continues_exactly():
    full = GlobalSampler(500, 1)
    seq = [full.next_global_batch(8) for _ in range(10)]
    part = GlobalSampler(500, 1)
    for _ in range(4):
        part.next_global_batch(8)
    resumed = GlobalSampler(500, 1, SamplerState.from_dict(part.state.to_dict()))
    assert [resumed.next_global_batch(8) for _ in range(6)] == seq[4:]


def test_skipped_ranges_are_skipped():
    plain = GlobalSampler(500, 1)
    order = [plain.sample_at(p) for p in range(40)]
    s = GlobalSampler(500, 1, SamplerState(consumed_samples=8, skipped=[(8, 24)]))
    assert s.next_global_batch(8) == order[24:32]
    assert s.state.consumed_samples == 32


def test_too_little_data_is_a_clear_error(prepared_run):
    _, root = prepared_run
    with pytest.raises(ValueError, match="lower train.seq_len"):
        TokenDataset(root / "tokens", seq_len=10**9)
