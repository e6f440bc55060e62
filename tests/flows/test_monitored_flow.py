"""The train flow recovers from an injected loss spike: rollback and skip-ahead run as sub-flows."""
import shutil

import pytest

from model.protocol import read_jsonl
from tests.conftest import tiny_dict
from tests.flows.conftest import prefect_api, run_flow, subflows_of

pytestmark = pytest.mark.slow


def test_train_flow_rolls_back_and_skips_ahead(prepared_run, tmp_path, monkeypatch, prefect_server):
    cfg, prepared = prepared_run
    for stage in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / stage, tmp_path / stage)
    per_step = cfg.train.batch.micro_batch_size * 2 * cfg.train.batch.grad_accum
    monkeypatch.setenv("PRETRAIN_SPIKE_POSITIONS", f"{4 * per_step}-{5 * per_step}")  # the samples of step 5
    data = tiny_dict(tmp_path, train={"steps": 6, "save_every": 2, "export_hf": False,
                                      "anomaly": {"warmup": 3, "window": 4},
                                      "recovery": {"rollback_gap_steps": 1, "skip_margin_steps": 1}})
    result = run_flow("train", data, tmp_path)
    assert result["latest_step"] == 6 and result["attempts"] == 2
    [rollback] = read_jsonl(tmp_path / "train" / "recovery.jsonl")
    assert rollback["action"] == "rollback" and rollback["checkpoint"] == "step_00000004"
    assert rollback["anomaly"]["kind"] == "loss_spike" and rollback["anomaly"]["step"] == 5
    assert (tmp_path / "train" / "checkpoints" / "step_00000004").is_dir()
    # the data skipped starts where the checkpoint left off and covers every injected position
    assert rollback["skip"][0] == 4 * per_step and rollback["skip"][1] >= 5 * per_step
    # MLflow: the relaunch has its own child run of the train run, with its curve; the plot is logged
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = {r.info.run_name: r for r in client.search_runs(
        [e.experiment_id for e in client.search_experiments()])}
    train_run, attempt = runs[f"{data['name']}/train"], runs[f"{data['name']}/train/attempt-2"]
    assert attempt.data.tags["mlflow.parentRunId"] == train_run.info.run_id and attempt.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(attempt.info.run_id, "loss")][-1] == 6
    assert {a.path for a in client.list_artifacts(train_run.info.run_id, "train")} >= {"train/loss.png",
                                                                                      "train/recovery.jsonl"}
    # Prefect: the rollback and the skip-ahead ran as sub-flows of the train flow, each with its artifact
    subflows = subflows_of(prefect_server, "train")
    assert [r["state_type"] for r in subflows["rollback"]] == ["COMPLETED"]
    assert [r["state_type"] for r in subflows["skip-ahead"]] == ["COMPLETED"]
    artifacts = {a["key"]: a for a in prefect_api(prefect_server, "/artifacts/filter")}
    from flows.common import artifact_key
    from pretrain.config import parse_config

    prefix, attempt = artifact_key(parse_config(data), "train"), rollback["attempt"]
    rolled = artifacts[f"{prefix}-rollback-{attempt}"]
    assert rolled["flow_run_id"] == subflows["rollback"][0]["id"] and "`step_00000004`" in rolled["data"]
    skipped = artifacts[f"{prefix}-skip-ahead-{attempt}"]
    assert skipped["flow_run_id"] == subflows["skip-ahead"][0]["id"]
    assert f"**Skipped** sampler positions {rollback['skip'][0]}..{rollback['skip'][1]}" in skipped["data"]
