"""Every benchmark finds the shared corpora itself, or says how to point at them."""
import subprocess
import sys

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "benchmarks"))
from _corpus import default_shared  # noqa: E402


def test_a_benchmark_without_the_shared_corpora_says_how_to_pass_them(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "dirty_filter_quality.py"), "--shared",
                           str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert f"{tmp_path} has no corpora/ folder; pass --shared DIR" in proc.stderr and "PRETRAIN_SHARED" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_shared_folder_comes_from_the_environment_first(tmp_path, monkeypatch):
    (tmp_path / "corpora").mkdir()
    monkeypatch.setenv("PRETRAIN_SHARED", str(tmp_path))
    assert default_shared() == tmp_path
    monkeypatch.setenv("PRETRAIN_SHARED", str(tmp_path / "absent"))
    assert default_shared() != tmp_path / "absent"  # a folder without corpora/ is passed over
