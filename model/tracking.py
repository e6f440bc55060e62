"""Metric trackers: rank 0 gets a real one, other ranks a do-nothing one, so the loop never branches on rank."""
from __future__ import annotations

import os
import time
from pathlib import Path

from model.mlflow_upload import UNSENT_FILE, MlflowUploader
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

    def close(self, timeout_s: float = 60.0) -> None:
        pass


class Rank0Tracker:
    """Writes metrics.jsonl at once (the orchestrator follows it) and batches points to MLflow, which a thread
    sends (model/mlflow_upload.py): a tracking server that is down never stops training."""

    def __init__(self, out_dir: Path, metrics_file: str, events_file: str, flush_every: int = 10,
                 retry_s: float = 30.0):
        self.metrics_path, self.events_path = out_dir / metrics_file, out_dir / events_file
        self.flush_every, self.pending, self.uploader = flush_every, [], None
        run_id, uri = os.environ.get("MLFLOW_RUN_ID"), os.environ.get("MLFLOW_TRACKING_URI")
        if run_id and uri:
            from mlflow.tracking import MlflowClient  # heavy import, rank 0 only

            # fail a request in seconds, not MLflow's minutes of retries: the uploader retries on its own clock
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
            self.uploader = MlflowUploader(MlflowClient(tracking_uri=uri), run_id, self.event, retry_s,
                                          out_dir / UNSENT_FILE)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        append_jsonl(self.metrics_path, {"step": step, **metrics})
        self.pending.append((step, metrics))
        if len(self.pending) >= self.flush_every:
            self.flush()

    def event(self, record: dict) -> None:
        append_jsonl(self.events_path, record)

    def tag(self, key: str, value: str) -> None:
        """A run tag in MLflow (a straggler's name), where a person looks first."""
        if self.uploader:
            self.uploader.put_tag(key, value)

    def flush(self) -> None:
        if not self.uploader or not self.pending:
            self.pending = []
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        points = [Metric(k, float(v), now, step) for step, m in self.pending for k, v in m.items()
                  if isinstance(v, (int, float))]  # per-rank lists stay in metrics.jsonl
        self.uploader.put_points(points)
        self.pending = []

    def close(self, timeout_s: float = 60.0) -> None:
        """The last points out (up to timeout_s), and what never reached MLflow said."""
        self.flush()
        if self.uploader:
            self.uploader.close(timeout_s)
