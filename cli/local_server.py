"""One temporary Prefect server for a CLI run: shared by every process of the run, gone when the run ends.

Without PREFECT_API_URL, Prefect starts a temporary server in each process that
talks to the API: every process-pool worker of a stage started its own (3-5 a
run). On a busy 2-core machine they timed out after 20 s ("Timed out while
attempting to connect to ephemeral Prefect API server"), lost shard tasks,
collided on ports, and one outlived its run by half an hour. So the CLI starts
one server before anything imports Prefect, exports its URL to every child,
waits for it as long as a loaded machine needs, and stops it at the end; the
server dies with the CLI even on SIGKILL (PR_SET_PDEATHSIG from the main thread).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from tasks.common.lifetime import kill_group, sigterm_on_parent_death
from tasks.common.ports import free_port

STARTUP_TIMEOUT_S = 300.0  # a first start migrates a new database; a loaded 2-core machine is slow at it


class ServerFailed(RuntimeError):
    pass


def server_command(port: int) -> list[str]:
    prefect = shutil.which("prefect", path=os.path.dirname(sys.executable)) or "prefect"
    return [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(port), "--no-ui", "--no-services",
            "--analytics-off"]


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def start_server(timeout_s: float = STARTUP_TIMEOUT_S) -> tuple[subprocess.Popen, str, Path]:
    """(process, API URL, log file) of a new server, once it answers; ServerFailed with its log otherwise."""
    log = Path(tempfile.mkstemp(prefix="pretrain-prefect-server-", suffix=".log")[1])
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(server_command(port), stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=sigterm_on_parent_death,
                                env={**os.environ, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    url = f"http://127.0.0.1:{port}/api"
    deadline = time.monotonic() + timeout_s
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            tail = log.read_text(errors="replace")[-2000:]
            raise ServerFailed(f"the temporary Prefect server did not come up in {timeout_s:.0f} s (exit "
                               f"{proc.returncode}); its log:\n{tail}\nStart one yourself (`prefect server start`) and "
                               f"set PREFECT_API_URL, or see infra/local.sh")
        time.sleep(0.5)
    return proc, url, log


def _drain_logs() -> None:
    """Send the run's last log lines before the server goes (they are queued in a background worker)."""
    if "prefect" in sys.modules:
        from prefect.logging.handlers import APILogWorker

        APILogWorker.drain_all(timeout=10)


def stop_server(proc: subprocess.Popen) -> None:
    kill_group(proc, grace_s=15.0)
    proc.wait()


@contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API this run and all its processes use: PREFECT_API_URL when set, else one temporary server."""
    if os.environ.get("PREFECT_API_URL"):
        yield os.environ["PREFECT_API_URL"]
        return
    proc, url, log = start_server()
    os.environ["PREFECT_API_URL"] = url  # before Prefect is imported: this process and every child read it
    try:
        yield url
    finally:
        _drain_logs()
        os.environ.pop("PREFECT_API_URL", None)
        stop_server(proc)
        log.unlink(missing_ok=True)
