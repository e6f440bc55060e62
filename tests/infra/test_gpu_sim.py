"""`make gpu-sim`: the GPU check's real code path on CPU ranks, in a Python 3.12 environment holding only the GPU
machine's image packages plus the carried wheels; and the import guard that names what the machine lacks."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "infra" / "gpu_image"
SIM = ROOT / "infra" / "gpu_sim" / "sim.py"
sys.path.insert(0, str(ROOT / "infra" / "gpu_sim"))

from sim import listed, normalized, project_misses  # noqa: E402
from tests.infra import background_gpu_sim  # noqa: E402

REQUIRED = {"preflight", "train_500m_bf16", "train_stage", "zero2_125m", "rollback_drill", "hf_export_parity",
            "mfu_settings"}


def test_the_simulated_environment_pins_only_packages_of_the_image():
    image = {normalized(n) for n in listed(IMAGE / "packages.txt")}
    pinned = [line.split("==") for line in listed(IMAGE / "requirements.txt")]
    assert all(len(p) == 2 and p[1] for p in pinned), "every package is pinned to one version"
    assert [name for name, _ in pinned if normalized(name) not in image] == []
    assert dict(pinned)["torch"] == "2.11.0" and dict(pinned)["transformers"] == "5.17.0"  # the machine's, read there
    carried = {"deepspeed", "pydantic", "pydantic-core", "hjson"}  # infra/gpu_wheels.sh: not on the image
    assert not carried & image and not carried & {normalized(n) for n, _ in pinned}


def test_the_guard_records_a_missing_module_with_the_file_and_line_that_imported_it(tmp_path):
    log, script = tmp_path / "misses.jsonl", tmp_path / "mine.py"
    script.write_text("import json\ntry:\n    import zstandard_not_here\nexcept ImportError:\n    pass\n"
                      "import importlib.util\nimportlib.util.find_spec('ahocorasick_not_here')\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "infra" / "gpu_sim"), "PRETRAIN_IMPORT_MISSES": str(log)}
    proc = subprocess.run([sys.executable, "-c", f"import import_guard; exec(open({str(script)!r}).read(), "
                           f"{{'__file__': {str(script)!r}}})"], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr  # optional imports behave as without the guard
    misses = {(m["module"], m["importer"].rsplit(":", 1)[1]) for m in map(json.loads, log.read_text().splitlines())}
    assert {("zstandard_not_here", "3"), ("ahocorasick_not_here", "7")} <= misses


def test_only_the_projects_own_imports_fail_the_simulation(tmp_path):
    log = tmp_path / "misses.jsonl"
    rows = [{"module": "zstandard", "importer": f"{ROOT}/tasks/clean/readers.py:12"},
            {"module": "zstandard", "importer": f"{ROOT}/tasks/clean/readers.py:12"},  # the same, from another rank
            {"module": "habana_frameworks", "importer": f"{ROOT}/.gpu/site/deepspeed/accelerator/real_accelerator.py:90"},
            {"module": "accelerate", "importer": "/venv/lib/python3.12/site-packages/transformers/utils/import_utils.py:5"},
            {"module": "pandas", "importer": f"{ROOT}/model/data.py:72"}]  # pyarrow's probe: the image has pandas
    log.write_text("".join(json.dumps({**r, "pid": 1}) + "\n" for r in rows))
    assert project_misses(log) == [{"module": "zstandard", "importer": "tasks/clean/readers.py:12"}]


@pytest.fixture(scope="module")
def gpu_sim():
    """The background `make gpu-sim` of this session (tests/conftest.py starts it), finished: (exit code, output,
    its $OUT). It also leaves the environment and .gpu/ that `sim.py exec` uses."""
    run = background_gpu_sim.start()  # already running, unless only this module's tests were collected
    code, output = run.wait(timeout_s=1500)
    return code, output, run.out


@pytest.mark.slow
def test_the_old_gpu_path_import_fails_on_the_image_naming_the_module_and_its_importer(gpu_sim):
    """What stopped the old check in its first second: benchmarks/gpu_check.py took embedding_rows from
    tasks.tokenizer.train, which pulls in the clean stage's zstandard and pyahocorasick."""
    proc = subprocess.run([sys.executable, str(SIM), "exec", "--", "-c",
                           "from tasks.tokenizer.train import run_tokenizer"], capture_output=True, text=True,
                          timeout=1800, cwd=ROOT)
    assert proc.returncode != 0
    assert "ModuleNotFoundError: No module named" in proc.stderr
    assert "error: module 'zstandard' is neither on the GPU image" in proc.stderr
    assert "imported by tasks/clean/readers.py:" in proc.stderr
    fine = subprocess.run([sys.executable, str(SIM), "exec", "--", "-c", "import benchmarks._gpu_checks, "
                           "tasks.train.run, tasks.train.monitored, tasks.preflight.suite, model.train"],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert fine.returncode == 0, fine.stderr[-3000:]


@pytest.mark.slow
def test_make_gpu_sim_runs_every_check_of_the_gpu_script_and_each_passes(gpu_sim):
    code, output, out = gpu_sim
    assert code == 0, output
    report = json.loads(next(out.glob("gpu-*.json")).read_text())  # gpu-<date>.json, the date it started
    assert report["simulated"] is True and report["python"].startswith("3.12.")
    assert report["torch"].startswith("2.11.0")  # PyPI's 2.11.0 is the image's 2.11.0+cu130
    assert report["deepspeed"] and report["sim"]["project_import_misses"] == []
    assert "deepspeed" in report["sim"]["carried"] and "pydantic" in report["sim"]["carried"]
    checks = report["checks"]
    assert REQUIRED <= set(checks) and [n for n, c in checks.items() if not c["ok"]] == []
    big = checks["train_500m_bf16"]
    assert big["loss_finite"] and big["loss_last"] < big["loss_first"] and big["tokens_per_s"] > 0
    assert big["checkpoints_saved"] == 0 and big["peak_memory_gb"] > 0  # a throughput run saves nothing
    assert checks["train_stage"]["start_steps"] == [0, 4] and checks["train_stage"]["final_checkpoint_step"] == 6
    zero2 = checks["zero2_125m"]
    assert zero2["checkpointing_on"]["activation_checkpointing"] and zero2["time_ratio_on_off"] > 0
    assert checks["rollback_drill"]["attempts"] == 2 and checks["rollback_drill"]["anomaly"] == "non_finite"
    assert checks["hf_export_parity"]["relative_error"] < 1e-4
    assert checks["preflight"]["checks"]["comm_share"]["status"] != "not_available"
    assert checks["preflight"]["checks"]["shared_storage"]["status"] in ("pass", "warn")  # report-only there
    variants = checks["mfu_settings"]["runs"]
    assert {"sdpa_flash", "compile", "micro_batch_x2", "activation_checkpointing_x2", "baseline"} <= set(variants)
    assert variants["compile"]["compile"] == "aot_eager" and variants["micro_batch_x2"]["micro_batch_size"] == 4
    assert checks["mfu_settings"]["best"] in variants
