"""One run of a stage at a time on a run root: a lease file with its holder and a heartbeat.

Two runs of a stage on one run root destroyed each other's work (one removed the
other's temporary shard folder; both wrote the same outputs). A stage takes
<run_root>/.lease-<stage>.json, created exclusively, and refreshes its heartbeat
from a thread; another run of the stage is refused with the holder's host, pid
and heartbeat age. A lease whose heartbeat stopped (its holder was killed, or its
node died) is taken over: at once when the holder was a process of this host
that is gone, after `stale_s` otherwise.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

HEARTBEAT_S = 10.0
STALE_S = 90.0
# the stages that read a stage's output while they run: rewriting it under them (a tokenize run replacing the
# shards a training has memory-mapped) corrupts their run, so the writer waits until they are done
READERS = {"clean": ("tokenizer", "tokenize"), "tokenizer": ("tokenize", "preflight", "train"),
           "tokenize": ("preflight", "train")}


class LeaseHeld(RuntimeError):
    """Another run holds this stage of this run root."""


def lease_path(run_root: Path, stage: str) -> Path:
    return Path(run_root) / f".lease-{stage}.json"


def _record(stage: str) -> dict:
    return {"stage": stage, "host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
            "heartbeat": time.time()}


def _write_new(path: Path, record: dict) -> bool:
    """Create the lease file if none exists (atomically); False when one does."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    return True


def _read(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # released meanwhile, or caught mid-write
        return None


def _holder_gone(held: dict, stale_s: float) -> bool:
    if time.time() - held.get("heartbeat", 0) > stale_s:
        return True
    if held.get("host") == socket.gethostname():
        try:
            os.kill(int(held["pid"]), 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, another user's
            return False
    return False


def _take_over(path: Path, held: dict) -> bool:
    """Move a stale lease aside; False when what was moved turned out not to be the stale one (a race)."""
    aside = path.with_name(f"{path.name}.stale-{os.getpid()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    moved = _read(aside)
    if moved != held:  # another run took it over first and this moved its fresh lease: put it back
        os.rename(aside, path)
        return False
    aside.unlink(missing_ok=True)
    return True


def refuse_under_readers(run_root: Path, stage: str, stale_s: float) -> None:
    """LeaseHeld when a live run of a stage that reads this stage's output holds its lease."""
    for reader in READERS.get(stage, ()):
        held = _read(lease_path(run_root, reader))
        if held and not _holder_gone(held, stale_s):
            raise LeaseHeld(f"{run_root}: the {stage} stage would rewrite what its {reader} stage is reading: that "
                            f"stage is being run by pid {held.get('pid')} on {held.get('host')} (lease "
                            f"{lease_path(run_root, reader)}). Wait for it to finish or stop it first, or write "
                            f"to another run_root")


def acquire(run_root: Path, stage: str, stale_s: float = STALE_S) -> dict:
    refuse_under_readers(run_root, stage, stale_s)
    path = lease_path(run_root, stage)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = _record(stage)
    for _ in range(5):
        if _write_new(path, record):
            return record
        held = _read(path)
        if held is None:
            continue
        if not _holder_gone(held, stale_s):
            age = time.time() - held.get("heartbeat", 0)
            raise LeaseHeld(f"{run_root} is in use: its {stage} stage is being run by pid {held.get('pid')} on "
                            f"{held.get('host')} (heartbeat {age:.0f} s ago, lease {path}). Wait for that run to "
                            f"finish or stop it, or use another run_root; a lease whose heartbeat is older than "
                            f"{stale_s:.0f} s is taken over")
        _take_over(path, held)
    raise LeaseHeld(f"could not take the lease {path}: other runs keep taking it; try again")


def _beat(path: Path, record: dict, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        if _read(path) is None or _read(path).get("pid") != record["pid"]:
            return  # taken over (this run looked dead) or removed: nothing of ours to refresh
        record["heartbeat"] = time.time()
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(record))
        os.replace(tmp, path)


@contextmanager
def lease(run_root: Path, stage: str, heartbeat_s: float = HEARTBEAT_S, stale_s: float = STALE_S) -> Iterator[dict]:
    """Hold the stage's lease on run_root for the duration; LeaseHeld when another live run holds it."""
    record = acquire(run_root, stage, stale_s)
    path, stop = lease_path(run_root, stage), threading.Event()
    beat = threading.Thread(target=_beat, args=(path, dict(record), stop, heartbeat_s), name=f"lease-{stage}",
                            daemon=True)
    beat.start()
    try:
        yield record
    finally:
        stop.set()
        beat.join(timeout=5)
        held = _read(path)
        if held and held.get("pid") == record["pid"] and held.get("host") == record["host"]:
            path.unlink(missing_ok=True)
