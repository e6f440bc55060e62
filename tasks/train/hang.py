"""The train stage's side of the hang watch (model/watchdog.py): which rank hung and where, and ending a job
whose ranks cannot end themselves.

Every rank of a hung job writes its stacks: the hung one where it is stuck,
the others waiting in a collective for it. A rank whose main thread is not
inside torch.distributed or DeepSpeed's comm layer is the one that hung; when
every rank waits in a collective (a mismatched or lost collective, a network
or NCCL fault) all are named.
"""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sysconfig
import threading
import time
from pathlib import Path
from typing import Callable

from model.protocol import EVENTS_FILE, append_jsonl
from model.watchdog import HANG_DIR, HEARTBEAT_DIR

_THREAD_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-f]+ .*most recent call first\):$")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$')
COLLECTIVE_PATHS = ("torch/distributed/", "deepspeed/comm/", "deepspeed/runtime/comm/", "model/comm.py")
INNER_FRAMES = 4  # how deep below the innermost frame a collective call may sit (wrappers, wait())


def thread_stacks(text: str) -> list[list[str]]:
    """faulthandler's dump as one list of frame lines per thread, innermost first."""
    stacks: list[list[str]] = []
    for line in text.splitlines():
        if _THREAD_HEADER.match(line):
            stacks.append([])
        elif stacks and _FRAME.match(line):
            stacks[-1].append(line.strip())
    return stacks


def main_stack(text: str) -> list[str]:
    """The main thread's frames: the stack that starts in the program's entry (runpy or a script's <module>)."""
    stacks = thread_stacks(text)
    entry = [s for s in stacks if s and ("_run_module_as_main" in s[-1] or s[-1].endswith("in <module>"))]
    return (entry or sorted(stacks, key=len, reverse=True) or [[]])[0]


def own_frame(frames: list[str]) -> str:
    """The innermost frame of the program itself (not the standard library or an installed package): where in
    our code it hung, with the innermost frame when that lies deeper."""
    if not frames:
        return "unknown"
    library = (sysconfig.get_paths()["stdlib"], "site-packages", "dist-packages", "<frozen ")
    own = next((f for f in frames if not any(part in f for part in library)), None)
    if own is None or own == frames[0]:
        return own or frames[0]
    return f"{own} (innermost: {frames[0]})"


def in_collective(frames: list[str]) -> bool:
    return any(path in frame for frame in frames[:INNER_FRAMES] for path in COLLECTIVE_PATHS)


def read_heartbeats(train_dir: Path) -> dict[int, dict]:
    beats = {}
    for path in (Path(train_dir) / HEARTBEAT_DIR).glob("rank*.json"):
        try:
            beat = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue  # being replaced right now
        beats[int(beat["rank"])] = beat
    return beats


def hang_report(train_dir: Path, since: float) -> dict | None:
    """The hang of the launch that started at `since`, from the stacks its ranks wrote; None when none hung."""
    stacks = {}
    for path in sorted((Path(train_dir) / HANG_DIR).glob("rank*.txt")):
        if path.stat().st_size and path.stat().st_mtime >= since:
            stacks[int(path.stem.removeprefix("rank"))] = path.read_text(encoding="utf-8", errors="replace")
    if not stacks:
        return None
    mains = {rank: main_stack(text) for rank, text in stacks.items()}
    waiting = sorted(r for r, frames in mains.items() if in_collective(frames))
    hung = sorted(set(stacks) - set(waiting)) or sorted(stacks)
    beats = read_heartbeats(train_dir)
    steps = [b["step"] for b in beats.values() if b.get("step") is not None]
    return {"hung_ranks": hung, "waiting_ranks": waiting, "after_step": min(steps) if steps else None,
            "timeout_s": max((b.get("timeout_s") or 0) for b in beats.values()) if beats else None,
            "hosts": {r: beats[r]["host"] for r in hung if r in beats},
            "where": {r: own_frame(mains[r]) for r in hung},
            "stacks": {r: "\n".join(mains[r]) for r in hung}}


def archive_hang(train_dir: Path, report: dict) -> Path:
    """Move the launch's stacks into hangs/<time>/ (a relaunch starts with none) beside report.json, and append a
    `hang` event; returns the folder."""
    hangs = Path(train_dir) / HANG_DIR
    folder = hangs / time.strftime("%Y%m%d-%H%M%S")
    folder.mkdir(parents=True, exist_ok=True)
    for path in hangs.glob("rank*.txt"):
        path.replace(folder / path.name)
    (folder / "report.json").write_text(json.dumps(report, indent=2))
    append_jsonl(Path(train_dir) / EVENTS_FILE, {"event": "hang", "step": report["after_step"],
                                                   "hung_ranks": report["hung_ranks"], "where": report["where"],
                                                   "stacks": report["stacks"], "stacks_dir": str(folder)})
    return folder


def describe(report: dict, folder: Path) -> str:
    ranks = ", ".join(f"rank {r}" + (f" on {report['hosts'][r]}" if r in report["hosts"] else "")
                      for r in report["hung_ranks"])
    where = "; ".join(f"rank {r}: {frame}" for r, frame in report["where"].items())
    if set(report["waiting_ranks"]) == set(report["hung_ranks"]):
        waiting = "; every rank was inside a collective (a mismatched or lost collective: check NCCL and the network)"
    elif report["waiting_ranks"]:
        waiting = f"; ranks {report['waiting_ranks']} were waiting for it in a collective"
    else:
        waiting = ""
    return (f"training hung after step {report['after_step']}: no rank made progress for {report['timeout_s']:.0f} s. "
            f"Hung: {ranks} at {where}{waiting}. Every rank's stacks: {folder}")


class FrozenJobMonitor:
    """Ends a job whose ranks stalled but cannot exit themselves (a call that holds the GIL stops their watch
    thread too): a rank whose heartbeat says hung, or went silent, for longer than `grace_s` is SIGKILLed, on
    its own host through `remote` (ssh or train.cluster.node_command) when that is not this machine."""

    def __init__(self, train_dir: Path, since: float, remote: Callable[[str, list[str]], list[str]] | None = None,
                 grace_s: float = 30.0, silent_s: float = 120.0, poll_s: float = 5.0):
        self.train_dir, self.since, self.remote = Path(train_dir), since, remote
        self.grace_s, self.silent_s, self.poll_s = grace_s, silent_s, poll_s
        self.killed: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="frozen-job-monitor", daemon=True)

    def __enter__(self) -> "FrozenJobMonitor":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=self.poll_s + 5)

    def frozen(self, now: float) -> list[dict]:
        out = []
        for beat in read_heartbeats(self.train_dir).values():
            if beat["written_at"] < self.since or beat.get("phase") == "ended" or beat["rank"] in self.killed:
                continue
            overdue = beat.get("timeout_s") is not None and now - beat["progress_at"] > beat["timeout_s"] + self.grace_s
            silent = now - beat["written_at"] > self.silent_s
            if overdue or silent:
                out.append(beat)
        return out

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            for beat in self.frozen(time.time()):
                self.kill(beat)

    def kill(self, beat: dict) -> None:
        self.killed.append(beat["rank"])
        if beat["host"] == socket.gethostname():
            try:
                os.kill(beat["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif self.remote is not None:
            subprocess.run(self.remote(beat["host"], ["kill", "-KILL", str(beat["pid"])]), capture_output=True,
                           timeout=60)
