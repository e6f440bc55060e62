"""Worker processes that end with the process that started them, however it ends (SIGKILL included).

A killed `pretrain clean` left its pool workers writing shards. PR_SET_PDEATHSIG
is no help there: it fires when the *thread* that forked the worker exits,
and pools fork from threads that come and go. So each worker watches its own
parent id and leaves once it changes (the parent died and the worker was
re-parented). Work in flight is written under temporary names and renamed when
complete (tasks/common/outputs.py), so leaving mid-task loses nothing finished.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
import time


def die_with_parent(poll_s: float = 1.0) -> None:
    """In a child process: a daemon thread that ends it within poll_s of its parent's death."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def worker_init(*initializers) -> None:
    """A pool initializer: die with the parent, then the given ones."""
    die_with_parent()
    for init in initializers:
        init()


def sigterm_on_parent_death() -> None:
    """A preexec_fn: SIGTERM this child when the thread that started it ends (PR_SET_PDEATHSIG). For children
    started from a thread that lives as long as they should: a launcher, the CLI's server."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except OSError:
        pass


def kill_group(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM a child's whole process group (it was started in a session of its own), then SIGKILL what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
