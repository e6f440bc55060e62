"""The orchestrator's MLflow writes, kept when the tracking server is down and sent when it is back.

A stage checks the server when it starts (flows/common.py tracking_target). If the server dies later, a write
to it (params, metrics, tags, an artifact, the run's end, the lineage) used to fail the stage after MLflow's
minutes of retries, though the stage's own work was done, and left the run RUNNING. Now a write that fails
while the server does not answer its health check is appended to `<run root>/mlflow_pending.jsonl`, with the
error said once, and every later write of the stage goes behind it, so MLflow gets them in order. The journal
is sent, oldest first, when a stage next starts, when `pretrain status` runs and at a stage's end; a record
leaves it once MLflow took it. A record MLflow refuses when it is up (the run deleted meanwhile) moves to
`mlflow_refused.jsonl` with the reason. Rank 0's metric points that never reached MLflow during training
(model/mlflow_upload.py leaves them in the train folder's `mlflow_unsent.jsonl`) join the journal when the
train stage ends.
"""
from __future__ import annotations

import fcntl
import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from flows import tracking
from model.mlflow_upload import UNSENT_FILE
from model.protocol import append_jsonl, read_jsonl

PENDING_FILE = "mlflow_pending.jsonl"
REFUSED_FILE = "mlflow_refused.jsonl"
KEPT = "pending"  # what a write kept for later returns (a model version registered later is "pending")


class Journal:
    def __init__(self, root: Path, uri: str):
        self.root, self.uri = Path(root), uri
        self.path = self.root / PENDING_FILE
        # a write fails in seconds, not after MLflow's minutes of retries: the journal keeps it instead
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")

    def write(self, op: str, run_id: str, **args):
        """The write done now (what it returned), or KEPT for later when the server cannot be reached."""
        with self._locked():
            if not self.path.is_file():
                try:
                    return tracking.WRITES[op](self.uri, run_id, **args)
                except Exception as err:  # noqa: BLE001 - kept if the server is down, raised otherwise
                    self._keep_or_raise(err)
            append_jsonl(self.path, {"op": op, "run_id": run_id, "args": args})
            return KEPT

    def pending(self) -> int:
        return len(read_jsonl(self.path))

    def replay(self) -> tuple[int, int]:
        """(sent, still pending): what MLflow took of the journal, oldest first, until the server fails."""
        with self._locked():
            records = read_jsonl(self.path)
            for i, record in enumerate(records):
                try:
                    tracking.WRITES[record["op"]](self.uri, record["run_id"], **record["args"])
                except Exception as err:  # noqa: BLE001 - down: keep the rest; refused: set it aside, said
                    if tracking.unreachable(self.uri, timeout_s=5.0):
                        self._rewrite(records[i:])
                        return i, len(records) - i
                    append_jsonl(self.root / REFUSED_FILE, {**record, "error": f"{type(err).__name__}: {err}"[:500]})
                    print(f"warning: MLflow refused a kept {record['op']} write of run {record['run_id']} ("
                          f"{type(err).__name__}); it is in {self.root / REFUSED_FILE}", file=sys.stderr, flush=True)
                self._rewrite(records[i + 1:])  # sent: never sent twice, should this process die now
            self.path.unlink(missing_ok=True)
            return len(records), 0

    def adopt_unsent(self, folder: Path) -> int:
        """Rank 0's points that never reached MLflow (`mlflow_unsent.jsonl` in a training folder) into the journal;
        how many points."""
        unsent = Path(folder) / UNSENT_FILE
        points = 0
        for record in read_jsonl(unsent):
            op = "points" if "points" in record else "tags"
            with self._locked():
                append_jsonl(self.path, {"op": op, "run_id": record["run_id"], "args": {op: record[op]}})
            points += len(record.get("points", ()))
        unsent.unlink(missing_ok=True)
        return points

    def _keep_or_raise(self, err: Exception) -> None:
        problem = tracking.unreachable(self.uri, timeout_s=5.0)
        if problem is None:
            raise err
        print(f"warning: {problem}. The stage goes on; its MLflow writes are kept in {self.path} and sent when a "
              f"stage next starts or `pretrain status` runs with the server up", file=sys.stderr, flush=True)

    def _rewrite(self, records: list[dict]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        os.replace(tmp, self.path)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """One writer of the journal at a time across processes (an eval flow beside a stage)."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{PENDING_FILE}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
