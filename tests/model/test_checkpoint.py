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


def test_retention_keeps_the_last_k_and_every_mth():
    steps = {f"step_{s:08d}": s for s in range(100, 1100, 100)}
    victims = ckpt.retention_victims(steps, keep_last=2, keep_every=500)
    kept = sorted(set(steps) - set(victims))
    assert kept == ["step_00000500", "step_00000900", "step_00001000"]


def test_apply_retention_never_removes_latest_and_clears_dead_saves(tmp_path):
    for step in (1, 2, 3, 4):
        make_tag(tmp_path, f"step_{step:08d}", step)
    (tmp_path / "step_00000002.5").mkdir()  # not a tag of ours: left alone
    (tmp_path / "step_00000003x").mkdir()
    make_tag(tmp_path, "step_00000000", 0, complete=False)  # a save that died, older than the newest complete
    (tmp_path / "latest").write_text("step_00000002")  # e.g. after a rollback
    removed = ckpt.apply_retention(tmp_path, keep_last=1, keep_every=0)
    assert sorted(removed) == ["step_00000000", "step_00000001", "step_00000003"]
    assert ckpt.complete_tags(tmp_path) == ["step_00000002", "step_00000004"]
    assert (tmp_path / "step_00000002.5").exists()


def test_room_for_checkpoint_compares_free_space(tmp_path):
    ok, free = ckpt.room_for_checkpoint(tmp_path, 1)
    assert ok and free > 0
    assert not ckpt.room_for_checkpoint(tmp_path, free)[0]  # the 20% margin does not fit


def test_set_aside_checkpoints_are_never_resumed_and_only_the_newest_are_kept(tmp_path):
    for step in (2, 4):
        make_tag(tmp_path, f"step_{step:08d}", step)
    for attempt, steps in ((1, (6, 8)), (3, (6,)), (2, (10,))):
        for step in steps:
            make_tag(tmp_path, f"step_{step:08d}.abandoned-{attempt}", step)
    (tmp_path / "latest").unlink()  # as after a rollback to the start
    # the newest complete tag is then the live step 4, not a set-aside one
    assert ckpt.latest_complete(tmp_path) == "step_00000004"
    assert ckpt.abandoned_tags(tmp_path) == ["step_00000006.abandoned-1", "step_00000008.abandoned-1",
                                             "step_00000010.abandoned-2", "step_00000006.abandoned-3"]
    removed = ckpt.apply_retention(tmp_path, keep_last=5, keep_every=0, keep_abandoned=2)
    assert removed == ["step_00000006.abandoned-1", "step_00000008.abandoned-1"]
    assert ckpt.prune_abandoned(tmp_path, 0) == ["step_00000010.abandoned-2", "step_00000006.abandoned-3"]
    assert ckpt.complete_tags(tmp_path) == ["step_00000002", "step_00000004"]


def test_a_complete_file_edited_or_broken_is_never_resumed_from_and_says_why(tmp_path):
    make_tag(tmp_path, "step_10", 10)
    make_tag(tmp_path, "step_20", 20)
    make_tag(tmp_path, "step_30", 30)
    (tmp_path / "step_30" / "COMPLETE").write_text('{"step": 35}')  # edited: would resume at 35 and skip data
    (tmp_path / "step_20" / "COMPLETE").write_text('{"step": 20,')  # cut short
    assert ckpt.latest_complete(tmp_path) == "step_10"  # `latest` names step_30: the newest that holds instead
    assert ckpt.complete_tags(tmp_path) == ["step_10"]
    why = ckpt.untrusted_tags(tmp_path)
    assert "says step 35 where its tag is step 30" in why["step_30"]
    assert "step_20/COMPLETE is not readable JSON" in why["step_20"]
    with pytest.raises(ckpt.CheckpointError, match="step_30/COMPLETE says step 35"):
        ckpt.read_meta(tmp_path, "step_30")
    assert ckpt.apply_retention(tmp_path, keep_last=1, keep_every=0) == []  # untrusted ones are left for a person
