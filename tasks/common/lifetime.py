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


def die_with_parent(parent: int | None = None, poll_s: float = 1.0) -> None:
    """In a child process: a daemon thread that ends it within poll_s of its parent's death. Pass the parent's
    pid when you have it (as pool initargs): a worker still importing when its parent died would otherwise take
    its new parent for the one to watch."""
    parent = parent or os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="die-with-parent", daemon=True).start()


def worker_init(parent: int, *initializers) -> None:
    """A pool initializer: die with the parent (its pid), then the given ones."""
    die_with_parent(parent)
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


def group_alive(pgid: int) -> bool:
    """Whether any process (not a zombie) of the process group is left."""
    import psutil

    for p in psutil.process_iter(["status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(p.pid) == pgid:
                return True
        except (ProcessLookupError, psutil.Error):
            continue
    return False


def kill_group(proc: subprocess.Popen, grace_s: float = 20.0, poll_s: float = 0.5) -> None:
    """SIGTERM a child's whole process group (it was started in a session of its own), give every member up to
    grace_s to leave (training ranks save a checkpoint first), then SIGKILL what is left."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reap the leader, so it does not count as left
        if not group_alive(proc.pid):
            return
        time.sleep(poll_s)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_gracefully(proc: subprocess.Popen, marker: str, grace_s: float, poll_s: float = 0.5) -> None:
    """SIGTERM the members of a child's process group whose command line holds `marker` (workers that stop
    cleanly: training ranks save a checkpoint first), wait up to grace_s for the whole group to leave, then
    kill_group. The others (DeepSpeed's launchers) are left alone meanwhile: its per-node launcher answers
    SIGTERM by killing its ranks 30 s later, whatever they are doing."""
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        try:
            if os.getpgid(p.pid) == proc.pid and marker in " ".join(p.info["cmdline"] or []):
                p.send_signal(signal.SIGTERM)
        except (ProcessLookupError, psutil.Error):
            continue
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(proc.pid):
        proc.poll()
        time.sleep(poll_s)
    kill_group(proc, grace_s=5.0)
