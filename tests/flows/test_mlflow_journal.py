"""A tracking server that dies while `pretrain train` runs and stays down: the stage finishes, its MLflow writes and
the ranks' unsent points are kept in the run root's journal, and reach MLflow once the server is back (a real
`mlflow server`, killed and started again on its database)."""
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml

from flows.mlflow_journal import PENDING_FILE, REFUSED_FILE
from model.protocol import METRICS_FILE, append_jsonl, read_jsonl
from tasks.common.ports import free_port
from tests.conftest import ROOT, tiny_dict
from tests.model.test_mlflow_upload import start_mlflow, stop

pytestmark = pytest.mark.slow


def cli(*args, env):
    return subprocess.run([sys.executable, "-m", "cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)


def last_json(stdout):
    """The stage's result: the last indented JSON object the command printed."""
    return json.loads(stdout[[m.start() for m in re.finditer(r"^\{$", stdout, re.M)][-1]:])


def wait_for_metrics(path, proc, timeout_s=300):
    deadline = time.time() + timeout_s
    while not read_jsonl(path):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "training logged no step"
        time.sleep(0.2)


def test_a_tracking_server_dying_mid_training_costs_the_stage_nothing_and_mlflow_gets_it_all_later(
        prepared_run, tmp_path, prefect_server):
    from mlflow.tracking import MlflowClient

    _, prepared = prepared_run
    for stage in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / stage, tmp_path / stage)
    port, store = free_port(), tmp_path / "mlflow-server"
    store.mkdir()
    server = start_mlflow(store, port)
    uri = f"http://127.0.0.1:{port}"
    data = tiny_dict(tmp_path, train={"steps": 30, "save_every": 10, "export_hf": False, "log_every": 1})
    data["tracking"] = {"mlflow_uri": uri}
    config = tmp_path / "train.yaml"
    config.write_text(yaml.safe_dump(data, allow_unicode=True))
    env = {**os.environ, "PREFECT_API_URL": prefect_server}
    proc = subprocess.Popen([sys.executable, "-m", "cli", "train", "--config", str(config)], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for_metrics(tmp_path / "train" / METRICS_FILE, proc)
        stop(server)  # and it stays down until the stage has ended
        out, err = proc.communicate(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    assert last_json(out)["latest_step"] == 30
    kept = read_jsonl(tmp_path / PENDING_FILE)
    assert {"points", "tags", "artifact", "end"} <= {r["op"] for r in kept}, kept
    assert "stays RUNNING until the server is back" in err
    status = cli("status", "--config", str(config), env=env)
    assert f"MLflow: {len(kept)} write(s) kept" in status.stdout and "pretrain mlflow-sync" in status.stdout
    assert cli("mlflow-sync", "--config", str(config), env=env).returncode == 1  # still down: kept, said

    server = start_mlflow(store, port)
    try:
        synced = cli("mlflow-sync", "--config", str(config), env=env)
        assert synced.returncode == 0 and f"sent {len(kept)} kept write(s)" in synced.stdout, synced.stderr[-2000:]
        assert not (tmp_path / PENDING_FILE).exists()
        client = MlflowClient(tracking_uri=uri)
        [run] = client.search_runs([client.get_experiment_by_name(data["tracking"].get("experiment", "pretrain"))
                                    .experiment_id], filter_string=f"attributes.run_name = '{data['name']}/train'")
        assert run.info.status == "FINISHED" and run.data.tags["final_checkpoint"].endswith("step_00000030")
        logged = {m.step for m in client.get_metric_history(run.info.run_id, "loss")}
        assert logged == {m["step"] for m in read_jsonl(tmp_path / "train" / METRICS_FILE)}  # every step, once
        assert "train/loss.png" in {a.path for a in client.list_artifacts(run.info.run_id, "train")}

        # a kept write MLflow refuses once it is up (its run deleted meanwhile) is set aside with the reason
        append_jsonl(tmp_path / PENDING_FILE, {"op": "tags", "run_id": "0" * 32, "args": {"tags": {"k": "v"}}})
        assert cli("mlflow-sync", "--config", str(config), env=env).returncode == 0
        [refused] = read_jsonl(tmp_path / REFUSED_FILE)
        assert refused["run_id"] == "0" * 32 and refused["error"]
    finally:
        stop(server)
