"""Loss-anomaly detection inside the training program.

Every rank feeds the detector the same all-reduced figures (global loss, global
grad norm, per-channel losses), so every rank reaches the same verdict at the
same step without another collective. Rules:
  non-finite   loss or grad norm is NaN/inf
  loss_spike   loss above ratio x the rolling median, or a robust z-score (median and
               median absolute deviation of the window) above the limit
  grad_spike   grad norm above ratio x its rolling median
  channel_spike  a channel's loss above ratio x its own rolling median
  divergence   train loss and eval loss both trending up over a window
each after a warm-up and held for `patience` consecutive steps (non-finite at once).
"""
from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class DetectorSettings:
    """train.anomaly of the config (its descriptions say what each means), as the program reads it."""
    window: int
    warmup: int
    loss_ratio: float
    loss_zscore: float
    grad_ratio: float
    channel_ratio: float
    patience: int
    divergence_window: int
    onset_grad_ratio: float


@dataclass
class StepRecord:
    step: int
    loss: float
    grad_norm: float | None
    position_start: int   # sampler position before the step
    position_end: int     # ... and after it
    channel_losses: dict[str, float] = field(default_factory=dict)


@dataclass
class Anomaly:
    kind: str
    step: int
    detail: str
    onset_step: int
    onset_position: int
    position_end: int
    history: list[dict]

    def event(self) -> dict:
        return {"event": "anomaly", **asdict(self)}


def _median(values) -> float:
    return statistics.median(values) if values else float("nan")


def robust_sigma(values: list[float], median: float) -> float:
    """1.4826 x the median absolute deviation: a standard deviation that a few outliers or a falling
    trend barely move; floored at 0.5% of the median so a flat curve does not make every wobble a spike."""
    mad = statistics.median(abs(v - median) for v in values)
    return max(1.4826 * mad, 0.005 * abs(median), 1e-12)


class AnomalyDetector:
    def __init__(self, settings: DetectorSettings):
        self.s = settings
        self.records: deque[StepRecord] = deque(maxlen=max(settings.window, settings.divergence_window, 1) * 2)
        self.strikes: dict[str, int] = {}
        self.evals: deque[tuple[int, float]] = deque(maxlen=8)

    def observe_eval(self, step: int, mean_eval_loss: float) -> None:
        self.evals.append((step, mean_eval_loss))

    def update(self, record: StepRecord) -> Anomaly | None:
        """Check this step against the history before it, then add it."""
        past = list(self.records)[-self.s.window:]
        verdict = self._judge(record, past)
        self.records.append(record)
        if verdict is None:
            self.strikes.clear()
            return None
        kind, detail = verdict
        self.strikes[kind] = self.strikes.get(kind, 0) + 1
        if kind != "non_finite" and self.strikes[kind] < self.s.patience:
            return None
        onset = self._onset(record)
        return Anomaly(kind, record.step, detail, onset.step, onset.position_start, record.position_end,
                       [asdict(r) for r in list(self.records)[-self.s.window:]])

    def _judge(self, r: StepRecord, past: list[StepRecord]) -> tuple[str, str] | None:
        if not math.isfinite(r.loss) or (r.grad_norm is not None and not math.isfinite(r.grad_norm)):
            return "non_finite", f"loss={r.loss} grad_norm={r.grad_norm}"
        if len(past) < self.s.warmup:
            return None
        losses = [p.loss for p in past]
        median = _median(losses)
        if r.loss > self.s.loss_ratio * median:
            return "loss_spike", f"loss {r.loss:.4f} > {self.s.loss_ratio} x median {median:.4f}"
        z = (r.loss - median) / robust_sigma(losses, median)
        if z > self.s.loss_zscore:
            return "loss_spike", f"loss {r.loss:.4f} is {z:.1f} robust sigma above the window median {median:.4f}"
        grads = [p.grad_norm for p in past if p.grad_norm is not None]
        if r.grad_norm is not None and grads and r.grad_norm > self.s.grad_ratio * _median(grads):
            return "grad_spike", f"grad norm {r.grad_norm:.3g} > {self.s.grad_ratio} x median {_median(grads):.3g}"
        for channel, loss in r.channel_losses.items():
            history = [p.channel_losses[channel] for p in past if channel in p.channel_losses]
            if len(history) >= self.s.warmup and loss > self.s.channel_ratio * _median(history):
                return "channel_spike", f"{channel} loss {loss:.4f} > {self.s.channel_ratio} x median {_median(history):.4f}"
        return self._divergence(r, past)

    def _divergence(self, r: StepRecord, past: list[StepRecord]) -> tuple[str, str] | None:
        w = self.s.divergence_window
        if not w or len(self.records) < w or len(self.evals) < 3:
            return None
        recent = [p.loss for p in list(self.records)[-w:]] + [r.loss]
        half = len(recent) // 2
        train_up = statistics.fmean(recent[half:]) > statistics.fmean(recent[:half])
        evals = [v for _, v in self.evals][-3:]
        if train_up and evals[0] < evals[1] < evals[2]:
            return "divergence", f"train loss and the last 3 eval losses {evals} rising over {w} steps"
        return None

    def _onset(self, r: StepRecord) -> StepRecord:
        """The earliest step of the run of grad norms above onset_grad_ratio x median that ends here."""
        records = list(self.records)
        grads = [p.grad_norm for p in records[:-1] if p.grad_norm is not None]
        if not grads:
            return r
        limit = self.s.onset_grad_ratio * _median(grads[-self.s.window:])
        onset = records[-1]
        for p in reversed(records[:-1]):
            if p.grad_norm is None or p.grad_norm <= limit:
                break
            onset = p
        return onset
