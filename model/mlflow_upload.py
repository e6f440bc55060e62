"""Rank 0's MLflow uploads, from a thread of their own: a slow or dead tracking server never holds a step.

A tracking server that died used to block rank 0 inside `log_batch` (MLflow retries for minutes), the hang
watch then killed the ranks, and the relaunch could not create its run. Now points and tags queue here and a
thread sends them; when the server cannot be reached they stay queued (every point is in metrics.jsonl as
well) and are retried every `retry_s`. The first failure and the recovery are events and lines on stderr, so
the run says what MLflow is missing and when it caught up; what is still queued at the end is an event too, and
is written to `mlflow_unsent.jsonl` beside the metrics, from where the orchestrator sends it once the server is
back (flows/mlflow_journal.py).
"""
from __future__ import annotations

import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Callable

from model.protocol import append_jsonl

MAX_QUEUED_POINTS = 2_000_000  # a week of steps at 60 metrics each; beyond it the oldest are dropped (said)
BATCH = 1000                   # MLflow caps a log_batch at 1000 metrics
UNSENT_FILE = "mlflow_unsent.jsonl"


class MlflowUploader:
    def __init__(self, client, run_id: str, report: Callable[[dict], None], retry_s: float = 30.0,
                 unsent: Path | None = None):
        self.client, self.run_id, self.report, self.retry_s, self.unsent = client, run_id, report, retry_s, unsent
        self.queue: deque = deque()  # ("points", [Metric]) or ("tag", (key, value))
        self.lock, self.wake, self.closing = threading.Lock(), threading.Event(), False
        self.down_since: float | None = None
        self.dropped = 0
        self.thread = threading.Thread(target=self._run, name="mlflow-upload", daemon=True)
        self.thread.start()

    def put_points(self, points: list) -> None:
        with self.lock:
            for i in range(0, len(points), BATCH):
                self.queue.append(("points", points[i:i + BATCH]))
            while self._queued_points() > MAX_QUEUED_POINTS:
                kind, item = self.queue.popleft()
                self.dropped += len(item) if kind == "points" else 0
        self.wake.set()

    def put_tag(self, key: str, value: str) -> None:
        with self.lock:
            self.queue.append(("tag", (key, value)))
        self.wake.set()

    def _queued_points(self) -> int:
        return sum(len(item) for kind, item in self.queue if kind == "points")

    def _run(self) -> None:
        while True:
            self.wake.wait(self.retry_s if self.down_since else None)
            self.wake.clear()
            sent = self.send()
            # closing: one more try, not retries until the deadline; what is left goes to the unsent file, and
            # every rank would otherwise wait at exit for a server that is down
            if self.closing and (sent or self.down_since is not None):
                return

    def send(self) -> bool:
        """Send what is queued, oldest first; False (all of it kept) at the first failure."""
        while True:
            with self.lock:
                if not self.queue:
                    return True
                kind, item = self.queue[0]
            try:
                if kind == "points":
                    self.client.log_batch(self.run_id, metrics=item)
                else:
                    self.client.set_tag(self.run_id, *item)
            except Exception as err:  # noqa: BLE001 - any failure of the server or the network: keep, retry
                self._went_down(err)
                return False
            with self.lock:
                self.queue.popleft()
            self._came_back()

    def _went_down(self, err: Exception) -> None:
        if self.down_since is not None:
            return
        self.down_since = time.time()
        with self.lock:
            queued = self._queued_points()
        print(f"warning: MLflow cannot be reached ({type(err).__name__}: {str(err)[:200]}); training goes on, "
              f"{queued} metric point(s) queued for it and retried every {self.retry_s:.0f} s (all of them are in "
              f"metrics.jsonl)", file=sys.stderr, flush=True)
        self.report({"event": "mlflow_unreachable", "error": f"{type(err).__name__}: {str(err)[:300]}",
                     "queued_points": queued})

    def _came_back(self) -> None:
        if self.down_since is None:
            return
        down_s, self.down_since = time.time() - self.down_since, None
        print(f"MLflow reachable again after {down_s:.0f} s; the queued points are being sent", file=sys.stderr,
              flush=True)
        self.report({"event": "mlflow_recovered", "down_s": round(down_s, 1)})

    def close(self, timeout_s: float = 60.0) -> None:
        """Give the queue until timeout_s to drain, or one last try when the server is down; say what is left (and
        what was dropped)."""
        self.closing = True
        self.wake.set()
        self.thread.join(timeout_s)
        with self.lock:
            left, queue = self._queued_points(), list(self.queue)
        if queue and self.unsent is not None:
            for kind, item in queue:  # for the orchestrator to send once the server is back
                append_jsonl(self.unsent, {"run_id": self.run_id, **(
                    {"points": [[m.key, m.value, m.timestamp, m.step] for m in item]} if kind == "points"
                    else {"tags": {item[0]: item[1]}})})
        if left or self.dropped:
            print(f"warning: {left} metric point(s) never reached MLflow ({self.dropped} dropped while it was down"
                  f"); they are in metrics.jsonl{' and ' + str(self.unsent) if self.unsent else ''}",
                  file=sys.stderr, flush=True)
            self.report({"event": "mlflow_backlog", "points_not_sent": left, "points_dropped": self.dropped})
