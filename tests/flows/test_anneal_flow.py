"""Decay branches through the CLI as a user runs them: `pretrain anneal` on a Prefect server, twice from one
stable-phase checkpoint of a trained run, each trained in its own folder, exported, scored and registered with its
branch point, the run's own files untouched; then `pretrain average` of the two branches."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
import yaml
from safetensors.torch import load_file

from model.export_hf import hf_state_dict, load_checkpoint_state
from model.llama import ModelArgs

from model.protocol import read_jsonl
from tasks.train.run import run_train
from tests.conftest import ROOT, tiny_dict

pytestmark = pytest.mark.slow


def snapshot(folder) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))
            if p.is_file()}


def cli(command: str, config, *args) -> dict:
    proc = subprocess.run([sys.executable, "-m", "cli", command, "--config", str(config), *args],
                          capture_output=True, text=True, cwd=ROOT, env=os.environ, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = "\n" + proc.stdout
    return json.loads(out[out.rindex("\n{\n") + 1:])


def test_two_branches_from_one_checkpoint_leave_the_run_untouched(prepared_run, tmp_path, shared_prefect, monkeypatch):
    from mlflow.tracking import MlflowClient

    from pretrain.config import parse_config

    monkeypatch.setenv("PREFECT_API_URL", shared_prefect)
    _, prepared = prepared_run
    root = tmp_path / "run"
    for stage in ("clean", "tokenizer", "tokens"):
        shutil.copytree(prepared / stage, root / stage)
    data = tiny_dict(root, train={"steps": 6, "save_every": 3, "schedule": "wsd", "decay_frac": 0.5,
                                  "warmup_steps": 1, "mixture": {"by": "channel", "weights": {"zh": 1, "en": 1}},
                                  "eval_samples_per_channel": 4},
                     eval={"task_files": [str(ROOT / "demo" / "tasks" / f) for f in ("zh-cloze.jsonl", "en-cloze.jsonl")]})
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data, allow_unicode=True))
    cfg = parse_config(data)
    run_train(cfg.model, cfg.train, root / "tokenizer", root / "tokens", root / "train", {}, lambda _: None)
    before = snapshot(root / "train")
    main_lr = {m["step"]: m["lr"] for m in read_jsonl(root / "train" / "metrics.jsonl")}

    code = cli("anneal", config, "--from", "step_00000003", "--tokens", "2048", "--mix", "en=1,code=1", "--name", "code")
    plain = cli("anneal", config, "--from", "step_00000003", "--tokens", "3000", "--name", "plain")
    assert snapshot(root / "train") == before  # the run's checkpoints, metrics and exports: not a byte touched

    for result, steps in ((code, 2), (plain, 3)):  # 1,024 tokens a step: 2048 -> 2 steps, 3000 -> 3
        branch = root / "anneal" / result["name"]
        assert result["source"]["step"] == 3 and result["final_step"] == 3 + steps
        lines = {m["step"]: m for m in read_jsonl(branch / "metrics.jsonl")}
        assert sorted(lines) == list(range(4, 4 + steps))
        assert lines[4]["lr"] == pytest.approx(main_lr[3]) and lines[3 + steps]["lr"] < lines[4]["lr"]
        assert (branch / "hf" / f"step_{3 + steps:08d}" / "model.safetensors").is_file()
        assert set(result["eval"]["ppl"]) >= {"zh", "en"}
        assert {t: r["items"] for t, r in result["eval"]["tasks"].items()} == {"zh-cloze": 11, "en-cloze": 11}
    assert lines[4]["tokens/all/code"] == 0 and "tokens/decay/en" not in lines[4]  # plain: the run's own mix
    code_lines = {m["step"]: m for m in read_jsonl(root / "anneal" / "code" / "metrics.jsonl")}
    assert code_lines[4]["tokens/decay/code"] > 0 and code_lines[5]["tokens/decay/zh"] == 0  # the mix from step 1

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    for result in (code, plain):
        version = client.get_model_version_by_alias(cfg.name, f"anneal-{result['name']}")
        assert version.version == result["model_version"]
        assert version.tags["branch_point"] == str(root / "train" / "checkpoints" / "step_00000003")
        assert version.tags["branch_step"] == "3"
        branch_run = client.get_run(version.run_id)  # the eval flow's metric names: compared side by side
        assert {"ckpt_eval_ppl_zh", "ckpt_task/en-cloze/bpb"} <= set(branch_run.data.metrics)

    # the two branches averaged: the mean of their weights, scored and registered like them
    ends = [root / "anneal" / "code" / "checkpoints" / "step_00000005",
            root / "anneal" / "plain" / "checkpoints" / "step_00000006"]
    averaged = cli("average", config, "--checkpoint", str(ends[0]), "--checkpoint", str(ends[1]), "--name", "both",
                   "--dtype", "fp32")
    out = root / "train" / "hf" / "average-both"
    assert averaged["export_dir"] == str(out) and [i["step"] for i in averaged["inputs"]] == [5, 6]
    states = [load_checkpoint_state(p.parent, p.name) for p in ends]
    model_args = ModelArgs(**json.loads((root / "train" / "spec.json").read_text())["model"])
    expected = hf_state_dict({k: (states[0][k].double() + states[1][k].double()) / 2 for k in states[0]}, model_args,
                             torch.float32)
    got = load_file(str(out / "model.safetensors"))
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        torch.testing.assert_close(got[name], tensor, rtol=0, atol=1e-7)
    assert set(averaged["eval"]["ppl"]) >= {"zh", "en"}
    version = client.get_model_version_by_alias(cfg.name, "average-both")
    assert version.tags["average_steps"] == "5, 6" and str(ends[0]) in version.tags["average_of"]
    assert "ckpt_eval_ppl_en" in client.get_run(version.run_id).data.metrics
