"""Planned versions in the flows: computed once per pipeline run, again for the next run."""
import tasks.versions as versions
from flows.versions import versions_of_run
from pretrain.config import parse_config
from tests.conftest import tiny_dict


def test_a_run_lists_its_inputs_once_and_the_next_run_sees_what_changed(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "one document"}\n')
    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(corpus)}]
    cfg = parse_config(data)
    listings = []
    real = versions.outside_inputs
    monkeypatch.setattr(versions, "outside_inputs", lambda c, stage: listings.append(stage) or real(c, stage))
    first = versions_of_run(cfg, "run-1")
    for _ in range(4):  # the status table, then clean, tokenizer, tokenize and train each ask
        assert versions_of_run(parse_config(data), "run-1") == first
    assert listings.count("clean") == 1
    corpus.write_text('{"text": "another document, longer"}\n')
    assert versions_of_run(cfg, "run-1")["clean"] == first["clean"]  # within a run, the version it started at
    second = versions_of_run(cfg, "run-2")
    assert second["clean"].version != first["clean"].version and listings.count("clean") == 2
    assert versions_of_run(cfg, None)["clean"].version == second["clean"].version  # outside a run: computed anew
    assert listings.count("clean") == 3
