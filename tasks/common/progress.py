"""Periodic progress lines for long stages; printed, so the CLI shows them and Prefect logs them."""
from __future__ import annotations

import time


class Progress:
    def __init__(self, what: str, unit: str, every_s: float = 10.0):
        self.what, self.unit, self.every_s = what, unit, every_s
        self.count, self.start = 0, time.monotonic()
        self.last = self.start

    def add(self, n: int = 1) -> None:
        self.count += n
        now = time.monotonic()
        if now - self.last >= self.every_s:
            self.last = now
            print(f"{self.what}: {self.count:,} {self.unit} ({self.count / (now - self.start):,.0f} {self.unit}/s)", flush=True)

    def done(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        print(f"{self.what}: done, {self.count:,} {self.unit} in {elapsed:.1f} s", flush=True)
