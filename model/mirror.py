"""Asynchronous copies of complete checkpoints to an fsspec URL (object storage, another filesystem).

Rank 0 mirrors a checkpoint once it is complete, in a background thread, so
training does not wait for the upload. The mirror's COMPLETE marker is written
last, so a half-uploaded tag is recognisable there too. Failures are reported
as events and never stop training: the filesystem is opened in the upload
thread, so one that cannot be reached (or named wrongly) is a `mirror_failed`
event, not a crash at start-up. Events carry the URL without its password.
Retention leaves a tag alone while it uploads.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from model.checkpoint import COMPLETE
from model.redact import redact_url, scrub, url_passwords


class Mirror:
    def __init__(self, url: str, report: Callable[[dict], None]):
        self.url = url.rstrip("/")
        self.public_url = redact_url(self.url)
        self.report = report
        self.threads: dict[str, threading.Thread] = {}
        self._fs = None
        self._fs_lock = threading.Lock()

    def filesystem(self):
        """(filesystem, root path), opened on first use, in an upload thread."""
        with self._fs_lock:
            if self._fs is None:
                import fsspec

                self._fs = fsspec.core.url_to_fs(self.url)
            return self._fs

    def in_flight(self) -> set[str]:
        return {tag for tag, t in self.threads.items() if t.is_alive()}

    def submit(self, ckpt_dir: Path, tag: str) -> None:
        thread = threading.Thread(target=self._copy, args=(Path(ckpt_dir), tag), name=f"mirror-{tag}", daemon=True)
        self.threads[tag] = thread
        thread.start()

    def _copy(self, ckpt_dir: Path, tag: str) -> None:
        try:
            fs, root = self.filesystem()
            files = sorted(p for p in (ckpt_dir / tag).rglob("*") if p.is_file() and p.name != COMPLETE)
            for path in files + [ckpt_dir / tag / COMPLETE]:
                remote = f"{root}/{tag}/{path.relative_to(ckpt_dir / tag).as_posix()}"
                fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
                fs.put_file(str(path), remote)
            self.report({"event": "checkpoint_mirrored", "tag": tag, "url": f"{self.public_url}/{tag}",
                         "files": len(files) + 1})
        except Exception as err:  # noqa: BLE001 - a failed upload must not stop training
            self.report({"event": "mirror_failed", "tag": tag, "url": self.public_url,
                         "error": scrub(repr(err), url_passwords(self.url))[:500]})

    def wait(self, timeout_s: float = 600.0) -> None:
        for thread in self.threads.values():
            thread.join(timeout_s)
