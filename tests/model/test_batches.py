"""The background batch reader: the batches a synchronous loop would read, read off the training thread."""
import shutil
import threading

import numpy as np
import pytest

from model.batches import BatchPrefetcher, collate
from model.data import GlobalSampler, SamplerState, ShardError, TokenDataset, rank_slice


class ThreadRecordingDataset(TokenDataset):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.threads = set()

    def __getitem__(self, i):
        self.threads.add(threading.current_thread().name)
        return super().__getitem__(i)


def test_prefetched_batches_are_the_synchronous_ones_with_their_positions(prepared_run):
    _, root = prepared_run
    dataset = ThreadRecordingDataset(root / "tokens", seq_len=32)
    plain = TokenDataset(root / "tokens", seq_len=32)
    skipped = [(10, 14)]
    reference = GlobalSampler(len(dataset), seed=7, state=SamplerState(3, list(skipped)))
    batches = BatchPrefetcher(dataset, GlobalSampler(len(dataset), seed=7, state=SamplerState(3, list(skipped))),
                              rank=1, world=2, micro_batch=2, grad_accum=3)
    try:
        for _ in range(4):
            start = reference.state.consumed_samples
            ids = reference.next_global_batch(2 * 2 * 3)
            batch = batches.next()
            assert batch.position_start == start and batch.positions == reference.last_positions
            assert batch.state.to_dict() == reference.state.to_dict()
            assert len(batch.micro) == 3
            for k, (tokens, channels) in enumerate(batch.micro):
                want_tokens, want_channels = collate(plain, rank_slice(ids[k * 4:(k + 1) * 4], 1, 2))
                np.testing.assert_array_equal(tokens.numpy(), want_tokens.numpy())
                np.testing.assert_array_equal(channels.numpy(), want_channels.numpy())
        assert not any(p in range(10, 14) for p in batch.positions)
        assert dataset.threads == {"batch-prefetch"}  # the training thread never reads the shards
    finally:
        batches.close()
    assert not batches.thread.is_alive()


def test_without_read_ahead_the_same_batches_are_read_in_the_training_thread(prepared_run):
    _, root = prepared_run
    dataset = ThreadRecordingDataset(root / "tokens", seq_len=32)
    ahead = BatchPrefetcher(TokenDataset(root / "tokens", seq_len=32), GlobalSampler(len(dataset), seed=3), rank=0,
                            world=1, micro_batch=2, grad_accum=2)
    inline = BatchPrefetcher(dataset, GlobalSampler(len(dataset), seed=3), rank=0, world=1, micro_batch=2, grad_accum=2,
                             read_ahead=False)
    try:
        for _ in range(3):
            a, b = ahead.next(), inline.next()
            assert a.positions == b.positions and a.state.to_dict() == b.state.to_dict()
            assert all((x[0] == y[0]).all() for x, y in zip(a.micro, b.micro))
    finally:
        ahead.close()
        inline.close()
    assert dataset.threads == {threading.current_thread().name}


def test_a_reading_error_is_raised_in_the_training_loop(prepared_run, tmp_path):
    _, root = prepared_run
    tokens = tmp_path / "tokens"
    shutil.copytree(root / "tokens", tokens)
    dataset = TokenDataset(tokens, seq_len=32)
    for entry in dataset.entries:
        (tokens / entry["file"]).write_bytes(b"not arrow")
    batches = BatchPrefetcher(dataset, GlobalSampler(len(dataset), seed=1), rank=0, world=1, micro_batch=2, grad_accum=1)
    try:
        with pytest.raises(ShardError, match="cannot be read"):
            batches.next()
    finally:
        batches.close()


def test_close_stops_a_reader_blocked_on_a_full_queue(prepared_run):
    _, root = prepared_run
    dataset = TokenDataset(root / "tokens", seq_len=32)
    batches = BatchPrefetcher(dataset, GlobalSampler(len(dataset), seed=1), rank=0, world=1, micro_batch=1,
                              grad_accum=1, depth=1)
    batches.next()
    batches.close()
    assert not batches.thread.is_alive()
