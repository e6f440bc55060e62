"""The clean flow's per-shard tasks on both executors: Prefect's process pool and a Ray cluster on loopback."""
from __future__ import annotations

import pytest

from tests.conftest import tiny_dict
from tests.flows.conftest import run_flow

pytestmark = pytest.mark.slow


def comparable(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "shards_skipped"}


@pytest.fixture(scope="module")
def process_pool_manifest(tmp_path_factory):
    root = tmp_path_factory.mktemp("pool")
    return run_flow("clean", tiny_dict(root, clean={"executor": {"kind": "process", "workers": 2}}), root)


def test_process_pool_flow(process_pool_manifest):
    m = process_pool_manifest
    assert m["shards"] == 2 and m["docs_in"] == m["kept"] + m["rejected"]  # one per source: small files are grouped
    assert m["rejected_by_reason"]["exact_duplicate"] == 3


def test_ray_cluster_flow_matches_process_pool(ray_cluster, tmp_path, process_pool_manifest):
    m = run_flow("clean", tiny_dict(tmp_path, clean={"executor": {"kind": "ray", "ray_address": ray_cluster}}), tmp_path)
    assert comparable(m) == comparable(process_pool_manifest)
    assert (tmp_path / "clean" / "_SUCCESS").is_file()
    assert not (tmp_path / "clean.shards").exists()
