"""The GPU check's own dry run: its checks on CPU ranks at toy sizes (zero2_125m, two more runs of the same
throughput helper, is left out to keep the suite short)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_the_gpu_check_runs_its_checks_on_cpu_ranks(prepared_run, tmp_path):
    _, root = prepared_run
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu_check.py"), "--dry-run", "--prepared", str(root),
                           "--out", str(tmp_path / "results"), "--work", str(tmp_path / "work"),
                           "--only", "train_500m_bf16", "rollback_drill", "hf_export_parity", "preflight"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    [path] = (tmp_path / "results").glob("gpu-dry-run-*.json")
    report = json.loads(path.read_text())
    assert report["device"] == "cpu" and report["dry_run"] is True and "mfu_500m_bf16" in report
    checks = report["checks"]
    assert set(checks) == {"train_500m_bf16", "rollback_drill", "hf_export_parity", "preflight"}
    assert all(c["ok"] for c in checks.values())
    assert checks["train_500m_bf16"]["tokens_per_s"] > 0 and checks["train_500m_bf16"]["steps_measured"] == 3
    drill = checks["rollback_drill"]
    assert drill["attempts"] == 2 and drill["anomaly"] == "non_finite" and drill["final_step"] == 12
    assert checks["hf_export_parity"]["relative_error"] < 1e-4
    assert checks["preflight"]["checks"]["allreduce_probe"]["status"] != "fail"
    assert any(line.startswith("train_500m_bf16") for line in proc.stdout.splitlines()[-6:])  # the table, last
