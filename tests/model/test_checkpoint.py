import pytest

from model import checkpoint as ckpt


def make_tag(root, tag, step, world=2, complete=True):
    (root / tag).mkdir(parents=True)
    for r in range(world):
        ckpt.mark_rank_done(root, tag, r)
    if complete:
        ckpt.mark_complete(root, tag, world, {"step": step})


def test_latest_skips_partial_checkpoints(tmp_path):
    make_tag(tmp_path, "step_10", 10)
    make_tag(tmp_path, "step_20", 20)
    (tmp_path / "step_30").mkdir()  # a crash while writing: no COMPLETE
    (tmp_path / "latest").write_text("step_30")
    assert ckpt.latest_complete(tmp_path) == "step_20"
    assert ckpt.complete_tags(tmp_path) == ["step_10", "step_20"]


def test_complete_requires_every_rank(tmp_path):
    (tmp_path / "step_5").mkdir()
    ckpt.mark_rank_done(tmp_path, "step_5", 0)
    with pytest.raises(RuntimeError, match=r"ranks \[1\] did not finish"):
        ckpt.mark_complete(tmp_path, "step_5", 2, {"step": 5})
    assert not ckpt.is_complete(tmp_path, "step_5")
    assert not (tmp_path / "latest").exists()


def test_no_checkpoint(tmp_path):
    assert ckpt.latest_complete(tmp_path / "missing") is None
