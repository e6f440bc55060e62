"""Planted secrets go nowhere: not into a run's files, MLflow's store, Prefect's database and logs, or `ps`."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from model.protocol import read_jsonl
from tests.conftest import prefect_home, tiny_dict
from tests.flows.conftest import run_flow
from tests.tasks.train.test_launch import fake_ssh

pytestmark = pytest.mark.slow

MIRROR_PASSWORD = "mirrorPW-planted-4711"
MLFLOW_PASSWORD = "mlflowPW-planted-0815"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class CommandLines(threading.Thread):
    """Every process's command line, sampled while the run goes on."""

    def __init__(self):
        super().__init__(daemon=True)
        self.seen, self.stop = set(), threading.Event()

    def run(self):
        while not self.stop.wait(0.2):
            for p in psutil.process_iter(["cmdline"]):
                self.seen.add(" ".join(p.info["cmdline"] or []))


def test_planted_secrets_are_nowhere_in_what_a_run_leaves(prepared_run, tmp_path, monkeypatch, migrated_prefect_db):
    _, prepared = prepared_run
    root = tmp_path / "run"
    for stage in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / stage, root / stage)
    ssh = fake_ssh(tmp_path)  # the per-node launch through "ssh", whose command line `ps` shows
    data = tiny_dict(root, train={
        "steps": 2, "save_every": 2, "warmup_steps": 1, "export_hf": False,
        "mirror_url": f"ftp://backup:{MIRROR_PASSWORD}@127.0.0.1:{closed_port()}/runs",
        "hosts": [{"name": "localhost", "slots": 2}], "launch": "per_node", "node_command": [ssh, "{host}"],
        "master_addr": "127.0.0.1"})
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", MLFLOW_PASSWORD)
    monkeypatch.setenv("PREFECT_HOME", str(prefect_home(tmp_path / "prefect-home", migrated_prefect_db)))
    sampler = CommandLines()
    sampler.start()
    try:
        result = run_flow("train", data, tmp_path)
    finally:
        sampler.stop.set()
        sampler.join()
    assert result["latest_step"] == 2
    events = read_jsonl(root / "train" / "events.jsonl")
    [failed] = [e for e in events if e["event"] == "mirror_failed"]  # unreachable: reported, training went on
    assert failed["url"].startswith("ftp://backup:***@127.0.0.1")
    assert result["mirror"]["failed"] == ["step_00000002"] and not result["mirror"]["ok"]  # said, not only logged
    assert '"mirror"' in (root / "train" / "result.json").read_text()
    assert any("ssh" in line and "deepspeed" in line for line in sampler.seen)  # the sampler saw the launch
    config_file = tmp_path / "train.yaml"  # the user's own input
    leaks = [str(p) for p in tmp_path.rglob("*") if p.is_file() and p != config_file
             and any(s.encode() in p.read_bytes() for s in (MIRROR_PASSWORD, MLFLOW_PASSWORD))]
    assert not leaks
    assert not [line for line in sampler.seen if MIRROR_PASSWORD in line or MLFLOW_PASSWORD in line]
    ssh_lines = (tmp_path / "ssh.lines").read_text()  # every line the node command got: the port probe, the launch
    assert "deepspeed" in ssh_lines and MLFLOW_PASSWORD not in ssh_lines and MIRROR_PASSWORD not in ssh_lines
    assert (tmp_path / "prefect-home").is_dir() and (root / "mlflow.db").is_file()  # the stores were searched
    assert '"mirror_url": "ftp://backup:***@' in (root / "train" / "spec.json").read_text()


def test_a_killed_orchestrator_leaves_no_secrets_file(prepared_run, tmp_path, migrated_prefect_db):
    """`pretrain train` SIGKILLed while its ranks train: rank 0 removed the secrets file once every rank had read
    it, so nothing on the run root holds the password the ranks were given."""
    _, prepared = prepared_run
    root = tmp_path / "run"
    for stage in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / stage, root / stage)
    data = tiny_dict(root, train={"steps": 2000, "save_every": 10**6, "warmup_steps": 1, "export_hf": False,
                                  "eval_every": 0})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(data))
    env = {**os.environ, "MLFLOW_TRACKING_PASSWORD": MLFLOW_PASSWORD,
           "PREFECT_HOME": str(prefect_home(tmp_path / "prefect-home", migrated_prefect_db))}
    root_dir = Path(__file__).resolve().parents[2]
    cli = subprocess.Popen([sys.executable, "-m", "cli", "train", "--config", str(config)], cwd=root_dir,
                           env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    metrics, deadline = root / "train" / "metrics.jsonl", time.time() + 300
    while not (metrics.is_file() and '"step"' in metrics.read_text()):  # the ranks are past their start
        assert cli.poll() is None and time.time() < deadline, "training did not start"
        time.sleep(0.5)
    ranks = [p for p in psutil.process_iter(["cmdline"]) if str(root) in " ".join(p.info["cmdline"] or [])]
    cli.send_signal(signal.SIGKILL)
    cli.wait()
    _, alive = psutil.wait_procs(ranks, timeout=120)  # the launcher's ranks follow their dead parent
    assert not alive
    assert not (root / "train" / ".secrets.json").exists()
    assert not [p for p in root.rglob("*") if p.is_file() and MLFLOW_PASSWORD.encode() in p.read_bytes()]
