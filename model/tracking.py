"""Metric trackers: rank 0 gets a real one, other ranks a do-nothing one, so the loop never branches on rank."""
from __future__ import annotations

import os
from pathlib import Path

from model.protocol import append_jsonl


class NullTracker:
    def log(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def event(self, record: dict) -> None:
        pass

    def tag(self, key: str, value: str) -> None:
        pass

    def flush(self) -> None:
        pass


class Rank0Tracker:
    """Writes metrics.jsonl at once (the orchestrator follows it) and batches points to MLflow."""

    def __init__(self, out_dir: Path, metrics_file: str, events_file: str, flush_every: int = 10):
        self.metrics_path, self.events_path = out_dir / metrics_file, out_dir / events_file
        self.flush_every, self.pending, self.client, self.run_id = flush_every, [], None, None
        run_id, uri = os.environ.get("MLFLOW_RUN_ID"), os.environ.get("MLFLOW_TRACKING_URI")
        if run_id and uri:
            from mlflow.tracking import MlflowClient  # heavy import, rank 0 only

            self.client, self.run_id = MlflowClient(tracking_uri=uri), run_id

    def log(self, step: int, metrics: dict[str, float]) -> None:
        append_jsonl(self.metrics_path, {"step": step, **metrics})
        self.pending.append((step, metrics))
        if len(self.pending) >= self.flush_every:
            self.flush()

    def event(self, record: dict) -> None:
        append_jsonl(self.events_path, record)

    def tag(self, key: str, value: str) -> None:
        """A run tag in MLflow (a straggler's name), where a person looks first."""
        if self.client:
            self.client.set_tag(self.run_id, key, value)

    def flush(self) -> None:
        if not self.client or not self.pending:
            self.pending = []
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(k, float(v), now, step) for step, m in self.pending for k, v in m.items()
                  if isinstance(v, (int, float))]  # per-rank lists stay in metrics.jsonl
        for i in range(0, len(points), 1000):  # MLflow caps a batch at 1000 metrics
            self.client.log_batch(self.run_id, metrics=points[i:i + 1000])
        self.pending = []
