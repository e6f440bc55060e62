import math

from model.anomaly import AnomalyDetector, DetectorSettings, StepRecord
from model.spec import picked
from pretrain.config import AnomalyConfig


def settings(**changes) -> DetectorSettings:
    """The config's defaults (the only copy of them), with changes."""
    return picked(DetectorSettings, AnomalyConfig(**changes))


def feed(detector, losses, grads=None, start=1, per_step=8):
    found = None
    for i, loss in enumerate(losses):
        step = start + i
        grad = grads[i] if grads else 1.0
        found = detector.update(StepRecord(step, loss, grad, (step - 1) * per_step, step * per_step))
        if found:
            return found
    return found


def steady(n, value=3.0):
    return [value + 0.1 * ((i * 7) % 5) for i in range(n)]  # noise like a real loss curve's


def test_loss_spike_after_warmup_with_onset_from_grad_precursors():
    d = AnomalyDetector(settings(window=20, warmup=10))
    grads = [1.0] * 30 + [3.0, 5.0, 9.0]
    found = feed(d, steady(30) + [3.1, 3.3, 9.0], grads)
    assert found.kind == "loss_spike" and found.step == 33
    assert found.onset_step == 31 and found.onset_position == 30 * 8  # grad norm climbed two steps earlier
    assert found.position_end == 33 * 8 and len(found.history) == 20


def test_no_verdict_during_warmup_and_nan_at_once():
    d = AnomalyDetector(settings(window=20, warmup=10))
    assert feed(d, [3.0, 9.0, 3.0]) is None  # too little history to call 9.0 a spike
    found = feed(d, [float("nan")], start=4)
    assert found.kind == "non_finite" and found.step == 4
    assert feed(AnomalyDetector(settings()), [3.0], grads=[math.inf]).kind == "non_finite"


def test_patience_needs_consecutive_offending_steps():
    d = AnomalyDetector(settings(window=20, warmup=10, patience=2))
    assert feed(d, steady(20) + [9.0, 3.0, 9.0]) is None  # never twice in a row
    assert feed(d, [9.0, 9.5], start=24).kind == "loss_spike"


def test_grad_and_channel_spikes():
    d = AnomalyDetector(settings(window=20, warmup=10))
    assert feed(d, steady(20) + [3.0], grads=[1.0] * 20 + [50.0]).kind == "grad_spike"
    c = AnomalyDetector(settings(window=20, warmup=10))
    for step in range(1, 21):
        noisy = 3.0 + 0.1 * ((step * 7) % 5)
        assert c.update(StepRecord(step, noisy, 1.0, 0, 0, {"zh": noisy, "code": 2.0})) is None
    found = c.update(StepRecord(21, 3.2, 1.0, 0, 0, {"zh": 3.0, "code": 6.0}))  # overall loss barely moves
    assert found.kind == "channel_spike" and "code" in found.detail


def test_slow_divergence_needs_train_and_eval_rising():
    d = AnomalyDetector(settings(window=30, warmup=10, divergence_window=20, loss_ratio=10, loss_zscore=50))
    rising = [3.0 + 0.02 * i for i in range(40)]
    for i, v in enumerate((2.0, 2.1, 2.2)):
        d.observe_eval(10 * i, v)
    assert feed(d, rising).kind == "divergence"
    flat_eval = AnomalyDetector(settings(window=30, warmup=10, divergence_window=20, loss_ratio=10,
                                                 loss_zscore=50))
    for i, v in enumerate((2.2, 2.1, 2.0)):
        flat_eval.observe_eval(10 * i, v)
    assert feed(flat_eval, rising) is None
