"""Containment for the code around the training step: a bug there is reported, never fatal.

Callback bugs (metrics, eval, logging to a tracking server that is down) are a
top cause of lost runs; the step itself is not guarded.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from typing import Callable


class Guard:
    def __init__(self, report: Callable[[dict], None]):
        self.report, self.failures = report, 0

    def run(self, name: str, fn: Callable, *args, **kwargs):
        """fn(*args, **kwargs), or None when it raises: the error is printed and reported as an event."""
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # noqa: BLE001 - containment is the point
            self.failures += 1
            print(f"warning: {name} failed and was skipped; training goes on: {err!r}\n"
                  + "".join(traceback.format_exc(limit=4)), file=sys.stderr, flush=True)
            try:
                self.report({"event": "callback_error", "callback": name, "error": repr(err)[:500]})
            except Exception:  # noqa: BLE001 - the reporter itself may be what is broken
                pass
            return None


FAULTS_ENV = "PRETRAIN_FAULTS"


def fault_point(name: str, rank: int) -> None:
    """Fault injection for drills and tests: PRETRAIN_FAULTS="eval,metrics,kill_during_save@1".

    `name` fails on every rank, `name@r` only on rank r; kill_during_save dies
    with SIGKILL (no cleanup, as when a node is lost), hang_* blocks forever (a
    deadlock, a read that never returns), slow_* sleeps PRETRAIN_SLOW_S seconds
    (default 1) each time, the others raise. With PRETRAIN_FAULTS_ONCE_FILE set,
    a fault fires once (the file marks it fired).
    """
    wanted = {f.strip() for f in os.environ.get(FAULTS_ENV, "").split(",") if f.strip()}
    if name not in wanted and f"{name}@{rank}" not in wanted:
        return
    if name.startswith("slow"):  # a condition, not an event: every time, on every attempt
        time.sleep(float(os.environ.get("PRETRAIN_SLOW_S", "1")))
        return
    once = os.environ.get("PRETRAIN_FAULTS_ONCE_FILE")  # a drill that should hit one attempt, not every relaunch
    if once:
        if os.path.exists(once):
            return
        open(once, "w").close()
    if name.startswith("kill"):
        os.kill(os.getpid(), signal.SIGKILL)
    if name.startswith("hang"):
        print(f"injected fault '{name}' on rank {rank}: blocking forever", file=sys.stderr, flush=True)
        threading.Event().wait()
    raise RuntimeError(f"injected fault '{name}' on rank {rank} ({FAULTS_ENV})")
