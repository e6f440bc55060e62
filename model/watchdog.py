"""A rank's hang watch: a heartbeat file, and its own stacks plus an exit when it stops making progress.

A rank that hangs (a deadlocked collective, a read from NFS that never
returns, a GPU that stops) would otherwise be noticed when the process
group's timeout fires, 30 minutes later by default, with nothing saying
where. Every rank is watched from inside itself, so the watch reaches ranks
on every node without ssh:

- faulthandler's timer, re-armed at each step, writes every thread's Python
  stack to <train_dir>/hangs/rank<r>.txt once the rank has made no progress
  for the timeout. It runs in C, so it fires even when the stuck call holds
  the GIL;
- a thread writes <train_dir>/heartbeats/rank<r>.json every few seconds
  (step, phase, when it last made progress), which the train stage reads to
  see a stalled job and to kill it when the ranks cannot end themselves;
- the same thread, after the stacks are written, waits a few seconds for the
  other ranks to write theirs and exits with EXIT_HUNG.

In synchronous data parallel training one hung rank stops every rank (the
others wait in the next collective), so every rank writes stacks; the train
stage tells the hung one from the waiting ones (tasks/train/hang.py).

The timeout is train.watch.hang_timeout_s, or by default max(60 s, 10 x the median
step time so far). From the process group's start to the end of the first
step (loading data, building the model, resuming, kernel compilation) it is
train.watch.first_step_timeout_s: a rendezvous or a first collective that never
returns is caught too, not only a stall mid-run; saving and eval get
train.watch.slow_phase_timeout_s.
"""
from __future__ import annotations

import faulthandler
import json
import os
import socket
import statistics
import sys
import threading
import time
from collections import deque
from pathlib import Path

from model.protocol import EXIT_HUNG

HEARTBEAT_DIR = "heartbeats"
HANG_DIR = "hangs"
MIN_TIMEOUT_S = 60.0


def stack_path(train_dir: Path, rank: int) -> Path:
    return Path(train_dir) / HANG_DIR / f"rank{rank}.txt"


def heartbeat_path(train_dir: Path, rank: int) -> Path:
    return Path(train_dir) / HEARTBEAT_DIR / f"rank{rank}.json"


class HangWatch:
    def __init__(self, train_dir: Path, rank: int, world: int, timeout_s: float | None, slow_phase_timeout_s: float,
                 every_s: float = 2.0, exit_grace_s: float = 5.0, first_step_timeout_s: float | None = None):
        self.train_dir, self.rank, self.world = Path(train_dir), rank, world
        self.fixed_timeout, self.slow_timeout = timeout_s, slow_phase_timeout_s
        self.every_s, self.exit_grace_s = every_s, exit_grace_s
        self.step: int | None = None
        self.phase, self.progress_at, self.armed_for = "start", time.time(), None
        self.durations: deque = deque(maxlen=50)
        for folder in (HANG_DIR, HEARTBEAT_DIR):
            (self.train_dir / folder).mkdir(parents=True, exist_ok=True)
        self.stacks = open(stack_path(train_dir, rank), "w", encoding="utf-8")  # noqa: SIM115 - faulthandler's fd
        if first_step_timeout_s:
            self._arm(first_step_timeout_s)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hang-watch", daemon=True)
        self._thread.start()

    def timeout(self) -> float:
        if self.fixed_timeout:
            return self.fixed_timeout
        median = statistics.median(self.durations) if self.durations else 0.0
        return max(MIN_TIMEOUT_S, 10 * median)

    def beat(self, step: int) -> None:
        """A step finished: the rank made progress. Cheap enough for every step (re-arms a C timer)."""
        now = time.time()
        if self.step is not None and self.phase == "step":
            self.durations.append(now - self.progress_at)
        self.step, self.phase, self.progress_at = step, "step", now
        self._arm(self.timeout())

    def slow_phase(self, name: str) -> None:
        """Entering a save or an eval: progress is not expected step by step."""
        self.phase, self.progress_at = name, time.time()
        self._arm(max(self.slow_timeout, self.timeout()))

    def _arm(self, seconds: float) -> None:
        self.armed_for = seconds
        faulthandler.dump_traceback_later(seconds, repeat=False, file=self.stacks, exit=False)

    def heartbeat(self) -> dict:
        return {"rank": self.rank, "world": self.world, "host": socket.gethostname(), "pid": os.getpid(),
                "step": self.step, "phase": self.phase, "progress_at": round(self.progress_at, 3),
                "timeout_s": self.armed_for, "written_at": round(time.time(), 3),
                "median_step_s": round(statistics.median(self.durations), 4) if self.durations else None}

    def _write(self, record: dict) -> None:
        path = heartbeat_path(self.train_dir, self.rank)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(record))
        tmp.replace(path)

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            record = self.heartbeat()
            stalled = self.armed_for is not None and time.time() - self.progress_at > self.armed_for + 1.0
            try:
                self._write({**record, "hung": stalled})
            except OSError:
                pass  # a full or briefly unreachable run root must not end training; the next beat tries again
            if stalled:
                self._end(record)

    def _end(self, record: dict) -> None:
        where = f"after step {self.step}" if self.step is not None else "before its first step"
        print(f"error: rank {self.rank} made no progress for {record['timeout_s']:.0f} s {where} "
              f"(phase {self.phase}); its stacks are in {stack_path(self.train_dir, self.rank)}", file=sys.stderr,
              flush=True)
        time.sleep(self.exit_grace_s)  # the other ranks write their stacks too before anyone leaves
        os._exit(EXIT_HUNG)

    def close(self) -> None:
        """Training ended: disarm, write the last heartbeat, and drop the stacks file if nothing was written."""
        faulthandler.cancel_dump_traceback_later()
        self._stop.set()
        self._thread.join(timeout=self.every_s + 5)
        self.armed_for, self.phase = None, "ended"
        try:
            self._write({**self.heartbeat(), "hung": False})
        except OSError:
            pass
        self.stacks.close()
        path = stack_path(self.train_dir, self.rank)
        if path.is_file() and path.stat().st_size == 0:
            path.unlink()
