"""Where a run's ranks meet: a port chosen on the master host, kept for every relaunch of the run.

A port found free on the launching machine says nothing about the master node
of a multi-node run, so the port is probed there (through train.cluster.node_command, or
ssh for DeepSpeed's own ssh launcher). It is then written to
<train_dir>/master_port and reused by every later launch of the run (recovery
relaunches, resumes, Prefect retries), so a firewall rule or a person debugging
a hang sees one address; a relaunch waits for the port to be released by the
attempt before it rather than moving.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from pretrain.config import TrainConfig
from tasks.common.hosts import on_node

PORT_FILE = "master_port"
# binds as torch's TCPStore does (SO_REUSEADDR): free unless something listens there; port 0 asks for any free one
_PROBE = ("import socket, sys; s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
          "s.bind(('', int(sys.argv[1]))); print(s.getsockname()[1])")


class PortUnavailable(RuntimeError):
    """The run's master port is taken on the master host and was not released in time."""


def is_local(host: str) -> bool:
    """Whether `host` names this machine (one of its addresses binds here)."""
    if host in ("localhost", socket.gethostname(), socket.getfqdn()):
        return True
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    for address in addresses:
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        try:
            with socket.socket(family) as s:
                s.bind((address, 0))
            return True
        except OSError:
            continue
    return False


def probe_port(host: str, port: int, train: TrainConfig, env: dict[str, str], timeout_s: float = 60) -> int | None:
    """Bind `port` (0: any) on `host`: the port when it is free there, None when it is taken."""
    cmd = [sys.executable, "-c", _PROBE, str(port)]
    if not is_local(host):
        cmd = on_node(train.cluster.node_command or ["ssh", "{host}"], host, cmd, env, train.cluster.node_command_shell)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise PortUnavailable(f"cannot probe a port on master host {host} ({err}); check train.cluster.node_command, "
                              f"or set train.cluster.master_port") from None
    if proc.returncode == 0 and proc.stdout.strip().isdigit():
        return int(proc.stdout.strip())
    if "Address already in use" in proc.stderr:
        return None
    raise PortUnavailable(f"cannot probe a port on master host {host} (exit {proc.returncode}: "
                          f"{proc.stderr.strip()[-300:]}); check train.cluster.node_command, or set train.cluster.master_port")


def master_port(train: TrainConfig, master_host: str, train_dir: Path, env: dict[str, str],
                wait_s: float = 60.0, poll_s: float = 1.0) -> int:
    """train.cluster.master_port, else the run's kept port (chosen on the master host by its first launch), once it is free."""
    kept = Path(train_dir) / PORT_FILE
    port = train.cluster.master_port or (int(kept.read_text()) if kept.is_file() else None)
    if port is None:
        port = probe_port(master_host, 0, train, env)
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(f"{port}\n")
        return port
    deadline = time.monotonic() + wait_s
    while probe_port(master_host, port, train, env) is None:  # the attempt before may still be letting go
        if time.monotonic() > deadline:
            raise PortUnavailable(
                f"master port {port} on {master_host} is still in use after {wait_s:.0f} s (an earlier attempt of this "
                f"run that did not exit, or another program); stop it, or set train.cluster.master_port to another port"
                + ("" if train.cluster.master_port else f" (this run keeps its port in {kept})"))
        time.sleep(poll_s)
    return port
