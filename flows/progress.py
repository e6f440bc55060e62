"""Progress of a long stage: a Prefect progress artifact in the UI, and a bar on the terminal of `pretrain <stage>`."""
from __future__ import annotations

import sys
import time

from prefect.artifacts import create_progress_artifact, update_progress_artifact

from flows.common import artifact_key
from pretrain.config import PipelineConfig


class StageProgress:
    """advance(done) as work finishes; the artifact is updated at most every `every_s` seconds (and at the end)."""

    def __init__(self, cfg: PipelineConfig, stage: str, total: int, unit: str, every_s: float = 2.0):
        self.stage, self.total, self.unit, self.every_s = stage, max(total, 1), unit, every_s
        self.done, self.last = 0, 0.0
        self.tty = sys.stderr.isatty()
        self.artifact_id = create_progress_artifact(progress=0.0, key=f"{artifact_key(cfg, stage)}-progress",
                                                    description=f"{stage}: {total} {unit}")

    def advance(self, done: int) -> None:
        self.done = min(done, self.total)
        now = time.monotonic()
        if self.done < self.total and now - self.last < self.every_s:
            return
        self.last = now
        percent = 100.0 * self.done / self.total
        update_progress_artifact(self.artifact_id, progress=percent,
                                 description=f"{self.stage}: {self.done}/{self.total} {self.unit}")
        self._draw(percent)

    def _draw(self, percent: float) -> None:
        filled = int(percent // 5)
        line = f"{self.stage:<10} [{'#' * filled}{'.' * (20 - filled)}] {self.done}/{self.total} {self.unit}"
        if self.tty:
            print("\r" + line, end="\n" if self.done >= self.total else "", file=sys.stderr, flush=True)
        else:
            print(line, file=sys.stderr, flush=True)
