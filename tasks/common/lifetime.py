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
