"""Which failures are worth a retry: a cluster hiccup (NCCL timeout, lost node, network) or a mistake (config, data).

Used as the Prefect tasks' retry condition and by the training recovery policy,
so a retry is spent on what can go away by itself and a config error fails at once.
"""
from __future__ import annotations

import re

# Messages of collective timeouts, dead peers and unreachable nodes (NCCL, gloo, torch elastic, ssh/pdsh, sockets).
TRANSIENT = re.compile("|".join((
    r"Watchdog caught collective operation timeout", r"NCCL (communicator|operation).{0,40}(timed? ?out|aborted)",
    r"ncclRemoteError", r"ncclSystemError", r"NCCL error.{0,80}(unhandled system error|remote process exited)",
    r"DistNetworkError", r"Connection (reset|refused|timed out) by peer|Connection (reset|refused|timed out)",
    r"No route to host", r"Broken pipe", r"ssh: connect to host", r"Host key verification failed",
    r"pdsh@.*exit code 255", r"Socket Timeout", r"Timed out waiting for .{0,40}(rendezvous|store|clients)",
    r"RendezvousTimeoutError", r"rendezvous.{0,40}timed? ?out", r"heartbeat.{0,40}(timeout|timed out|missed)",
    r"Gloo connectFullMesh failed", r"\[/?.*gloo.*\] .{0,80}(Connection closed by peer|Timed out)",
    r"CUDA error: (an illegal memory access|unspecified launch failure|uncorrectable ECC)",
    r"Xid \d+", r"NVLink error",
)), re.I)

# Mistakes a retry repeats: settings, missing files, bad data, code.
PERMANENT_TYPES = ("ValidationError", "ConfigError", "SourceError", "DataError", "ShardError", "KeyError",
                   "TypeError", "AttributeError", "ImportError", "ModuleNotFoundError", "NotImplementedError",
                   "PreflightFailed", "RecoveryFailed", "FileNotFoundError", "PermissionError", "ValueError")
TRANSIENT_TYPES = (ConnectionError, TimeoutError, BrokenPipeError)


def transient_text(text: str) -> str | None:
    """The first line of `text` that names a cluster hiccup, or None."""
    for line in text.splitlines():
        if TRANSIENT.search(line):
            return line.strip()[:300]
    return None


def is_transient(err: BaseException) -> bool:
    if isinstance(err, TRANSIENT_TYPES):
        return True
    if type(err).__name__ in PERMANENT_TYPES and not transient_text(str(err)):
        return False
    return transient_text(f"{type(err).__name__}: {err}") is not None


def retry_if_transient(task, task_run, state) -> bool:
    """Prefect retry_condition_fn: retry a task only when its exception looks like a cluster hiccup."""
    try:
        state.result()
    except BaseException as err:  # noqa: BLE001 - the failed state's exception is what we classify
        return is_transient(err)
    return False
