from model.protocol import append_jsonl
from tasks.loss_plot import loss_plot


def test_loss_plot_marks_rollbacks(tmp_path):
    for step in range(1, 30):
        append_jsonl(tmp_path / "metrics.jsonl", {"step": step, "loss": 7.0 - step * 0.05 + (2.0 if step == 20 else 0)})
    append_jsonl(tmp_path / "recovery.jsonl", {
        "action": "rollback", "checkpoint": "step_00000015", "skip": [120, 176],
        "anomaly": {"kind": "loss_spike", "step": 20, "onset_step": 20}})
    out = loss_plot(tmp_path, tmp_path / "loss.png")
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
