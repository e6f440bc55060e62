"""What the training program and the orchestrator agree on: exit codes and JSON-lines files."""
from __future__ import annotations

import json
import time
from pathlib import Path

EXIT_DONE = 0
EXIT_ANOMALY = 42   # the program detected a loss anomaly and wrote an event
EXIT_STOPPED = 43   # stopped on SIGTERM after saving a checkpoint
EXIT_CONFIG = 44    # bad spec / data: retrying will not help

METRICS_FILE = "metrics.jsonl"
EVENTS_FILE = "events.jsonl"
SPEC_FILE = "spec.json"


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
