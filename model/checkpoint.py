"""Checkpoints that are complete or ignored.

Every rank writes its part through DeepSpeed, then a per-rank marker; after a
barrier rank 0 writes COMPLETE (with the data position and metadata) and only
then moves `latest`. A tag without COMPLETE is never loaded.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import time
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


UNUSABLE = "UNUSABLE"  # beside COMPLETE: this checkpoint failed to load, and why; no resume picks it again


class CheckpointError(ValueError):
    """A checkpoint whose COMPLETE metadata cannot be trusted: unreadable, or not of its own tag."""


def mark_unusable(ckpt_dir: Path, tag: str, reason: str) -> Path:
    """Set a checkpoint aside for resuming, with the reason, in a file a person can read and remove."""
    path = Path(ckpt_dir) / tag / UNUSABLE
    write_atomic(path, json.dumps({"reason": reason, "time": time.time()}, indent=2))
    return path


def _checked_meta(ckpt_dir: Path, tag: str) -> tuple[dict | None, str | None]:
    """(the metadata, None), or (None, why it cannot be trusted). Its step must be the tag's: a COMPLETE file
    edited to another step would resume there and skip (or repeat) data without a word."""
    marker = Path(ckpt_dir) / tag / UNUSABLE
    if marker.is_file():
        try:
            reason = json.loads(marker.read_text()).get("reason")
        except (OSError, ValueError):
            reason = "unreadable marker"
        return None, f"{Path(ckpt_dir) / tag} did not load: {reason} (marked in {marker}; remove it to try again)"
    path = Path(ckpt_dir) / tag / COMPLETE
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        return None, f"{path} is not readable JSON ({type(err).__name__}: {err})"
    step = tag_step(tag)
    if not isinstance(meta, dict) or meta.get("step") != step:
        found = meta.get("step") if isinstance(meta, dict) else type(meta).__name__
        return None, f"{path} says step {found!r} where its tag is step {step}: edited or corrupt"
    return meta, None


def meta_problem(ckpt_dir: Path, tag: str) -> str | None:
    """Why a complete tag's metadata cannot be trusted, or None."""
    return _checked_meta(ckpt_dir, tag)[1]


def read_meta(ckpt_dir: Path, tag: str) -> dict:
    meta, problem = _checked_meta(ckpt_dir, tag)
    if problem:
        raise CheckpointError(problem)
    return meta


def _complete_step_tags(ckpt_dir: Path) -> list[str]:
    return [p.name for p in ckpt_dir.iterdir()
            if p.is_dir() and tag_step(p.name) is not None and is_complete(ckpt_dir, p.name)]


def complete_tags(ckpt_dir: Path) -> list[str]:
    """Complete checkpoint tags whose metadata holds, oldest first by step. Set-aside ones
    (<tag>.abandoned-<n>) hold a COMPLETE file too but are not tags: a resume must never pick one."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    tags = [t for t in _complete_step_tags(ckpt_dir) if meta_problem(ckpt_dir, t) is None]
    return sorted(tags, key=tag_step)


def untrusted_tags(ckpt_dir: Path) -> dict[str, str]:
    """Tags marked complete whose metadata does not hold, with why: never resumed from, said at resume."""
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return {}
    return {t: problem for t in sorted(_complete_step_tags(ckpt_dir), key=tag_step)
            if (problem := meta_problem(ckpt_dir, t))}


def complete_tag(ckpt_dir: Path, tag: str | None = None) -> str:
    """The named checkpoint if it is complete, else the newest complete one; FileNotFoundError naming what exists."""
    ckpt_dir = Path(ckpt_dir)
    if tag is not None:
        if not is_complete(ckpt_dir, tag):
            raise FileNotFoundError(f"{ckpt_dir / tag} is not a complete checkpoint; complete ones: {complete_tags(ckpt_dir)}")
        return tag
    latest = latest_complete(ckpt_dir)
    if latest is None:
        raise FileNotFoundError(f"{ckpt_dir} has no complete checkpoint yet; train first")
    return latest


def latest_complete(ckpt_dir: Path) -> str | None:
    """The tag in `latest` if complete, else the newest complete tag, else None."""
    ckpt_dir = Path(ckpt_dir)
    pointer = ckpt_dir / LATEST
    if pointer.is_file():
        tag = pointer.read_text().strip()
        if is_complete(ckpt_dir, tag) and meta_problem(ckpt_dir, tag) is None:
            return tag
    tags = complete_tags(ckpt_dir)
    return tags[-1] if tags else None


def retention_victims(steps_by_tag: dict[str, int], keep_last: int, keep_every: int) -> list[str]:
    """Complete tags to delete: all but the newest keep_last, except steps that are multiples of keep_every."""
    ordered = sorted(steps_by_tag, key=steps_by_tag.get)
    old = ordered[:-keep_last] if keep_last else ordered
    return [t for t in old if not (keep_every and steps_by_tag[t] % keep_every == 0)]


_ABANDONED = re.compile(r"(?P<tag>.+)\.abandoned-(?P<attempt>\d+)")


def abandoned_tags(ckpt_dir: Path) -> list[str]:
    """Checkpoints set aside by rollbacks (<tag>.abandoned-<attempt>), oldest first: by attempt, then step."""
    ckpt_dir = Path(ckpt_dir)
    found = [(m, p.name) for p in ckpt_dir.iterdir() if p.is_dir() and (m := _ABANDONED.fullmatch(p.name))] \
        if ckpt_dir.is_dir() else []
    return [name for m, name in sorted(found, key=lambda f: (int(f[0]["attempt"]), tag_step(f[0]["tag"]) or 0))]


def prune_abandoned(ckpt_dir: Path, keep: int) -> list[str]:
    """Delete all but the newest `keep` set-aside checkpoints: each is as large as a live one, and a run that
    rolls back often would otherwise fill the disk with them."""

    victims = abandoned_tags(ckpt_dir)[:-keep] if keep else abandoned_tags(ckpt_dir)
    for name in victims:
        shutil.rmtree(Path(ckpt_dir) / name, ignore_errors=True)
    return victims


def apply_retention(ckpt_dir: Path, keep_last: int, keep_every: int, busy: set[str] = frozenset(),
                    keep_abandoned: int = 1) -> list[str]:
    """Delete the victims (never `latest`, nor `busy` tags still uploading); also incomplete tags older than latest,
    and set-aside checkpoints beyond the newest keep_abandoned."""

    ckpt_dir = Path(ckpt_dir)
    tags = complete_tags(ckpt_dir)
    latest = latest_complete(ckpt_dir)
    victims = [t for t in retention_victims({t: read_meta(ckpt_dir, t)["step"] for t in tags}, keep_last, keep_every)
               if t != latest and t not in busy]
    newest = read_meta(ckpt_dir, latest)["step"] if latest else -1
    for path in ckpt_dir.iterdir():
        step = tag_step(path.name)
        if path.is_dir() and step is not None and step < newest and not is_complete(ckpt_dir, path.name):
            victims.append(path.name)  # a save that died half-way, superseded by a complete one
    for tag in victims:
        shutil.rmtree(ckpt_dir / tag, ignore_errors=True)
    return victims + prune_abandoned(ckpt_dir, keep_abandoned)


def tag_step(tag: str) -> int | None:
    """The step of a tag this program writes (step_00001000); None for anything else in the folder."""
    match = re.fullmatch(r"step_(\d+)", tag)
    return int(match.group(1)) if match else None


def checkpoint_bytes(ckpt_dir: Path, tag: str) -> int:
    return sum(p.stat().st_size for p in (Path(ckpt_dir) / tag).rglob("*") if p.is_file())


def room_for_checkpoint(ckpt_dir: Path, estimate_bytes: int, margin: float = 1.2) -> tuple[bool, int]:
    """Whether the filesystem of ckpt_dir has estimate * margin bytes free; and how many it has."""

    Path(ckpt_dir).mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(ckpt_dir).free
    return free >= estimate_bytes * margin, free
