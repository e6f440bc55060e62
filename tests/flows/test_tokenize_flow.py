"""The tokenize flow's per-part tasks on a Ray cluster write the same bytes as the local process pool."""
from __future__ import annotations

import hashlib
import shutil

import pytest

from model.data import read_manifest
from tests.conftest import tiny_dict
from tests.flows.conftest import run_flow

pytestmark = pytest.mark.slow


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def test_ray_cluster_tokenize_matches_process_pool(ray_cluster, prepared_run, tmp_path, shared_prefect):
    _, prepared = prepared_run
    for stage in ("clean", "tokenizer"):
        shutil.copytree(prepared / stage, tmp_path / stage)
    result = run_flow("tokenize", tiny_dict(tmp_path, tokenize={"executor": {"kind": "ray", "ray_address": ray_cluster}}),
                      tmp_path, shared_prefect)
    assert result["version"] == read_manifest(prepared / "tokens")["version"]
    flow_output = digests(tmp_path / "tokens")
    assert flow_output.pop("version.json")  # the flow records the version it made (the data is the same bytes)
    assert flow_output == digests(prepared / "tokens")
    assert not (tmp_path / "tokens.parts").exists()
