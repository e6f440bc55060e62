from pathlib import Path
from types import SimpleNamespace

import pytest

from model.train_state import ResumeMismatch, checked_position, with_skips
from pretrain.config import TrainConfig, nested_train
from tasks.train.spec import data_spec


def spec_with(**train):
    """A spec whose data part comes from these train settings (the config's defaults otherwise)."""
    return SimpleNamespace(data=data_spec(TrainConfig(**nested_train(dict(seq_len=8, micro_batch_size=1, steps=100, **train))), Path("tokens")))


def test_a_checkpoint_counted_in_another_order_is_refused_with_the_fix():
    old_meta = {"data_position": {"consumed_samples": 4096, "skipped": []}}  # written before the Feistel order
    with pytest.raises(ResumeMismatch, match="set train.data.order: numpy_shuffle"):
        checked_position(old_meta, Path("ckpt/step_00000010"), spec_with())
    state = checked_position(old_meta, Path("ckpt/step_00000010"), spec_with(order="numpy_shuffle"))
    assert (state.consumed_samples, state.order) == (4096, "numpy_shuffle")
    new_meta = {"data_position": {"consumed_samples": 8, "skipped": [], "order": "feistel"}}
    with pytest.raises(ResumeMismatch, match="feistel"):
        checked_position(new_meta, Path("ckpt/step_00000001"), spec_with(order="numpy_shuffle"))


def test_skip_ranges_keep_the_order():
    state = checked_position({"data_position": {"consumed_samples": 8, "skipped": [[20, 30]]}}, Path("c"),
                             spec_with(order="numpy_shuffle"))
    merged = with_skips(state, [(10, 12)])
    assert merged.skipped == [(10, 12), (20, 30)] and merged.order == "numpy_shuffle"


def test_a_run_whose_every_checkpoint_is_untrusted_is_refused_not_restarted_from_zero(tmp_path):
    from model import checkpoint as ckpt
    from model.train_state import find_resume_point

    tag = tmp_path / "checkpoints" / "step_00000040"
    tag.mkdir(parents=True)
    (tag / "COMPLETE").write_text('{"step": 41}')  # edited
    spec = SimpleNamespace(out_dir=tmp_path, train=SimpleNamespace(resume_tag=None))
    with pytest.raises(ResumeMismatch, match="no checkpoint under .* can be resumed from: .*says step 41"):
        find_resume_point(spec, SimpleNamespace(rank=0, world=1))
    assert ckpt.latest_complete(tmp_path / "checkpoints") is None
