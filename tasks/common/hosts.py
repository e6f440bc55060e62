"""Cluster nodes as preflight and training both reach them: the hostfile, the configured hosts, and a command
run on a node through `train.cluster.node_command` with the environment the ranks need (never a secret on its command
line)."""
from __future__ import annotations

import shlex
from pathlib import Path

from model.protocol import SECRETS_ENV
from model.redact import is_secret
from pretrain.config import HostConfig, TrainConfig, check_host

# the ranks need these, and DeepSpeed's ssh launcher does not export them on its own
EXTRA_ENV = ("DS_ACCELERATOR", "OMP_NUM_THREADS", "PRETRAIN_FAULTS", "PRETRAIN_NAN_POSITIONS", "PRETRAIN_SECRETS_FILE",
             "PRETRAIN_SPIKE_POSITIONS", "PYTHONUNBUFFERED", "TORCH_NCCL_ASYNC_ERROR_HANDLING")
PROPAGATED_PREFIXES = ("NCCL_", "GLOO_", "MLFLOW_", "PYTHON", "CUDA_", "UCX_", "TORCH_")
# programs that hand their command to a remote shell as one line (so each argument must be quoted)
REMOTE_SHELL_PROGRAMS = {"ssh", "autossh", "rsh", "pdsh"}


def read_hostfile(path: Path) -> list[HostConfig]:
    hosts = []
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, rest = line.partition(" ")
        slots = int(rest.strip().removeprefix("slots=")) if "slots=" in rest else 1
        hosts.append(HostConfig(name=check_host(name, f"{path}: host"), slots=slots))
    if not hosts:
        raise ValueError(f"hostfile {path} lists no nodes; one line per node: '<host> slots=<GPUs>'")
    return hosts


def write_hostfile(hosts: list[HostConfig], path: Path) -> Path:
    Path(path).write_text("".join(f"{h.name} slots={h.slots}\n" for h in hosts))
    return Path(path)


def cluster_hosts(train: TrainConfig) -> list[HostConfig]:
    cluster = train.cluster
    return list(cluster.hosts) if cluster.hosts else read_hostfile(Path(cluster.hostfile)) if cluster.hostfile else []


def without_hosts(train: TrainConfig, dropped: set[str]) -> TrainConfig:
    """The settings with the named nodes left out (written as train.cluster.hosts)."""
    if not dropped:
        return train
    kept = [h for h in cluster_hosts(train) if h.name not in dropped]
    return train.changed(hosts=kept, hostfile=None)


def propagated_env(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k in EXTRA_ENV or k.startswith(PROPAGATED_PREFIXES)}


def through_shell(node_command: list[str], override: bool | None = None) -> bool:
    """Whether node_command hands the command to a remote shell as one line (ssh joins its arguments with
    spaces) rather than running it as given (srun, kubectl exec)."""
    if override is not None:
        return override
    return bool(node_command) and Path(node_command[0]).name in REMOTE_SHELL_PROGRAMS


def on_node(node_command: list[str], host: str, cmd: list[str], env: dict[str, str],
            shell: bool | None = None) -> list[str]:
    """cmd run on `host` through node_command ({host} filled in), with the environment the ranks need;
    cmd itself when node_command is empty (this machine). Through a remote shell every argument is quoted,
    so a value with a space, '&' or '?' (a PostgreSQL URI) arrives as it left."""
    if not node_command:
        return cmd
    # a secret never goes on a command line (`ps` on both hosts shows it): the ranks read theirs from the
    # private file secrets_for_ranks writes, and nothing else started on a node needs one
    exports = [f"{k}={v}" for k, v in sorted(propagated_env(env).items()) if k == SECRETS_ENV or not is_secret(k, v)]
    remote = ["env", *exports, *cmd]
    if through_shell(node_command, shell):
        remote = [shlex.quote(part) for part in remote]
    return [part.replace("{host}", host) for part in node_command] + remote
