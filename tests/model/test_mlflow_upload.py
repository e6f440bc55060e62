"""A tracking server that dies mid-run: rank 0's tracker keeps training's pace, says MLflow is down, and delivers
every queued point once the server is back (a real `mlflow server`, stopped and started again on its database)."""
import json
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from model.protocol import EVENTS_FILE, METRICS_FILE, read_jsonl
from model.mlflow_upload import UNSENT_FILE
from model.tracking import Rank0Tracker
from tasks.common.ports import free_port

pytestmark = pytest.mark.slow


def start_mlflow(root: Path, port: int) -> subprocess.Popen:
    mlflow = Path(sys.executable).parent / "mlflow"
    proc = subprocess.Popen([str(mlflow), "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
                             "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
                             "--artifacts-destination", str(root / "artifacts")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not come up")


def stop(proc: subprocess.Popen) -> None:
    import os

    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def wait_for_event(path: Path, name: str, timeout_s: float) -> dict:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        found = [e for e in read_jsonl(path) if e["event"] == name]
        if found:
            return found[0]
        time.sleep(0.5)
    raise AssertionError(f"no {name} event in {timeout_s} s: {read_jsonl(path)}")


def test_training_outlives_a_dead_tracking_server_and_mlflow_gets_every_point(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    port = free_port()
    server = start_mlflow(tmp_path, port)
    uri = f"http://127.0.0.1:{port}"
    client = MlflowClient(tracking_uri=uri)
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # what the tracker sets on a rank, undone after
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    tracker = Rank0Tracker(tmp_path, METRICS_FILE, EVENTS_FILE, flush_every=1, retry_s=1.0)
    try:
        tracker.log(1, {"loss": 5.0})
        stop(server)
        started = time.monotonic()
        for step in range(2, 11):
            tracker.log(step, {"loss": 5.0 - step / 10})
        assert time.monotonic() - started < 5  # a dead server holds no step (MLflow alone retried for minutes)
        down = wait_for_event(tmp_path / EVENTS_FILE, "mlflow_unreachable", 60)
        assert down["queued_points"] >= 1
        server = start_mlflow(tmp_path, port)
        wait_for_event(tmp_path / EVENTS_FILE, "mlflow_recovered", 90)
        tracker.tag("straggler", "rank 1")
        tracker.close(60)
        history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, "loss")
        assert sorted(m.step for m in history) == list(range(1, 11))  # every point, late ones included
        assert MlflowClient(tracking_uri=uri).get_run(run_id).data.tags["straggler"] == "rank 1"
        assert not [e for e in read_jsonl(tmp_path / EVENTS_FILE) if e["event"] == "mlflow_backlog"]
        assert len(read_jsonl(tmp_path / METRICS_FILE)) == 10
    finally:
        stop(server)


def test_what_never_reached_mlflow_is_said_at_the_end(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    port = free_port()
    server = start_mlflow(tmp_path, port)
    client = MlflowClient(tracking_uri=f"http://127.0.0.1:{port}")
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    stop(server)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MLFLOW_RUN_ID", run_id)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")  # what the tracker sets on a rank, undone after
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "15")
    tracker = Rank0Tracker(tmp_path, METRICS_FILE, EVENTS_FILE, flush_every=1)  # retried every 30 s
    for step in range(1, 4):
        tracker.log(step, {"loss": 1.0, "lr": 0.1})
    wait_for_event(tmp_path / EVENTS_FILE, "mlflow_unreachable", 60)
    started = time.monotonic()
    tracker.close(60)
    assert time.monotonic() - started < 20  # one last try, not retries until the deadline while every rank waits
    assert len(read_jsonl(tmp_path / UNSENT_FILE)) == 3  # kept for the orchestrator to send
    [backlog] = [e for e in read_jsonl(tmp_path / EVENTS_FILE) if e["event"] == "mlflow_backlog"]
    assert backlog["points_not_sent"] == 6 and json.loads(json.dumps(backlog))
