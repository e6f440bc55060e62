"""Checkpoints that are complete or ignored.

Every rank writes its part through DeepSpeed, then a per-rank marker; after a
barrier rank 0 writes COMPLETE (with the data position and metadata) and only
then moves `latest`. A tag without COMPLETE is never loaded.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

COMPLETE = "COMPLETE"
LATEST = "latest"


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def mark_rank_done(ckpt_dir: Path, tag: str, rank: int) -> None:
    (ckpt_dir / tag / f".rank{rank}.done").write_text("")


def mark_complete(ckpt_dir: Path, tag: str, world_size: int, meta: dict) -> None:
    missing = [r for r in range(world_size) if not (ckpt_dir / tag / f".rank{r}.done").exists()]
    if missing:
        raise RuntimeError(f"checkpoint {tag}: ranks {missing} did not finish writing; not marking it complete")
    write_atomic(ckpt_dir / tag / COMPLETE, json.dumps(meta, indent=2))
    write_atomic(ckpt_dir / LATEST, tag)


def is_complete(ckpt_dir: Path, tag: str) -> bool:
    return (Path(ckpt_dir) / tag / COMPLETE).is_file()


def read_meta(ckpt_dir: Path, tag: str) -> dict:
    return json.loads((Path(ckpt_dir) / tag / COMPLETE).read_text())


def complete_tags(ckpt_dir: Path) -> list[str]:
    """Complete checkpoint tags, oldest first by step."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    tags = [p.name for p in ckpt_dir.iterdir() if p.is_dir() and is_complete(ckpt_dir, p.name)]
    return sorted(tags, key=lambda t: read_meta(ckpt_dir, t)["step"])


def latest_complete(ckpt_dir: Path) -> str | None:
    """The tag in `latest` if complete, else the newest complete tag, else None."""
    ckpt_dir = Path(ckpt_dir)
    pointer = ckpt_dir / LATEST
    if pointer.is_file():
        tag = pointer.read_text().strip()
        if is_complete(ckpt_dir, tag):
            return tag
    tags = complete_tags(ckpt_dir)
    return tags[-1] if tags else None
