"""Recovery decisions on real checkpoint folders and event files."""
from model import checkpoint as ckpt
from model.protocol import EXIT_ANOMALY, EXIT_CONFIG, EXIT_UNSAVED, append_jsonl
from pretrain.config import RecoveryConfig
from tasks.train.recovery import abandon_after, decide, record


def make_checkpoints(train_dir, steps, per_step=8):
    for step in steps:
        tag = f"step_{step:08d}"
        (train_dir / "checkpoints" / tag).mkdir(parents=True)
        ckpt.mark_rank_done(train_dir / "checkpoints", tag, 0)
        ckpt.mark_complete(train_dir / "checkpoints", tag, 1,
                           {"step": step, "data_position": {"consumed_samples": step * per_step, "skipped": []}})


def anomaly(train_dir, step, onset, per_step=8):
    append_jsonl(train_dir / "events.jsonl", {
        "event": "anomaly", "kind": "loss_spike", "step": step, "detail": "", "onset_step": onset,
        "onset_position": (onset - 1) * per_step, "position_end": step * per_step,
        "history": [{"step": step, "position_start": (step - 1) * per_step, "position_end": step * per_step}]})


def test_rollback_goes_before_the_onset_and_skips_past_the_anomaly(tmp_path):
    make_checkpoints(tmp_path, [100, 200, 300])
    anomaly(tmp_path, step=340, onset=310)
    policy = RecoveryConfig(rollback_gap_steps=100, skip_margin_steps=50)
    d = decide(policy, tmp_path, EXIT_ANOMALY, "", attempt=1, lr_scale=1.0)
    assert (d.action, d.checkpoint, d.skip) == ("rollback", "step_00000200", (1600, 340 * 8 + 50 * 8))
    assert abandon_after(tmp_path / "checkpoints", d.checkpoint, 1) == ["step_00000300"]
    assert ckpt.latest_complete(tmp_path / "checkpoints") == "step_00000200"
    assert (tmp_path / "checkpoints" / "step_00000300.abandoned-1").is_dir()  # set aside, not deleted


def test_crashes_resume_within_budget_and_deterministic_ones_fail_at_once(tmp_path):
    make_checkpoints(tmp_path, [10])
    policy = RecoveryConfig(max_crash_retries=1)
    first = decide(policy, tmp_path, 1, "rank died", attempt=1, lr_scale=1.0)
    assert (first.action, first.checkpoint, first.skip) == ("resume", "step_00000010", None)
    record(tmp_path, first)
    assert decide(policy, tmp_path, 1, "rank died", attempt=2, lr_scale=1.0).action == "fail"  # budget spent
    assert decide(policy, tmp_path, EXIT_CONFIG, "bad spec", 1, 1.0).action == "fail"
    unsaved = decide(RecoveryConfig(), tmp_path / "full", EXIT_UNSAVED, "no room", 1, 1.0)
    assert unsaved.action == "fail" and "same full disk" in unsaved.reason  # a retry would fill it again
    oom = decide(RecoveryConfig(), tmp_path / "other", 1, "CUDA out of memory", 1, 1.0, progressed=False)
    assert oom.action == "fail" and "before finishing a single step" in oom.reason


def test_a_collective_timeout_before_the_first_step_is_resumed_not_failed(tmp_path):
    make_checkpoints(tmp_path, [10])
    message = ("training crashed (exit code 1)\n[/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] "
               "Timed out waiting 3000ms for recv operation to complete")
    d = decide(RecoveryConfig(), tmp_path, 1, message, 1, 1.0, progressed=False)
    assert (d.action, d.checkpoint) == ("resume", "step_00000010")
