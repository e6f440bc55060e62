"""The GPU check's harness on CPU ranks: a check past its deadline is stopped with its ranks, the budget starts no
check it cannot finish, and the JSON says so. (Every check passing in a copy of the GPU image:
tests/infra/test_gpu_sim.py.)"""
import datetime
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_checks_past_their_deadline_are_stopped_with_their_ranks_and_the_budget_starts_no_more(prepared_run,
                                                                                              tmp_path):
    _, root = prepared_run
    work, out = tmp_path / "work", tmp_path / "results"
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--sim", "--prepared", str(root),
                           "--out", str(out), "--work", str(work), "--only", "train_stage", "rollback_drill",
                           "mfu_settings", "--deadline-s", "8", "--budget-s", "45"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert time.perf_counter() - started < 120  # two 8 s deadlines and their stops, not three full checks
    report = json.loads((out / f"gpu-{datetime.date.today().isoformat()}.json").read_text())
    assert report["simulated"] is True and report["device"] == "cpu" and "running" not in report
    checks = report["checks"]
    assert list(checks) == ["train_stage", "rollback_drill", "mfu_settings"]  # in the check order, all recorded
    for name in ("train_stage", "rollback_drill"):  # each takes 25-45 s here
        assert checks[name]["ok"] is False and checks[name]["error"].startswith("deadline: still running after 8 s")
    assert checks["mfu_settings"]["error"].startswith("not started:")  # under 30 s of the budget were left
    left = subprocess.run(["pgrep", "-f", str(work)], capture_output=True, text=True).stdout.split()
    assert left == [], f"processes of the stopped checks still run: {left}"


def test_a_stopped_check_releases_the_extension_locks_its_killed_ranks_left(tmp_path, monkeypatch):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from gpu_check import extension_build_folder, release_extension_locks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    own = extension_build_folder()
    assert own == f"py{sys.version_info.major}{sys.version_info.minor}_cpu"  # torch's name for this CPU venv
    older = tmp_path / own / "fused_adam" / "lock"  # another job's, from before the check started
    older.parent.mkdir(parents=True)
    older.touch()
    os.utime(older, (time.time() - 600, time.time() - 600))
    left = tmp_path / own / "deepspeed_shm_comm" / "lock"
    left.parent.mkdir(parents=True)
    left.touch()
    # another interpreter's live build, made while the check ran (the suite's `make gpu-sim` on Python 3.12)
    other = tmp_path / "py312_cu130" / "deepspeed_shm_comm" / "lock"
    other.parent.mkdir(parents=True)
    other.touch()
    assert release_extension_locks(time.time() - 60) == [str(left)]
    assert older.exists() and other.exists() and not left.exists()
