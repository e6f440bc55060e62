"""Monitored training under injected faults (CPU, gloo, 2 ranks): the product's proof."""
import pytest

from model.checkpoint import complete_tags, read_meta
from model.protocol import read_jsonl
from pretrain.config import RecoveryConfig
from tasks.monitored import RecoveryFailed, run_monitored
from tasks.recovery import decisions

pytestmark = pytest.mark.slow


def monitored(cfg, root, out, env=None, recovery=None, **overrides):
    t = cfg.train.model_copy(update={"recovery": recovery or RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1),
                                     **overrides})
    lines = []
    import os

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return run_monitored(cfg.model, t, root / "tokenizer", root / "tokens", out, {}, log_line=lines.append), lines
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def per_step(cfg) -> int:
    return cfg.train.micro_batch_size * 2 * cfg.train.grad_accum


def test_nan_loss_rolls_back_skips_the_range_and_finishes(prepared_run, tmp_path):
    cfg, root = prepared_run
    n, out = per_step(cfg), tmp_path / "train"
    result, lines = monitored(cfg, root, out, {"PRETRAIN_NAN_POSITIONS": f"{4 * n}-{5 * n}"}, steps=8, save_every=2)
    assert result["exit_code"] == 0 and result["latest_step"] == 8 and result["attempts"] == 2
    [rollback] = decisions(out)
    assert rollback["action"] == "rollback" and rollback["checkpoint"] == "step_00000004"
    assert rollback["anomaly"]["kind"] == "non_finite" and rollback["anomaly"]["step"] == 5
    assert rollback["skip"] == [4 * n, 6 * n]  # from the checkpoint's position past the anomaly plus a step
    assert read_meta(out / "checkpoints", "step_00000008")["data_position"]["skipped"] == [[4 * n, 6 * n]]
    timing = result["recoveries"][0]
    assert timing["steps_lost"] == 1 and timing["detect_to_first_step_s"] < 60


def test_repeated_spikes_in_one_region_escalate_then_fail_with_a_report(prepared_run, tmp_path):
    cfg, root = prepared_run
    n, out = per_step(cfg), tmp_path / "train"
    recovery = RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1, widen_factor=2, lr_factor=0.5, max_rollbacks=3)
    with pytest.raises(RecoveryFailed, match="3 rollbacks already"):
        monitored(cfg, root, out, {"PRETRAIN_NAN_POSITIONS": f"{4 * n}-{10**6}"}, recovery, steps=12, save_every=2)
    made = decisions(out)
    assert [d["action"] for d in made] == ["rollback", "rollback", "rollback", "fail"]
    assert [d["escalation"] for d in made[:3]] == [0, 1, 2]
    assert [d["lr_scale"] for d in made[:3]] == [1.0, 1.0, 0.5]
    widths = [d["skip"][1] - d["skip"][0] for d in made[:3]]
    assert widths[0] < widths[1] < widths[2]  # the skip widens each time


def test_killed_rank_resumes_without_skipping_and_keeps_the_data_order(prepared_run, tmp_path):
    cfg, root = prepared_run
    straight, _ = monitored(cfg, root, tmp_path / "straight", steps=6, save_every=2)
    env = {"PRETRAIN_FAULTS": "kill_during_save@1", "PRETRAIN_FAULTS_ONCE_FILE": str(tmp_path / "fired")}
    result, _ = monitored(cfg, root, tmp_path / "killed", env, steps=6, save_every=2)
    [resume] = decisions(tmp_path / "killed")
    assert resume["action"] == "resume" and resume["skip"] is None and resume["checkpoint"] is None  # died at step 2's save
    assert result["latest_step"] == 6 and complete_tags(tmp_path / "killed" / "checkpoints")[-1] == "step_00000006"

    def losses(out):
        return {m["step"]: m["loss"] for m in read_jsonl(out / "metrics.jsonl")}

    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")  # same data, same order, same losses
