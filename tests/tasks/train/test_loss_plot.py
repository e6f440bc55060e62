from model.protocol import append_jsonl
from tasks.train.loss_plot import loss_figure, loss_plot


def spiked_run(train_dir):
    """Steps 1-20 with a spike at 20, a rollback to step 15 skipping samples 120..176, then steps 16-29 again."""
    for step in range(1, 21):
        append_jsonl(train_dir / "metrics.jsonl", {"step": step, "loss": 7.0 - step * 0.05 + (2.0 if step == 20 else 0)})
    append_jsonl(train_dir / "recovery.jsonl", {
        "action": "rollback", "checkpoint": "step_00000015", "skip": [120, 176],
        "anomaly": {"kind": "loss_spike", "step": 20, "onset_step": 20}})
    for step in range(16, 30):
        append_jsonl(train_dir / "metrics.jsonl", {"step": step, "loss": 7.0 - step * 0.05})


def test_loss_plot_marks_rollbacks(tmp_path):
    spiked_run(tmp_path)
    ax = loss_figure(tmp_path).axes[0]
    curves = [line for line in ax.get_lines() if len(line.get_xdata()) > 2]
    assert [list(c.get_xdata()) for c in curves] == [list(range(1, 21)), list(range(16, 30))]
    assert [c.get_alpha() for c in curves] == [0.35, 1.0]  # the rolled-back attempt faded, the one after on top
    marks = [line for line in ax.get_lines() if len(line.get_xdata()) == 2]
    assert [(list(m.get_xdata()), m.get_color()) for m in marks] == [([20, 20], "tab:red")]
    assert [t.get_text() for t in ax.texts] == ["loss_spike -> step_00000015\nskip 120..176"]
    data = loss_plot(tmp_path, tmp_path / "loss.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_rollback_without_a_skip_is_labelled_without_one(tmp_path):
    append_jsonl(tmp_path / "metrics.jsonl", {"step": 1, "loss": 7.0})
    append_jsonl(tmp_path / "recovery.jsonl", {"action": "rollback", "checkpoint": None, "skip": None,
                                               "anomaly": {"kind": "non_finite", "step": 1, "onset_step": 1}})
    assert [t.get_text() for t in loss_figure(tmp_path).axes[0].texts] == ["non_finite -> start"]
