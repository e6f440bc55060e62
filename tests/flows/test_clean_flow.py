"""The clean flow's per-shard tasks on both executors: Prefect's process pool and a Ray cluster on loopback."""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tasks.preflight.probe import free_port
from tests.conftest import ROOT, tiny_dict

pytestmark = pytest.mark.slow


def run_flow(data: dict, tmp: Path) -> dict:
    """`pretrain clean` in a subprocess, as a user runs it; returns the manifest it prints."""
    config = tmp / "clean.yaml"
    config.write_text(yaml.safe_dump(data, allow_unicode=True))
    proc = subprocess.run([sys.executable, "-m", "pretrain.cli", "clean", "--config", str(config)],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ}, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = "\n" + proc.stdout
    return json.loads(out[out.rindex("\n{\n") + 1:])  # the manifest is the last JSON object printed


def comparable(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "shards_skipped"}


@pytest.fixture(scope="module")
def process_pool_manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    return run_flow(tiny_dict(root, clean={"executor": {"kind": "process", "workers": 2}}), root)


def test_process_pool_flow(process_pool_manifest):
    m = process_pool_manifest
    assert m["shards"] == 2 and m["docs_in"] == m["kept"] + m["rejected"]  # one per source: small files are grouped
    assert m["rejected_by_reason"]["exact_duplicate"] == 3


@pytest.fixture
def ray_cluster(tmp_path, monkeypatch):
    """A real Ray head node on 127.0.0.1 with token auth, as a shared cluster would run."""
    pytest.importorskip("prefect_ray")
    token = tmp_path / "ray_token"
    token.write_text(secrets.token_hex(32))
    for key, value in {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token)}.items():
        monkeypatch.setenv(key, value)  # read by `ray start` below and by ray.init in this process
    ray_bin = str(Path(sys.executable).parent / "ray")
    port = free_port()
    start = subprocess.run([ray_bin, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
                            "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats"],
                           capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}"
    finally:
        subprocess.run([ray_bin, "stop", "--force"], capture_output=True, timeout=120)


def test_ray_cluster_flow_matches_process_pool(ray_cluster, tmp_path, process_pool_manifest):
    m = run_flow(tiny_dict(tmp_path, clean={"executor": {"kind": "ray", "ray_address": ray_cluster}}), tmp_path)
    assert comparable(m) == comparable(process_pool_manifest)
    assert (tmp_path / "clean" / "_SUCCESS").is_file()
    assert not (tmp_path / "clean.shards").exists()
