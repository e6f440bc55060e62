"""Multi-node launch: the hostfile, and one DeepSpeed launcher per node (`--no_ssh --node_rank k`).

In `ssh` mode DeepSpeed's own launcher reaches every node from this one (pdsh,
or its openmpi / slurm backends); it already exports NCCL_*, MLFLOW_* and
PYTHON* to the ranks, and everything else the ranks need goes in a DS_ENV_FILE.
In `per_node` mode this module starts one launcher per node, each through
`train.cluster.node_command` (ssh, srun, ... or nothing: on this machine), streams every
node's output with a `[node k]` prefix, and fails fast: when one node's launcher
exits non-zero, the others are killed and the error names that node and its last lines.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from model.protocol import MIRROR_URL_ENV, SECRETS_ENV
from model.redact import is_secret, scrub, url_passwords
from pretrain.config import HostConfig, TrainConfig
from tasks.common.hosts import PROPAGATED_PREFIXES, on_node, propagated_env, write_hostfile

# what DeepSpeed's ssh launcher exports to the ranks, in a line it wraps in double quotes only
DEEPSPEED_EXPORT_PREFIXES = ("NCCL", "MLFLOW", "PYTHON", "MV2", "UCX")
_UNSAFE_IN_DOUBLE_QUOTES = ('"', "$", "`", "\\", "\n")


class LaunchFailed(RuntimeError):
    def __init__(self, message: str, exit_code: int, node: int | None):
        super().__init__(message)
        self.exit_code, self.node = exit_code, node


SECRETS_FILE = ".secrets.json"
# secret variables of these kinds are the ranks' (MLflow, object storage for the mirror, NCCL, ...)
RANK_SECRET_PREFIXES = PROPAGATED_PREFIXES + ("AWS_", "GOOGLE_", "AZURE_", "FSSPEC_")


@contextmanager
def secrets_for_ranks(env: dict[str, str], mirror_url: str | None,
                      out_dir: Path) -> Iterator[tuple[dict[str, str], Callable[[str], str]]]:
    """(the launch environment without the ranks' secrets, a function masking them in the launch's output).

    The secrets go to <out_dir>/.secrets.json, readable by the user only, until every rank has read it (rank 0
    removes it then, model.protocol.forget_secrets, so a killed orchestrator leaves none behind) or the launch
    ends; a file an earlier launch left is removed first. So no password is on a command line (DeepSpeed's pdsh exports, `env K=V`
    through ssh), in `ps`, in launcher.log or in the Prefect logs.
    """
    secrets = {k: v for k, v in env.items() if k.startswith(RANK_SECRET_PREFIXES) and is_secret(k, v)}
    if mirror_url and url_passwords(mirror_url):
        secrets[MIRROR_URL_ENV] = mirror_url
    values = [*secrets.values(), *(p for v in secrets.values() for p in url_passwords(v))]

    def clean(line: str) -> str:
        return scrub(line, values)

    path = Path(out_dir) / SECRETS_FILE
    path.unlink(missing_ok=True)
    if not secrets:
        yield env, clean
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)  # an older file of other permissions keeps them through O_TRUNC
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(secrets, f)
    try:
        yield {**{k: v for k, v in env.items() if k not in secrets}, SECRETS_ENV: str(path)}, clean
    finally:
        path.unlink(missing_ok=True)


def check_deepspeed_exports(env: dict[str, str]) -> None:
    """DeepSpeed's ssh launcher exports variables to the nodes in double quotes at most: refuse the values that
    would arrive changed (or run as commands) instead of passing them on."""
    exported = {**{k: v for k, v in env.items() if k.startswith(DEEPSPEED_EXPORT_PREFIXES)}, **ds_file_env(env)}
    bad = sorted(k for k, v in exported.items() if any(c in v for c in _UNSAFE_IN_DOUBLE_QUOTES))
    if bad:
        raise ValueError(f"environment variable(s) {bad} hold a character (\" $ ` \\ or a newline) that DeepSpeed's "
                         f"ssh launcher does not quote, so the nodes would get another value; use train.cluster.launch: "
                         f"per_node (which quotes every value), or change the value")


def ds_file_env(env: dict[str, str]) -> dict[str, str]:
    """What the ranks need that DeepSpeed's ssh launcher does not export by itself (GLOO_*, TORCH_*, CUDA_*, ...)."""
    return {k: v for k, v in propagated_env(env).items() if not k.startswith(DEEPSPEED_EXPORT_PREFIXES)}


def write_ds_env_file(env: dict[str, str], path: Path) -> Path:
    """DeepSpeed's .deepspeed_env format (KEY=VALUE lines), for the ssh launcher (DS_ENV_FILE points at it)."""
    extra = ds_file_env(env)
    Path(path).write_text("".join(f"{k}={v}\n" for k, v in sorted(extra.items())))
    return Path(path)


def node_commands(deepspeed: str, hostfile: Path, hosts: list[HostConfig], master_addr: str, port: int,
                  program: list[str], node_command: list[str], env: dict[str, str],
                  shell: bool | None = None) -> list[list[str]]:
    """One `deepspeed --no_ssh --node_rank k` per node, wrapped in node_command with the environment it needs."""
    cmds = []
    for rank, host in enumerate(hosts):
        launcher = [deepspeed, "--hostfile", str(hostfile), "--no_ssh", "--node_rank", str(rank),
                    "--master_addr", master_addr, "--master_port", str(port), *program]
        cmds.append(on_node(node_command, host.name, launcher, env, shell))
    return cmds


class NodeProcess:
    def __init__(self, rank: int, cmd: list[str], env: dict[str, str], preexec: Callable | None):
        self.rank, self.tail = rank, deque(maxlen=30)
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True, preexec_fn=preexec, bufsize=1)

    def pump(self, log_line: Callable[[str], None], log, lock: threading.Lock, clean: Callable[[str], str]) -> None:
        for line in self.proc.stdout:
            line = clean(line.rstrip("\n"))
            self.tail.append(line)
            with lock:
                log.write(f"[node {self.rank}] {line}\n")
                log_line(f"[node {self.rank}] {line}")


@contextmanager
def sigterm_kills(kill_all: Callable[[], None]):
    """While inside: SIGTERM (Prefect cancelling the flow run) kills the launchers' process groups first.

    Ranks save a checkpoint on SIGTERM and the kill gives them a moment; then the
    previous handler turns the signal into a cancellation.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_term(signum, frame):
        kill_all()
        if callable(previous):
            previous(signum, frame)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_nodes(cmds: list[list[str]], env: dict[str, str], log_line: Callable[[str], None], log_path: Path,
              kill: Callable[[subprocess.Popen], None], preexec: Callable | None = None,
              poll_s: float = 0.2, clean: Callable[[str], str] = lambda line: line,
              remote: RemoteRanks | None = None) -> int:
    """Run every node's launcher; 0 when all finish cleanly, else raise LaunchFailed naming the first failed node.
    With `remote`, SIGTERM reaches the ranks on the other hosts first, and whatever of the job is left there is
    killed at the end (killing a local ssh client does not end the remote command unless ssh passes a hang-up)."""
    lock = threading.Lock()
    with open(log_path, "a", encoding="utf-8") as log:
        nodes = [NodeProcess(rank, cmd, env, preexec) for rank, cmd in enumerate(cmds)]
        pumps = [threading.Thread(target=n.pump, args=(log_line, log, lock, clean), daemon=True) for n in nodes]
        for t in pumps:
            t.start()

        def on_term() -> None:
            if remote:
                remote.stop([n.proc for n in nodes])
            for n in nodes:
                kill(n.proc)

        try:
            with sigterm_kills(on_term):
                failed = _wait_all(nodes, poll_s)
        finally:
            for n in nodes:
                kill(n.proc)
            if remote:
                remote.reap()
            for t in pumps:
                t.join(timeout=5)
    if failed is None:
        return 0
    code = failed.proc.returncode
    last = "\n".join(f"  {line}" for line in list(failed.tail)[-10:])
    raise LaunchFailed(f"node {failed.rank} failed (launcher exit code {code}); the other nodes were stopped. "
                       f"Its last lines:\n{last}", code, failed.rank)


@dataclass
class RemoteRanks:
    """A per-node job's processes on the other hosts, reached through node_command (pkill by the job's spec path,
    which only this run's launchers and ranks carry on their command lines)."""
    node_command: list[str]
    hosts: list[str]
    spec_path: Path
    program: str
    shell: bool | None = None
    grace_s: float = 300.0

    def signal(self, sig: str, pattern: str) -> None:
        for host in self.hosts:
            cmd = on_node(self.node_command, host, ["pkill", f"-{sig}", "-f", pattern], {}, self.shell)
            try:
                subprocess.run(cmd, capture_output=True, timeout=30)
            except (OSError, subprocess.TimeoutExpired):
                pass  # a host that cannot be reached has nothing of ours we could stop

    def stop(self, local: list[subprocess.Popen], poll_s: float = 0.5) -> None:
        """SIGTERM to the ranks (they save, then their launchers exit, then the ssh clients), up to grace_s."""
        self.signal("TERM", f"[-]m {self.program} --spec {self.spec_path}")  # '[-]': a pattern may not start with -
        deadline = time.monotonic() + self.grace_s
        while time.monotonic() < deadline and any(p.poll() is None for p in local):
            time.sleep(poll_s)

    def reap(self) -> None:
        self.signal("KILL", str(self.spec_path))


def _wait_all(nodes: list[NodeProcess], poll_s: float) -> NodeProcess | None:
    """The first node whose launcher exits non-zero, or None once all exit 0."""
    while True:
        codes = [n.proc.poll() for n in nodes]
        bad = [n for n, c in zip(nodes, codes) if c not in (None, 0)]
        if bad:
            return bad[0]
        if all(c == 0 for c in codes):
            return None
        time.sleep(poll_s)


def hostfile_for(train: TrainConfig, out_dir: Path) -> Path | None:
    """The hostfile the launcher reads: train.cluster.hostfile, or one written from train.cluster.hosts."""
    if train.cluster.hosts:
        return write_hostfile(train.cluster.hosts, out_dir / "hostfile")
    return Path(train.cluster.hostfile) if train.cluster.hostfile else None


def master_address(train: TrainConfig, hosts: list[HostConfig]) -> str:
    return train.cluster.master_addr or hosts[0].name


def env_with_file(env: dict[str, str], out_dir: Path) -> dict[str, str]:
    check_deepspeed_exports(env)
    return {**env, "DS_ENV_FILE": str(write_ds_env_file(env, out_dir / "deepspeed_env"))}
