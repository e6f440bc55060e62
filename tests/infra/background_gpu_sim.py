"""`make gpu-sim` started when the session starts, on the core the rest of the suite leaves idle about half the
time (its tests wait on servers and ranks), and waited for by the tests that read it."""
from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = "tests/infra/test_gpu_sim.py"


@dataclass
class SimRun:
    proc: subprocess.Popen
    out: Path
    log: Path
    started: float

    def wait(self, timeout_s: float) -> tuple[int, str]:
        """The run's exit code and output (its last part), once it has ended."""
        code = self.proc.wait(timeout=timeout_s)
        return code, self.log.read_text()[-8000:]


_run: SimRun | None = None


def start() -> SimRun:
    global _run
    if _run is None:
        folder = Path(tempfile.mkdtemp(prefix="gpu-sim-test-"))
        log = folder / "make.log"
        # niced: it takes the idle time, and the suite's timed tests keep their core
        proc = subprocess.Popen(["nice", "-n", "10", "make", "gpu-sim", f"OUT={folder / 'out'}"], cwd=ROOT,
                                stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
        _run = SimRun(proc, folder / "out", log, time.time())
    return _run


def stop() -> None:
    if _run is not None and _run.proc.poll() is None:
        subprocess.run(["pkill", "-TERM", "-g", str(_run.proc.pid)], check=False)
