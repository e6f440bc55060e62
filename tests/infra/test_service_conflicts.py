"""infra/service_conflicts.py and local.sh's use of it: another checkout's server or worker is named, with the fix,
before this checkout deploys to it."""
import os
import socket
import subprocess
import sys
import time

import pytest

from infra.service_conflicts import foreign_workers, port_conflict
from tests.conftest import ROOT

LISTEN = ("import socket, sys, time\n"
          "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
          "print(s.getsockname()[1], flush=True); time.sleep(120)\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def listener():
    """A process listening on a free loopback port, started through a shell as a server's workers are: (the
    shell's pid, the port)."""
    shell = subprocess.Popen(["bash", "-c", f'"{sys.executable}" -c "$0"; true', LISTEN], stdout=subprocess.PIPE,
                             text=True)
    port = int(shell.stdout.readline())
    yield shell.pid, port
    subprocess.run(["pkill", "-P", str(shell.pid)])
    shell.kill()
    shell.wait()


def test_a_port_held_by_another_process_is_named_with_the_fix(listener, tmp_path):
    shell, port = listener
    problem = port_conflict("prefect-server", port, tmp_path / "no-pidfile")
    listening = subprocess.run(["pgrep", "-P", str(shell)], capture_output=True, text=True).stdout.split()
    assert problem and f"port {port}" in problem and f"pid {listening[0]}" in problem
    assert "socket.socket()" in problem and "PREFECT_PORT=" in problem and "make stop" in problem


def test_a_port_held_by_this_checkouts_server_or_a_process_it_started_is_no_conflict(listener, tmp_path):
    shell, port = listener
    (tmp_path / "prefect-server").write_text(str(shell))  # the shell started the listener
    assert port_conflict("prefect-server", port, tmp_path / "prefect-server") is None


def test_a_free_port_is_no_conflict(tmp_path):
    assert port_conflict("mlflow-server", free_port(), tmp_path / "none") is None


@pytest.fixture
def worker(tmp_path):
    """A process with a Prefect worker's command line and API URL, a free port (a script named prefect that
    waits); its `port` is that port."""
    script = tmp_path / "bin" / "prefect"
    script.parent.mkdir()
    script.write_text(f"#!{sys.executable}\nimport time\ntime.sleep(120)\n")
    script.chmod(0o755)
    port = free_port()
    env = {**os.environ, "PREFECT_API_URL": f"http://127.0.0.1:{port}/api"}
    process = subprocess.Popen([str(script), "worker", "start", "--pool", "local"], env=env)
    time.sleep(0.3)
    process.port = port
    yield process
    process.kill()
    process.wait()


def test_a_worker_of_another_checkout_polling_this_api_is_named(worker, tmp_path):
    problem = foreign_workers(f"http://127.0.0.1:{worker.port}/api/", [tmp_path / "prefect-worker"])
    assert problem and f"pid {worker.pid}" in problem and "worker start --pool local" in problem


def test_this_checkouts_worker_and_a_worker_of_another_server_are_not(worker, tmp_path):
    (tmp_path / "prefect-worker").write_text(str(worker.pid))
    assert foreign_workers(f"http://127.0.0.1:{worker.port}/api", [tmp_path / "prefect-worker"]) is None
    assert foreign_workers(f"http://127.0.0.1:{worker.port + 1}/api", []) is None


def test_local_sh_up_stops_before_starting_anything_when_its_port_is_taken(listener, tmp_path):
    _, port = listener
    env = {**os.environ, "PRETRAIN_STATE": str(tmp_path / "state"), "PREFECT_PORT": str(port)}
    up = subprocess.run(["bash", "infra/local.sh", "up"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=60)
    assert up.returncode == 1 and f"port {port}, which prefect-server needs" in up.stderr
    assert not list((tmp_path / "state" / "pids").iterdir())  # nothing started, nothing to stop


def test_local_sh_up_stops_before_starting_anything_when_another_checkouts_worker_polls_its_api(worker, tmp_path):
    env = {**os.environ, "PRETRAIN_STATE": str(tmp_path / "state"), "PREFECT_PORT": str(worker.port),
           "MLFLOW_PORT": str(free_port())}
    up = subprocess.run(["bash", "infra/local.sh", "up"], cwd=ROOT, env=env, capture_output=True, text=True,
                        timeout=60)
    assert up.returncode == 1 and f"pid {worker.pid}" in up.stderr and "would take its flow runs" in up.stderr
    assert not list((tmp_path / "state" / "pids").iterdir())
