"""What the training program and the orchestrator agree on: exit codes and JSON-lines files."""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

EXIT_DONE = 0
EXIT_ANOMALY = 42   # the program detected a loss anomaly and wrote an event
EXIT_STOPPED = 43   # stopped on SIGTERM after saving a checkpoint
EXIT_CONFIG = 44    # bad spec / data: retrying will not help
EXIT_UNSAVED = 45   # trained to the last step but could not save it (no room): the work since the last checkpoint
                    # is not durable; retrying would train it again into the same full disk
EXIT_HUNG = 46      # made no progress for train.watch.hang_timeout_s: stacks are in <train_dir>/hangs (model/watchdog.py)
EXIT_UNUSABLE = 47  # the checkpoint to resume from did not load (a corrupt file, DeepSpeed's step not its own): it is
                    # marked UNUSABLE, and the next launch resumes from the newest one before it

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
SPEC_FILE = "spec.json"
# secrets the ranks need (MLflow credentials, a mirror URL's password) travel in a file only the user can read,
# never in the spec, an environment echoed on a command line, or a log: the variable names that file
SECRETS_ENV = "PRETRAIN_SECRETS_FILE"
MIRROR_URL_ENV = "PRETRAIN_MIRROR_URL"


def load_secrets() -> None:
    """The secrets the train stage wrote for the ranks, into this process's environment."""
    path = os.environ.get(SECRETS_ENV)
    if path:
        os.environ.update(json.loads(Path(path).read_text(encoding="utf-8")))


def forget_secrets() -> None:
    """Remove the secrets file once every rank has read it (called by rank 0 after a barrier)."""
    path = os.environ.get(SECRETS_ENV)
    if path:
        Path(path).unlink(missing_ok=True)


def append_jsonl(path: Path, record: dict) -> None:
    record = {"time": round(time.time(), 3), **record}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path: Path) -> list[dict]:
    if not Path(path).is_file():
        return []
    out = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line cut by a crash mid-write
    return out
