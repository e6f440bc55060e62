"""A versioned stage in the flows: planned once per pipeline run and handed down, run as its steps, recorded."""
import tasks.versions as versions
from flows.versions import versioned_stage
from pretrain.config import parse_config
from tasks.common.outputs import read_json
from tests.conftest import tiny_dict


def config_with_corpus(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "one document"}\n')
    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(corpus)}]
    return parse_config(data), corpus


def test_a_stage_runs_at_the_version_handed_down_without_listing_the_corpus_again(tmp_path, monkeypatch):
    cfg, corpus = config_with_corpus(tmp_path)
    planned = versions.expected_versions(cfg)  # the pipeline run's one listing, before its first stage
    plan_file = versions.write_planned(cfg, planned, "run-1")
    read_back = versions.read_planned(plan_file)  # through JSON, as version.json holds it
    assert {k: (v.version, v.inputs) for k, v in read_back.items()} == {k: (v.version, v.inputs) for k, v in planned.items()}
    listings, seen = [], []
    real = versions.outside_inputs
    monkeypatch.setattr(versions, "outside_inputs", lambda c, stage: listings.append(stage) or real(c, stage))
    corpus.write_text('{"text": "another document, longer"}\n')  # changed mid-run: the run keeps its plan

    def steps(run, version):
        seen.append((run.cfg.name, version.version))
        run.dir("clean").mkdir()
        return {"kept": 1}

    assert versioned_stage(cfg, "clean", None, False, steps, str(plan_file)) == {"kept": 1}
    assert listings == [] and seen == [(cfg.name, planned["clean"].version)]
    recorded = read_json(cfg.run_root_path() / "clean" / "version.json")
    assert recorded["version"] == planned["clean"].version and recorded["provenance"]["command"]


def test_a_stage_run_alone_plans_its_own_version_from_the_corpus_as_it_is(tmp_path, monkeypatch):
    cfg, corpus = config_with_corpus(tmp_path)
    before = versions.expected_versions(cfg)["clean"].version
    corpus.write_text('{"text": "another document, longer"}\n')
    listings = []
    real = versions.outside_inputs
    monkeypatch.setattr(versions, "outside_inputs", lambda c, stage: listings.append(stage) or real(c, stage))
    versioned_stage(cfg, "clean", None, False, lambda run, version: run.dir("clean").mkdir() or {}, None)
    assert listings.count("clean") == 1
    recorded = read_json(cfg.run_root_path() / "clean" / "version.json")["version"]
    assert recorded != before and recorded == versions.expected_versions(cfg)["clean"].version
