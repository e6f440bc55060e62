"""The clean flow's per-shard tasks on both executors: Prefect's process pool and a Ray cluster on loopback."""
from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, tiny_dict
from tests.flows.conftest import run_flow

pytestmark = pytest.mark.slow


def comparable(manifest: dict) -> dict:
    return {k: v for k, v in manifest.items() if k != "shards_skipped"}


def with_eval_set(root, executor: dict) -> dict:
    """The demo config plus an eval set that holds one demo paragraph, re-typeset (a planted leak)."""
    data = tiny_dict(root)
    paragraph = json.loads((ROOT / "demo/corpus/paragraphs.jsonl").read_text(encoding="utf-8").splitlines()[3])["text"]
    (root / "eval.jsonl").write_text(json.dumps({"question": paragraph.replace("，", ", "), "answer": "B"},
                                                ensure_ascii=False) + "\n", encoding="utf-8")
    data["clean"]["executor"] = executor
    data["clean"].setdefault("rules", {})["decontam"] = {"eval_sets": [{"name": "demo_eval",
                                                                        "path": str(root / "eval.jsonl")}]}
    return data


@pytest.fixture(scope="module")
def process_pool_run(tmp_path_factory, shared_prefect):
    root = tmp_path_factory.mktemp("pool")
    return run_flow("clean", with_eval_set(root, {"kind": "process", "workers": 2}), root, shared_prefect), root


def test_process_pool_flow(process_pool_run):
    m, root = process_pool_run
    assert m["shards"] == 2 and m["docs_in"] == m["kept"] + m["rejected"]  # one per source: small files are grouped
    assert m["rejected_by_reason"]["exact_duplicate"] == 3
    assert m["rejected_by_reason"]["eval_overlap_demo_eval"] == 1  # the window hashes agree across worker processes
    assert m["decontamination"]["demo_eval"] == {"items": 1, "window": 13, "items_shorter_than_ngram": 0,
                                                 "ngrams": m["decontamination"]["demo_eval"]["ngrams"],
                                                 "rejected_docs": 1}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    [run] = [r for r in client.search_runs([e.experiment_id for e in client.search_experiments()])
             if r.info.run_name.endswith("/clean")]
    assert run.data.metrics["decontamination.demo_eval.rejected_docs"] == 1


def test_ray_cluster_flow_matches_process_pool(ray_cluster, tmp_path, process_pool_run, shared_prefect):
    process_pool_manifest = process_pool_run[0]
    m = run_flow("clean", with_eval_set(tmp_path, {"kind": "ray", "ray_address": ray_cluster}), tmp_path,
                 shared_prefect)
    assert comparable(m) == comparable(process_pool_manifest)
    assert (tmp_path / "clean" / "_SUCCESS").is_file()
    assert not (tmp_path / "clean.shards").exists()


def test_the_table_names_each_source_judged_with_its_own_rules_and_what_they_rejected(tmp_path):
    from flows.clean import source_rule_rows
    from tasks.clean.stage import run_clean
    from tests.tasks.clean.test_stage import web_and_mail_sources

    manifest = run_clean(web_and_mail_sources(tmp_path), tmp_path / "clean")
    assert source_rule_rows(manifest) == [{"outcome": "source's own rules", "rule": "mail", "reason":
                                           'c4: {"mode": "tag"}, fineweb: {"mode": "tag"}', "documents": 0,
                                           "characters": 0}]
    assert source_rule_rows({"rejected_by_source": {}}) == []  # a manifest written before sources had rules
