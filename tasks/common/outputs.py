"""Stage output directories that are either complete or absent.

A stage writes into `<dir>.tmp-<pid>` and renames it into place at the end,
with a `_SUCCESS` marker inside. A crash leaves only the temp directory, which
the next attempt removes; a reader that finds no marker treats the stage as
not done rather than trusting half-written files.
"""
from __future__ import annotations

import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MARKER = "_SUCCESS"


def is_complete(stage_dir: Path) -> bool:
    return (stage_dir / MARKER).is_file()


def require_complete(stage_dir: Path, stage: str) -> None:
    if not is_complete(stage_dir):
        raise FileNotFoundError(
            f"{stage_dir} holds no complete '{stage}' output (no {MARKER} marker); "
            f"run `pretrain {stage} --config ...` first")


@contextmanager
def staged_output(stage_dir: Path) -> Iterator[Path]:
    stage_dir = Path(stage_dir)
    stage_dir.parent.mkdir(parents=True, exist_ok=True)
    for stale in stage_dir.parent.glob(f"{stage_dir.name}.tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = stage_dir.parent / f"{stage_dir.name}.tmp-{os.getpid()}"
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (tmp / MARKER).write_text("")
    if stage_dir.exists():
        old = stage_dir.parent / f"{stage_dir.name}.old-{os.getpid()}"
        stage_dir.rename(old)
        tmp.rename(stage_dir)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(stage_dir)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n", encoding="utf-8")


def read_json(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
