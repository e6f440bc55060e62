"""End to end through real services on loopback: Prefect server + process worker + MLflow server.

Starts them with infra/local.sh (the same script `make demo` uses) on free
ports with a temporary state directory, registers deployments/prefect.yaml,
and runs deployments the way users do, with `prefect deployment run`.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from model.checkpoint import complete_tags
from model.data import open_shard, read_manifest
from tasks.common.outputs import read_json
from tasks.preflight.probe import free_port
from tasks.tokenizer import load_tokenizer
from tests.conftest import ROOT, tiny_dict

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    state = tmp_path_factory.mktemp("stack")
    prefect_port, mlflow_port = free_port(), free_port()
    env = {**os.environ, "PRETRAIN_STATE": str(state), "PREFECT_PORT": str(prefect_port),
           "MLFLOW_PORT": str(mlflow_port), "PRETRAIN_WORK_POOL": f"test-{os.getpid()}",
           "VENV": str(Path(sys.executable).parent.parent)}
    env.pop("PREFECT_API_URL", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    up = subprocess.run(["bash", "infra/local.sh", "up"], cwd=ROOT, env=env, capture_output=True, text=True)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        deploy = subprocess.run(["bash", "infra/local.sh", "deploy"], cwd=ROOT, env=env, capture_output=True, text=True)
        assert deploy.returncode == 0, deploy.stdout[-3000:] + deploy.stderr[-3000:]
        env["PREFECT_API_URL"] = f"http://127.0.0.1:{prefect_port}/api"
        env["MLFLOW_TRACKING_URI"] = f"http://127.0.0.1:{mlflow_port}"
        yield env
    finally:
        subprocess.run(["bash", "infra/local.sh", "down"], cwd=ROOT, env=env, capture_output=True)


def prefect(env, *args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([str(Path(sys.executable).parent / "prefect"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def write_config(tmp_path: Path, name: str, **train) -> Path:
    data = tiny_dict(tmp_path / "run", train=train)
    data["name"] = name
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, allow_unicode=True))
    return path


def flow_run_state(env, run_id: str) -> str:
    out = prefect(env, "flow-run", "inspect", run_id, timeout=60).stdout
    m = re.search(r"state_type=StateType\.(\w+)", out)
    return m.group(1) if m else "UNKNOWN"


def test_full_deployment_end_to_end(stack, tmp_path):
    config = write_config(tmp_path, "e2e-full", steps=6, save_every=3)
    proc = prefect(stack, "deployment", "run", "pretrain/full", "-p", f"config={config}", "--watch")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert "Completed" in proc.stdout
    root = tmp_path / "run"

    clean = read_json(root / "clean" / "manifest.json")
    assert clean["docs_in"] == clean["kept"] + clean["rejected"]
    assert clean["rejected_by_reason"]["exact_duplicate"] == 3 and clean["rejected_by_reason"]["dirty_content"] == 4

    tok = load_tokenizer(root / "tokenizer")
    sample = "预训练流水线 pretraining pipeline 3.14159\n    def f(): pass"
    assert tok.decode(tok.encode(sample, add_special_tokens=False).ids, skip_special_tokens=False) == sample

    manifest = read_manifest(root / "tokens")
    assert sum(len(open_shard(root / "tokens" / s["file"]).tokens) for s in manifest["shards"]) == manifest["total_tokens"]

    assert complete_tags(root / "train" / "checkpoints")[-1] == "step_00000006"
    assert read_json(root / "preflight" / "report.json")["passed_gate"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(stack["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("pretrain")
    runs = client.search_runs([exp.experiment_id], filter_string="attributes.run_name LIKE 'e2e-full%'")
    by_name = {r.info.run_name: r for r in runs}
    parent = by_name["e2e-full"]
    children = {f"e2e-full/{s}" for s in ("clean", "tokenizer", "tokenize", "preflight", "train")}
    assert children <= set(by_name)
    assert all(by_name[c].data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert all(r.info.status == "FINISHED" for r in runs)
    train_run = by_name["e2e-full/train"]
    assert [m.step for m in client.get_metric_history(train_run.info.run_id, "loss")] == [1, 2, 3, 4, 5, 6]
    assert train_run.data.tags["final_checkpoint"].endswith("step_00000006")
    hf_dir = Path(train_run.data.tags["hf_export"])
    assert hf_dir.name == "step_00000006" and (hf_dir / "model.safetensors").is_file()
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in hf_dir.iterdir()}
    artifacts = {a.path for a in client.list_artifacts(by_name["e2e-full/tokenizer"].info.run_id, "tokenizer")}
    assert {"tokenizer/tokenizer.json", "tokenizer/report.json"} <= artifacts

    import httpx

    artifacts = httpx.post(f"{stack['PREFECT_API_URL']}/artifacts/filter", json={}).json()
    keys = {a["key"]: a for a in artifacts}
    for key in ("e2e-full-clean", "e2e-full-tokenizer", "e2e-full-tokenize", "e2e-full-preflight",
                "e2e-full-train", "e2e-full-summary", "e2e-full-rule-tokens"):
        assert key in keys
    assert "chars/token" in keys["e2e-full-tokenizer"]["data"]


def rank_processes(spec: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(spec) in cmd:
            found.append(p)
    return found


def test_cancelling_training_leaves_no_rank_alive(stack, tmp_path, prepared_run):
    _, prepared = prepared_run
    config = write_config(tmp_path, "e2e-cancel", steps=1_000_000, save_every=1_000_000)
    for stage in ("tokenizer", "tokens"):
        shutil.copytree(prepared / stage, tmp_path / "run" / stage)
    proc = prefect(stack, "deployment", "run", "train/default", "-p", f"config={config}", timeout=120)
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", proc.stdout).group(1)
    metrics = tmp_path / "run" / "train" / "metrics.jsonl"
    deadline = time.time() + 240
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 3):
        assert time.time() < deadline, f"training never started; state {flow_run_state(stack, run_id)}"
        time.sleep(1)
    spec = tmp_path / "run" / "train" / "spec.json"
    assert len(rank_processes(spec)) >= 3  # the deepspeed runner, its launcher and two ranks

    cancel = prefect(stack, "flow-run", "cancel", run_id, timeout=60)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    deadline = time.time() + 90
    while rank_processes(spec) and time.time() < deadline:
        time.sleep(1)
    assert rank_processes(spec) == [], "rank processes survived the cancellation"
    deadline = time.time() + 90
    while flow_run_state(stack, run_id) != "CANCELLED" and time.time() < deadline:
        time.sleep(2)
    assert flow_run_state(stack, run_id) == "CANCELLED"
