"""Stage flows run as a user runs them, and a real Ray cluster on loopback for the Ray executor."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.common.ports import free_port
from tests.conftest import ROOT, prefect_home, running_server


def run_flow(stage: str, data: dict, tmp: Path, api_url: str | None = None) -> dict:
    """`pretrain <stage>` in a subprocess, on the Prefect server at api_url (else the run starts its own); returns
    the result it prints (the last JSON object)."""
    config = tmp / f"{stage}.yaml"
    config.write_text(yaml.safe_dump(data, allow_unicode=True))
    env = {**os.environ, **({"PREFECT_API_URL": api_url} if api_url else {})}
    proc = subprocess.run([sys.executable, "-m", "cli", stage, "--config", str(config)],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = "\n" + proc.stdout
    return json.loads(out[out.rindex("\n{\n") + 1:])


@pytest.fixture
def ray_cluster(tmp_path_factory):
    """A real Ray head node on 127.0.0.1 with token auth, as a shared cluster would run.

    One per test, stopped right after it, with a small object store: a Ray head left
    running holds gigabytes that the rest of the suite needs.
    """
    pytest.importorskip("prefect_ray")
    token = tmp_path_factory.mktemp("ray") / "ray_token"
    token.write_text(secrets.token_hex(32))
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}
    saved = {k: os.environ.get(k) for k in auth}
    os.environ.update(auth)  # read by `ray start` below and by the flows' ray.init
    ray_bin = str(Path(sys.executable).parent / "ray")
    port = free_port()
    start = subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                            "--num-cpus=2", "--object-store-memory=300000000", "--include-dashboard=false",
                            "--disable-usage-stats"],
                           capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def prefect_server(monkeypatch, tmp_path_factory, migrated_prefect_db):
    """A Prefect server of its own (its database in a new PREFECT_HOME) that outlives the CLI run (`pretrain` uses
    PREFECT_API_URL when set), to read back after it."""
    home = prefect_home(tmp_path_factory.mktemp("prefect-home"), migrated_prefect_db)
    monkeypatch.setenv("PREFECT_HOME", str(home))
    with running_server(home) as url:
        monkeypatch.setenv("PREFECT_API_URL", url)
        yield url


def prefect_api(url: str, path: str, body: dict | None = None):
    import httpx

    return httpx.post(f"{url}{path}", json=body or {}, timeout=30).json()


def subflow_runs(url: str, parent_id: str) -> dict[str, list[dict]]:
    """flow name -> its runs under the parent flow run, oldest first."""
    tasks = prefect_api(url, "/task_runs/filter", {"flow_runs": {"id": {"any_": [parent_id]}}})
    runs = prefect_api(url, "/flow_runs/filter", {"flow_runs": {"parent_task_run_id": {"any_": [t["id"] for t in tasks]}},
                                                  "sort": "EXPECTED_START_TIME_ASC"})
    flows = {f["id"]: f["name"] for f in prefect_api(url, "/flows/filter")}
    out: dict[str, list[dict]] = {}
    for r in runs:
        out.setdefault(flows[r["flow_id"]], []).append(r)
    return out


def subflows_of(url: str, flow_name: str) -> dict[str, list[dict]]:
    """sub-flow name -> its runs (oldest first) under the one run of the flow named flow_name."""
    flows = {f["id"]: f["name"] for f in prefect_api(url, "/flows/filter")}
    [parent] = [r for r in prefect_api(url, "/flow_runs/filter") if flows[r["flow_id"]] == flow_name]
    return subflow_runs(url, parent["id"])
