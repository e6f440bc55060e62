from pathlib import Path
from types import SimpleNamespace

import pytest

from model.train_state import ResumeMismatch, checked_position, with_skips
from pretrain.config import TrainConfig
from tasks.train.spec import data_spec


def spec_with(**train):
    """A spec whose data part comes from these train settings (the config's defaults otherwise)."""
    return SimpleNamespace(data=data_spec(TrainConfig(seq_len=8, micro_batch_size=1, steps=100, **train), Path("tokens")))


def test_a_checkpoint_counted_in_another_order_is_refused_with_the_fix():
    old_meta = {"data_position": {"consumed_samples": 4096, "skipped": []}}  # written before the Feistel order
    with pytest.raises(ResumeMismatch, match="set train.data_order: numpy_shuffle"):
        checked_position(old_meta, Path("ckpt/step_00000010"), spec_with())
    state = checked_position(old_meta, Path("ckpt/step_00000010"), spec_with(data_order="numpy_shuffle"))
    assert (state.consumed_samples, state.order) == (4096, "numpy_shuffle")
    new_meta = {"data_position": {"consumed_samples": 8, "skipped": [], "order": "feistel"}}
    with pytest.raises(ResumeMismatch, match="feistel"):
        checked_position(new_meta, Path("ckpt/step_00000001"), spec_with(data_order="numpy_shuffle"))


def test_skip_ranges_keep_the_order():
    state = checked_position({"data_position": {"consumed_samples": 8, "skipped": [[20, 30]]}}, Path("c"),
                             spec_with(data_order="numpy_shuffle"))
    merged = with_skips(state, [(10, 12)])
    assert merged.skipped == [(10, 12), (20, 30)] and merged.order == "numpy_shuffle"
