"""End to end through real services on loopback: Prefect server + process worker + MLflow server.

Starts them with infra/local.sh (the same script `make demo` uses) on free
ports with a temporary state directory, registers deployments/prefect.yaml,
and runs deployments the way users do, with `prefect deployment run`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from model.checkpoint import complete_tags
from model.data import open_shard, read_manifest
from model.protocol import read_jsonl
from tasks.common.outputs import read_json
from tasks.common.ports import free_port
from tasks.tokenizer.train import load_tokenizer
from tests.conftest import ROOT, tiny_dict
from tests.flows.conftest import prefect_api, subflow_runs

pytestmark = pytest.mark.slow


def services(state: Path, extra: dict[str, str]):
    """infra/local.sh up + deploy on free ports; yields the environment that talks to them; down at the end."""
    prefect_port, mlflow_port = free_port(), free_port()
    env = {**os.environ, "PRETRAIN_STATE": str(state), "PREFECT_PORT": str(prefect_port),
           "MLFLOW_PORT": str(mlflow_port), "PRETRAIN_WORK_POOL": f"test-{os.getpid()}",
           "VENV": str(Path(sys.executable).parent.parent), **extra}
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


@pytest.fixture(scope="module")
def postgres():
    """A throwaway PostgreSQL server on loopback, from the distribution's packages (.ci/run installs them)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        pytest.skip("PostgreSQL is not installed here (apt-get install postgresql; .ci/run does)")
    bindir = found[-1].parent
    home = Path(tempfile.mkdtemp(prefix="pg-"))
    as_owner: list[str] = []
    if os.geteuid() == 0:  # initdb refuses root: the cluster belongs to the postgres user
        shutil.chown(home, "postgres")
        as_owner = ["runuser", "-u", "postgres", "--"]
    port, data = free_port(), home / "data"
    run = lambda *cmd: subprocess.run(as_owner + [str(c) for c in cmd], capture_output=True, text=True, check=True)  # noqa: E731
    run(bindir / "initdb", "-D", data, "-U", "prefect", "--auth=trust")
    run(bindir / "pg_ctl", "-D", data, "-l", home / "server.log", "-w", "start",
        "-o", f"-p {port} -k {home} -c listen_addresses=127.0.0.1")
    try:
        run(bindir / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "prefect", "prefect")
        yield {"url": f"postgresql+asyncpg://prefect@127.0.0.1:{port}/prefect", "port": port, "bindir": bindir}
    finally:
        subprocess.run(as_owner + [str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_stack(tmp_path_factory, postgres):
    """What a team runs: the Prefect server on PostgreSQL. One stack for the module: each costs a minute to bring
    up and down. (The default SQLite server runs in tests/cli/test_main.py and `make demo`.)"""
    yield from services(tmp_path_factory.mktemp("pg-stack"), {"PREFECT_API_DATABASE_CONNECTION_URL": postgres["url"],
                                                               "PREFECT_WORKER_QUERY_SECONDS": "2"})  # not 10


def psql(postgres, query: str) -> str:
    return subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(postgres["port"]), "-U", "prefect", "-d", "prefect",
                           "-tAc", query], capture_output=True, text=True, check=True).stdout.strip()


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
    """Read over the REST API, as the UI does: a `prefect flow-run inspect` every 3 s would cost seconds of
    CPU each, taken from the pipeline it is waiting for on a 2-core machine."""
    import httpx

    return httpx.get(f"{env['PREFECT_API_URL']}/flow_runs/{run_id}", timeout=30).json()["state_type"]


def api(env, path: str, body: dict | None = None):
    return prefect_api(env["PREFECT_API_URL"], path, body)


def wait_for_state(env, run_id: str, states: set[str], seconds: int) -> str:
    deadline = time.time() + seconds
    while (state := flow_run_state(env, run_id)) not in states:
        assert time.time() < deadline, f"flow run {run_id} still {state} after {seconds} s"
        time.sleep(3)
    return state


def stage_outputs(root: Path) -> dict[str, float]:
    files = ["clean/manifest.json", "tokenizer/tokenizer.json", "tokens/manifest.json", "preflight/report.json"]
    return {f: (root / f).stat().st_mtime_ns for f in files}


def test_full_deployment_fails_mid_training_and_a_retry_runs_only_what_did_not_finish(pg_stack, postgres, tmp_path):
    """A crash at step 5 fails the run; `prefect flow-run retry` (what the UI's Retry does) reuses the finished
    stages' persisted results and resumes training from step 3. Every saved checkpoint triggers the eval flow."""
    config = write_config(tmp_path, "e2e-full", steps=6, save_every=3, recovery={"enabled": False})
    faults = json.dumps({"PRETRAIN_FAULTS": "crash_at_step_5", "PRETRAIN_FAULTS_ONCE_FILE": str(tmp_path / "fired")})
    proc = prefect(pg_stack, "deployment", "run", "pretrain/full", "-p", f"config={config}", "--job-variable",
                   f"env={faults}", timeout=120)
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", proc.stdout).group(1)
    assert wait_for_state(pg_stack, run_id, {"FAILED", "COMPLETED", "CRASHED"}, 900) == "FAILED"
    root = tmp_path / "run"
    assert complete_tags(root / "train" / "checkpoints") == ["step_00000003"]
    before = stage_outputs(root)

    retry = prefect(pg_stack, "flow-run", "retry", run_id, timeout=60)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert wait_for_state(pg_stack, run_id, {"FAILED", "COMPLETED", "CRASHED"}, 900) == "COMPLETED"

    # finished stages came back from their persisted results: same sub-flow run, outputs untouched
    assert stage_outputs(root) == before
    runs = subflow_runs(pg_stack["PREFECT_API_URL"], run_id)
    for stage in ("clean", "tokenizer", "tokenize", "preflight"):
        assert [r["state_type"] for r in runs[stage]] == ["COMPLETED"], stage
    assert [r["state_type"] for r in runs["train"]] == ["FAILED", "COMPLETED"]
    starts = [e["step"] for e in read_jsonl(root / "train" / "events.jsonl") if e["event"] == "start"]
    assert starts == [0, 3]  # the retry resumed from the newest complete checkpoint
    assert complete_tags(root / "train" / "checkpoints")[-1] == "step_00000006"

    clean = read_json(root / "clean" / "manifest.json")
    assert clean["docs_in"] == clean["kept"] + clean["rejected"]
    assert clean["rejected_by_reason"]["exact_duplicate"] == 3 and clean["rejected_by_reason"]["dirty_content"] == 4
    tok = load_tokenizer(root / "tokenizer")
    sample = "预训练流水线 pretraining pipeline 3.14159\n    def f(): pass"
    assert tok.decode(tok.encode(sample, add_special_tokens=False).ids, skip_special_tokens=False) == sample
    manifest = read_manifest(root / "tokens")
    assert sum(len(open_shard(root / "tokens" / s["file"]).tokens) for s in manifest["shards"]) == manifest["total_tokens"]
    assert read_json(root / "preflight" / "report.json")["passed_gate"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(pg_stack["MLFLOW_TRACKING_URI"])
    exp = client.get_experiment_by_name("pretrain")
    mlruns = client.search_runs([exp.experiment_id], filter_string="attributes.run_name LIKE 'e2e-full%'",
                                order_by=["attributes.start_time ASC"])
    by_name: dict[str, list] = {}
    for r in mlruns:
        by_name.setdefault(r.info.run_name, []).append(r)
    [parent] = by_name["e2e-full"]  # the retry went on in the first attempt's parent run
    assert parent.info.status == "FINISHED" and parent.data.tags["prefect.flow_run_id"] == run_id
    for stage in ("clean", "tokenizer", "tokenize", "preflight"):
        [child] = by_name[f"e2e-full/{stage}"]
        assert child.info.status == "FINISHED" and child.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert child.data.tags["prefect.flow_run_id"] == runs[stage][0]["id"]
    failed_train, train_run = by_name["e2e-full/train"]
    assert failed_train.info.status == "FAILED" and train_run.info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(failed_train.info.run_id, "loss")] == [1, 2, 3, 4]
    assert [m.step for m in client.get_metric_history(train_run.info.run_id, "loss")] == [4, 5, 6]
    assert train_run.data.tags["final_checkpoint"].endswith("step_00000006")
    hf_dir = Path(train_run.data.tags["hf_export"])
    assert hf_dir.name == "step_00000006" and (hf_dir / "model.safetensors").is_file()
    assert {"config.json", "tokenizer.json", "tokenizer_config.json"} <= {p.name for p in hf_dir.iterdir()}
    artifacts = {a.path for a in client.list_artifacts(by_name["e2e-full/tokenizer"][0].info.run_id, "tokenizer")}
    assert {"tokenizer/tokenizer.json", "tokenizer/report.json"} <= artifacts

    keys = {a["key"]: a for a in api(pg_stack, "/artifacts/filter")}
    for key in ("e2e-full-clean", "e2e-full-tokenizer", "e2e-full-tokenize", "e2e-full-preflight",
                "e2e-full-train", "e2e-full-summary", "e2e-full-rule-tokens"):
        assert key in keys
    assert "chars/token" in keys["e2e-full-tokenizer"]["data"]
    ledger = keys["e2e-full-train-ledger"]["data"]  # tokens per pool: one pool, one phase, at the last step
    ledger = json.loads(ledger) if isinstance(ledger, str) else ledger
    assert [(r["step"], r["phase"], r["pool"], r["share"]) for r in ledger] == [(6, "all", "all", 1.0)]
    assert [m.value for m in client.get_metric_history(train_run.info.run_id, "tokens/all/all")][-1] == \
        ledger[0]["tokens"] > 0
    latest = {a["key"]: a for a in api(pg_stack, "/artifacts/latest/filter")}
    for stage in ("clean", "tokenize", "train"):  # progress artifacts of the long stages, at their end
        assert float(latest[f"e2e-full-{stage}-progress"]["data"]) == 100.0, stage
    link = f"/#/experiments/{exp.experiment_id}/runs/{by_name['e2e-full/clean'][0].info.run_id}"
    assert link in keys["e2e-full-clean"]["description"]  # Prefect -> MLflow

    # each checkpoint the ranks saved became a pretrain.checkpoint.saved event, and the trigger ran the eval flow
    evals = wait_for_evals(pg_stack, {"step_00000003", "step_00000006"})
    assert evals["step_00000003"]["parameters"]["mlflow_train_run_id"] == failed_train.info.run_id
    assert evals["step_00000006"]["parameters"]["mlflow_train_run_id"] == train_run.info.run_id
    scored = {r["tag"]: r for r in read_jsonl(root / "eval" / "history.jsonl")}
    assert scored.keys() == {"step_00000003", "step_00000006"}
    history = client.get_metric_history(train_run.info.run_id, "ckpt_eval_ppl_en")
    assert [(m.step, round(m.value, 6)) for m in history] == [(6, round(scored["step_00000006"]["ppl"]["en"], 6))]
    assert [m.step for m in client.get_metric_history(failed_train.info.run_id, "ckpt_eval_ppl_en")] == [3]
    # and all of it was recorded in PostgreSQL, not in a SQLite file
    assert int(psql(postgres, f"SELECT run_count FROM flow_run WHERE id = '{run_id}'")) == 2
    check_versions_lineage_and_reuse(pg_stack, config, root)


def stage_status(env, config: Path) -> dict[str, dict]:
    proc = subprocess.run([sys.executable, "-m", "cli", "status", "--config", str(config), "--json"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return {r["stage"]: r for r in json.loads(proc.stdout)}


def run_deployment(env, config: Path) -> tuple[str, float]:
    started = time.time()
    proc = prefect(env, "deployment", "run", "pretrain/full", "-p", f"config={config}", timeout=120)
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", proc.stdout).group(1)
    assert wait_for_state(env, run_id, {"FAILED", "COMPLETED", "CRASHED"}, 900) == "COMPLETED"
    return run_id, time.time() - started


def check_versions_lineage_and_reuse(env, config: Path, root: Path) -> None:
    """After the run: every stage recorded its version and provenance, the model's lineage leads to the clean
    manifest; a second run reuses every versioned stage; a changed field reruns only what depends on it."""
    from flows.versions import lineage

    status = stage_status(env, config)
    assert {s: r["state"] for s, r in status.items()} == {
        "clean": "up to date", "tokenizer": "up to date", "tokenize": "up to date", "preflight": "not needed",
        "train": "up to date"}
    train_version = read_json(root / "train" / "version.json")
    assert train_version["inputs"]["tokenize"] == read_json(root / "tokens" / "version.json")["version"]
    assert train_version["provenance"]["packages"]["deepspeed"] and train_version["provenance"]["command"]
    found = lineage(env["MLFLOW_TRACKING_URI"], "e2e-full")
    assert found["versions"]["clean"] == read_json(root / "clean" / "version.json")["version"]
    assert json.loads(Path(found["clean_manifest"]).read_text()) == read_json(root / "clean" / "manifest.json")
    assert ("e2e-full-tokens", train_version["inputs"]["tokenize"]) in found["datasets"]

    before = {**stage_outputs(root), "train/result.json": (root / "train" / "result.json").stat().st_mtime_ns}
    again, seconds = run_deployment(env, config)
    # nothing ran: no output rewritten, not even preflight's (it gates training, and training is up to date)
    assert {**stage_outputs(root), "train/result.json": (root / "train" / "result.json").stat().st_mtime_ns} == before
    artifacts = {a["key"]: a for a in api(env, "/artifacts/latest/filter")}
    for stage in ("clean", "tokenizer", "tokenize", "train"):
        assert f"**{stage}**: reused, version `{status[stage]['expected']}`" in artifacts[f"e2e-full-{stage}-version"]["data"]
    print(f"second run, every versioned stage reused: {seconds:.0f} s")

    data = yaml.safe_load(config.read_text())
    data["train"]["steps"] = 8  # counts for training only
    longer = config.with_name("e2e-full-longer.yaml")
    longer.write_text(yaml.safe_dump(data, allow_unicode=True))
    status = stage_status(env, longer)
    assert [s for s, r in status.items() if r["state"] in ("would rerun", "will run")] == ["preflight", "train"]
    assert status["train"]["why"] == "train.steps: 6 -> 8"
    run_deployment(env, longer)
    assert {k: v for k, v in stage_outputs(root).items() if k != "preflight/report.json"} == \
        {k: v for k, v in before.items() if k not in ("preflight/report.json", "train/result.json")}
    assert read_json(root / "train" / "result.json")["latest_step"] == 8
    assert read_json(root / "train" / "version.json")["version"] == status["train"]["expected"]


def wait_for_evals(env, tags: set[str], seconds: int = 300) -> dict[str, dict]:
    deadline = time.time() + seconds
    while True:
        runs = [r for r in api(env, "/flow_runs/filter") if r["parameters"].get("checkpoint") in tags]
        done = {r["parameters"]["checkpoint"]: r for r in runs if r["state_type"] == "COMPLETED"}
        if done.keys() == tags:
            return done
        failed = [r["name"] for r in runs if r["state_type"] in ("FAILED", "CRASHED")]
        assert not failed and time.time() < deadline, f"eval runs {[(r['parameters'], r['state_type']) for r in runs]}"
        time.sleep(3)


def test_eval_deployment_is_scheduled_and_triggered_by_checkpoints(pg_stack):
    [deployment] = [d for d in api(pg_stack, "/deployments/filter") if d["entrypoint"] == "flows/evaluation.py:eval_flow"]
    assert [s["schedule"]["cron"] for s in deployment["schedules"] if s["active"]] == ["0 */4 * * *"]
    [train] = [d for d in api(pg_stack, "/deployments/filter") if d["entrypoint"] == "flows/train.py:train_flow"]
    # its own pool, so an eval never lands on a node that is training
    assert deployment["work_pool_name"] == f"{train['work_pool_name']}-eval"
    automations = [a for a in api(pg_stack, "/automations/filter")
                   if any(x.get("deployment_id") == deployment["id"] for x in a["actions"])]
    assert len(automations) == 1 and automations[0]["enabled"]
    assert automations[0]["trigger"]["expect"] == ["pretrain.checkpoint.saved"]
    assert automations[0]["actions"][0]["parameters"]["checkpoint"] == "{{ event.payload.tag }}"


def rank_processes(spec: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(spec) in cmd:
            found.append(p)
    return found


def test_cancelling_training_leaves_no_rank_alive(pg_stack, tmp_path, prepared_run):
    _, prepared = prepared_run
    config = write_config(tmp_path, "e2e-cancel", steps=1_000_000, save_every=1_000_000)
    for stage in ("tokenizer", "tokens"):
        shutil.copytree(prepared / stage, tmp_path / "run" / stage)
    proc = prefect(pg_stack, "deployment", "run", "train/default", "-p", f"config={config}", timeout=120)
    run_id = re.search(r"UUID: ([0-9a-f-]{36})", proc.stdout).group(1)
    metrics = tmp_path / "run" / "train" / "metrics.jsonl"
    deadline = time.time() + 240
    while not (metrics.is_file() and metrics.read_text().count("\n") >= 3):
        assert time.time() < deadline, f"training never started; state {flow_run_state(pg_stack, run_id)}"
        time.sleep(1)
    spec = tmp_path / "run" / "train" / "spec.json"
    assert len(rank_processes(spec)) >= 3  # DeepSpeed's launcher and two ranks

    cancel = prefect(pg_stack, "flow-run", "cancel", run_id, timeout=60)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    deadline = time.time() + 90
    while rank_processes(spec) and time.time() < deadline:
        time.sleep(1)
    assert rank_processes(spec) == [], "rank processes survived the cancellation"
    deadline = time.time() + 90
    while flow_run_state(pg_stack, run_id) != "CANCELLED" and time.time() < deadline:
        time.sleep(2)
    assert flow_run_state(pg_stack, run_id) == "CANCELLED"
