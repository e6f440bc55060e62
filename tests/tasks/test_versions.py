"""Stage versions: what counts, what reruns and why, and the record a stage leaves."""
import json
import shutil

import pytest

from pretrain.config import NO_EFFECT, PipelineConfig, changes_result, parse_config
from pretrain.stages import STAGE_NAMES
from tasks.versions import (expected_versions, output_dir, record_version, recorded_version, section_fields, status,
                            why_rerun)
from tests.conftest import ROOT, tiny_dict

# Every field left out of the versions, by the section it belongs to: changing this list is a decision.
NOT_COUNTED = {
    "CleanConfig": ["executor"], "TokenizeConfig": ["encoder", "executor"], "ModelConfig": ["preset"],
    "ComputeConfig": ["compile", "compile_backend", "sdpa_backend"],
    "ClusterConfig": ["launch", "master_addr", "master_port", "node_command", "node_command_shell", "ssh_launcher",
                      "timeout_minutes"],
    "CheckpointConfig": ["keep_every", "keep_last", "mirror_url", "stop_grace_s"],
    "WatchConfig": ["comm_profile_every", "first_step_timeout_s", "hang_timeout_s", "log_every", "peak_tflops_per_gpu",
                    "slow_phase_timeout_s", "straggler_ratio", "straggler_reports"],
    "TrainDataConfig": ["stage_data_dir"],
}


def config_classes(model=PipelineConfig, seen=None) -> dict:
    seen = {} if seen is None else seen
    for info in model.model_fields.values():
        for kind in getattr(info.annotation, "__args__", (info.annotation,)):
            if isinstance(kind, type) and hasattr(kind, "model_fields") and kind.__name__ not in seen:
                seen[kind.__name__] = kind
                config_classes(kind, seen)
    return seen


def test_the_fields_that_do_not_count_are_the_ones_chosen():
    found = {name: sorted(f for f, info in cls.model_fields.items() if not changes_result(info))
             for name, cls in config_classes().items()}
    assert {k: v for k, v in found.items() if v} == NOT_COUNTED
    assert NO_EFFECT == {"changes_result": False}


def with_changes(tmp_path, **sections) -> PipelineConfig:
    return parse_config(tiny_dict(tmp_path / "run", **sections))


def test_a_field_that_counts_changes_its_stage_and_every_stage_after_it(tmp_path):
    base = expected_versions(with_changes(tmp_path))
    tokenize = expected_versions(with_changes(tmp_path, tokenize={"shard_max_tokens": 100_000}))
    assert [s for s in base if base[s].version != tokenize[s].version] == ["tokenize", "train"]
    rule = expected_versions(with_changes(tmp_path, clean={"keep_channels": ["en"]}))
    assert [s for s in base if base[s].version != rule[s].version] == ["clean", "tokenizer", "tokenize", "train"]
    lr = expected_versions(with_changes(tmp_path, train={"lr": 5e-4}))
    assert [s for s in base if base[s].version != lr[s].version] == ["train"]


def test_fields_that_do_not_count_and_the_run_roots_place_change_no_version(tmp_path):
    base = expected_versions(with_changes(tmp_path))
    other = with_changes(tmp_path, train={"log_every": 7, "master_port": 29600, "keep_last": 1},
                         clean={"executor": {"kind": "process", "workers": 7}},
                         tokenize={"executor": {"kind": "process", "workers": 3}})
    moved = parse_config({**tiny_dict(tmp_path / "elsewhere"), "name": "renamed"})
    for cfg in (other, moved):
        assert {s: v.version for s, v in expected_versions(cfg).items()} == {s: v.version for s, v in base.items()}


def test_a_changed_input_file_changes_the_clean_version(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "one document"}\n')
    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"] = [{"path": str(corpus)}]
    before = expected_versions(parse_config(data))["clean"]
    corpus.write_text('{"text": "another document, longer"}\n')
    after = expected_versions(parse_config(data))["clean"]
    assert before.version != after.version
    assert why_rerun(before, after) == ["input files changed (sources, or files the rules read)"]


@pytest.fixture
def recorded_run(prepared_run, tmp_path):
    """The prepared clean, tokenizer and tokens outputs in a fresh run root, each recorded at its version."""
    _, prepared = prepared_run
    cfg = with_changes(tmp_path)
    for folder in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / folder, tmp_path / "run" / folder)
    versions = expected_versions(cfg)
    for stage in ("clean", "tokenizer", "tokenize"):
        record_version(cfg, stage, versions[stage], flow_run_id="flow-run-1")
    return cfg


def test_status_says_what_is_up_to_date_what_would_rerun_and_why(recorded_run, tmp_path):
    rows = {r["stage"]: r for r in status(recorded_run)}
    assert [rows[s]["state"] for s in STAGE_NAMES] == ["up to date", "up to date", "up to date", "will run", "missing"]
    changed = with_changes(tmp_path, tokenize={"shard_max_tokens": 100_000})
    rows = {r["stage"]: r for r in status(changed)}
    assert rows["clean"]["state"] == rows["tokenizer"]["state"] == "up to date"
    assert rows["tokenize"]["state"] == "would rerun"
    assert rows["tokenize"]["why"] == "tokenize.shard_max_tokens: 200000 -> 100000"


def test_the_record_holds_the_inputs_and_provenance(recorded_run):
    tokens = recorded_version(recorded_run, "tokenize")
    clean = recorded_version(recorded_run, "clean")
    assert tokens.inputs["clean"] == clean.version and (output_dir(recorded_run, "tokenize") / "version.json").is_file()
    p = tokens.provenance
    assert p["prefect_flow_run_id"] == "flow-run-1" and p["packages"]["torch"] and p["command"]
    from tasks.versions import git
    if (ROOT / ".git").exists():  # what git itself says of this checkout
        assert p["git_commit"] == git("rev-parse", "HEAD")
        assert p["git_dirty"] == bool(git("status", "--porcelain", "--untracked-files=no"))
    else:
        assert p["git_commit"] is None and p["git_dirty"] is None


def test_provenance_tells_a_clean_tree_from_a_changed_one_and_no_checkout(tmp_path, monkeypatch):
    import subprocess

    import tasks.versions as versions

    repo = tmp_path / "repo"
    repo.mkdir()
    for args in (["init", "-q"], ["config", "user.email", "t@example.org"], ["config", "user.name", "t"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True)
    (repo / "a.py").write_text("x = 1\n")
    subprocess.run(["git", "-C", str(repo), "add", "a.py"], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-q", "-m", "one"], check=True)
    head = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    monkeypatch.setattr(versions, "PROJECT_ROOT", repo)
    clean = versions.provenance([])
    assert (clean["git_commit"], clean["git_dirty"]) == (head, False)
    (repo / "a.py").write_text("x = 2\n")
    assert versions.provenance([])["git_dirty"] is True
    (repo / "a.py").write_text("x = 1\n")
    (repo / "untracked.txt").write_text("scratch")  # untracked files do not make the code differ
    assert versions.provenance([])["git_dirty"] is False
    monkeypatch.setattr(versions, "PROJECT_ROOT", tmp_path / "no-checkout")
    outside = versions.provenance([])
    assert (outside["git_commit"], outside["git_dirty"]) == (None, None)


def test_a_password_in_a_source_url_stays_out_of_the_version_record(tmp_path):
    data = tiny_dict(tmp_path / "run")
    data["clean"]["sources"].append({"path": "https://reader:hunter2-secret@example.org/corpus.jsonl"})
    fields = section_fields(parse_config(data), "clean")  # (the full version would list the remote source)
    assert fields["clean.sources[2].path"] == "https://reader:***@example.org/corpus.jsonl"
    assert "hunter2-secret" not in repr(fields)


def test_a_changed_rule_is_named_alone_not_as_changed_input_files(tmp_path):
    base = parse_config(tiny_dict(tmp_path / "run"))
    changed = tiny_dict(tmp_path / "run")
    changed["clean"].setdefault("rules", {}).setdefault("length", {})["min_chars"] = 60
    before, after = expected_versions(base)["clean"], expected_versions(parse_config(changed))["clean"]
    assert why_rerun(before, after) == ["clean.rules.length.min_chars: 40 -> 60"]


def test_status_warns_that_rerunning_tokenize_strands_the_checkpoints(recorded_run, tmp_path):
    from model.checkpoint import COMPLETE

    tag = tmp_path / "run" / "train" / "checkpoints" / "step_00000040"
    tag.mkdir(parents=True)
    (tag / COMPLETE).write_text(json.dumps({"step": 40, "tag": "step_00000040"}))
    assert "warning" not in {r["stage"]: r for r in status(recorded_run)}["train"]  # nothing reruns: no warning
    rows = {r["stage"]: r for r in status(with_changes(tmp_path, tokenize={"shard_max_tokens": 100_000}))}
    assert rows["train"]["warning"].startswith("WARNING: rerunning tokenize makes a new dataset version: the 1 ")
    assert "step_00000040" in rows["train"]["warning"]
