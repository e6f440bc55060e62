"""A tiny scaling sweep on CPU, end to end: grid -> DeepSpeed runs -> held-out loss -> fit -> MLflow -> plan."""
import json
import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT, tiny_dict
from tests.flows.conftest import run_flow

pytestmark = pytest.mark.slow


def test_tiny_sweep_fits_a_law_that_the_planner_uses(prepared_run, tmp_path, shared_prefect):
    _, prepared = prepared_run
    root = tmp_path / "run"
    for stage in ("tokenizer", "tokens"):
        shutil.copytree(prepared / stage, root / stage)
    data = tiny_dict(root, train={"num_gpus": 1, "seq_len": 64, "micro_batch_size": 4, "log_every": 10},
                     scaling={"budgets": [3e9, 1e10], "dims": [32, 48, 64], "min_steps": 10, "max_steps": 400,
                              "eval_samples_per_channel": 8},
                     tracking={"mlflow_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"})
    data["name"] = "sweep"
    data["model"]["max_seq_len"] = 64
    result = run_flow("scaling", data, tmp_path, shared_prefect)

    fit = json.loads((root / "scaling" / "fit.json").read_text())
    assert len(fit["runs"]) == 6 and fit["skipped"] == []
    assert {r["budget"] for r in fit["runs"]} == {3e9, 1e10}
    for r in fit["runs"]:  # each run spent its budget: 6 N D within rounding of the step count
        assert r["flops"] == pytest.approx(r["budget"], rel=0.1) and 0 < r["loss"] < 12
    assert result["law"] is not None and fit["law"]["alpha"] > 0 and fit["law"]["E"] > 0
    assert [m["budget"] for m in fit["isoflop"]] == [3e9, 1e10]
    assert (root / "scaling" / "loss_vs_compute.png").stat().st_size > 10_000
    assert (root / "scaling" / "isoflop.png").stat().st_size > 10_000

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    exp = client.get_experiment_by_name("pretrain")
    runs = {r.info.run_name: r for r in client.search_runs([exp.experiment_id])}
    parent = runs["sweep/scaling"]
    assert parent.data.metrics["law_alpha"] == pytest.approx(fit["law"]["alpha"])
    assert {a.path for a in client.list_artifacts(parent.info.run_id, "scaling")} >= {
        "scaling/fit.json", "scaling/loss_vs_compute.png", "scaling/isoflop.png"}
    points = [r for name, r in runs.items() if name.startswith("sweep/scaling/")]
    assert len(points) == 6 and all(r.data.tags["mlflow.parentRunId"] == parent.info.run_id for r in points)
    assert all(client.get_metric_history(r.info.run_id, "loss") for r in points)  # the ranks logged their curves

    config = tmp_path / "scaling.yaml"
    plan = subprocess.run([sys.executable, "-m", "cli", "plan", "--config", str(config), "--flops", "1e12",
                           "--json"], capture_output=True, text=True, cwd=ROOT, check=True)
    planned = json.loads(plan.stdout)
    assert planned["law"] == "fitted" and planned["flops"] == 1e12
    assert planned["params"] * planned["tokens"] * 6 == pytest.approx(1e12)

    # a rerun reuses every trained point (a retried sweep goes on where it stopped): no file rewritten, no new run
    trained = {p: p.stat().st_mtime_ns for p in (root / "scaling").glob("*/**/*") if p.is_file()}
    assert len({p.relative_to(root / "scaling").parts[0] for p in trained}) == 6
    again = run_flow("scaling", data, tmp_path, shared_prefect)
    assert again["law"] == result["law"]
    assert {p: p.stat().st_mtime_ns for p in trained} == trained
    reruns = [r for r in client.search_runs([exp.experiment_id]) if r.info.run_name.startswith("sweep/scaling/")]
    assert len(reruns) == 6
