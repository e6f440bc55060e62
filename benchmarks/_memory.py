"""Peak memory of a command and all its child processes, sampled from outside.

getrusage's ru_maxrss is no use here: a child started by fork+exec inherits the
high-water mark of the (large) benchmark process that forked it.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time

import psutil


def tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc] + proc.children(recursive=True):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass  # exited between listing and reading
    return total


def run_measured(cmd: list[str], env: dict | None = None, every_s: float = 0.02) -> tuple[dict, float]:
    """Run cmd; returns the last JSON line it prints and the peak RSS of its process tree in MB."""
    proc = psutil.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    out: dict[str, str] = {}
    drain = threading.Thread(target=lambda: out.update(zip(("stdout", "stderr"), proc.communicate())))
    drain.start()
    peak = 0
    while proc.poll() is None:
        try:
            peak = max(peak, tree_rss(proc))
        except psutil.Error:
            break
        time.sleep(every_s)
    drain.join()
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:3]} failed:\n{out.get('stdout', '')[-2000:]}\n{out.get('stderr', '')[-3000:]}")
    return json.loads(out["stdout"].strip().splitlines()[-1]), peak / 1e6
