"""The communication-share profile: a few real training steps on 2 CPU ranks (gloo) under torch's profiler."""
import json

import pytest

from model.comm_profile import PROFILE_FILE
from model.protocol import read_jsonl
from tasks.preflight.checks import NOT_AVAILABLE
from tasks.preflight.comm import check_comm_share

pytestmark = pytest.mark.slow


def read_metrics(out):
    return [m for m in read_jsonl(out / "metrics.jsonl")] if (out / "metrics.jsonl").exists() else []


def test_comm_share_of_two_cpu_ranks(prepared_run):
    cfg, root = prepared_run
    check = check_comm_share(cfg, root)
    result = json.loads((root / "preflight" / "profile" / PROFILE_FILE).read_text())
    assert result["world_size"] == 2 and result["backend"] == "gloo" and result["steps"] == 3
    assert 0 < result["comm_share"] < 1 and len(result["per_rank_share"]) == 2
    # as many steps again without the profiler: the plan's figures leave the profiler's cost out
    assert 0 < result["optimizer_share"] < 0.5  # the marked engine.step() calls, collectives left out
    assert 0 < result["unprofiled_wall_s"] and len(read_metrics(root / "preflight" / "profile")) == 2 * 3 + 1
    # the default bucket (auto, before any measurement) splits the gradients: the first reduces during the backward
    assert result["bucket"] < result["params"] and 0 < result["comm_overlap_share"] < 1
    assert 0 <= result["async_overlap"] <= 1  # probed on the ranks: what ZeRO-3's prefetched gathers could hide
    assert check.measured == f"{round(result['comm_share'], 3):g} of step time" and check.expected.startswith("<=")
    assert not (root / "preflight" / "profile" / "checkpoints").exists()  # measured, nothing saved
    assert not (root / "preflight" / "profile-zero3").exists()  # ZeRO-3 is no candidate with zero_stage: 1


def test_comm_share_waits_for_tokens(tiny_cfg, tmp_path):
    assert check_comm_share(tiny_cfg, tmp_path).status == NOT_AVAILABLE


def test_preflight_plans_the_auto_settings_and_training_logs_measured_next_to_predicted(prepared_run, tmp_path):
    from dataclasses import asdict

    from model.protocol import read_jsonl
    from tasks.preflight.checks import check_allreduce
    from tasks.preflight.suite import planned
    from tasks.train.run import run_train

    cfg, root = prepared_run
    run_root = tmp_path / "run"
    run_root.mkdir()
    for stage in ("clean", "tokenizer", "tokens"):
        (run_root / stage).symlink_to(root / stage)
    cfg = cfg.model_copy(update={"train": cfg.train.changed(**{
        "zero_stage": "auto", "bucket_size": "auto", "grad_accum": "auto", "global_batch_size": 16,
        "micro_batch_size": 2, "comm_profile_every": 2, "steps": 4, "save_every": 4})})
    checks = [asdict(check_allreduce(cfg.preflight, None)), asdict(check_comm_share(cfg, run_root))]
    assert checks[0]["value"] > 0  # the probe's bus bandwidth, as a number the plan reads
    zero3 = json.loads((run_root / "preflight" / "profile-zero3" / PROFILE_FILE).read_text())
    assert zero3["zero_stage"] == 3 and zero3["steps"] == 3 and "ZeRO-3 steps" in checks[1]["detail"]
    lines = []
    plan = planned(cfg, run_root, checks, [], lines.append)
    assert len(plan["rows"]) == 3 * 2 and plan["choice"]["grad_accum"] == 4 and "choice: ZeRO-" in plan["table"]
    assert any(line.startswith("communication plan for 2 rank(s)") for line in lines)
    assert "a micro-step of ZeRO-3's own, counted in every ZeRO-3 layout" in plan["table"]
    (run_root / "preflight" / "report.json").write_text(json.dumps({"checks": checks}))

    run_train(cfg.model, cfg.train, run_root / "tokenizer", run_root / "tokens", run_root / "train", {}, lines.append)
    kept = json.loads((run_root / "train" / "comm_plan.json").read_text())
    assert kept["choice"] == plan["choice"] and kept["chosen"]["comm_share"] > 0
    metrics = {m["step"]: m for m in read_jsonl(run_root / "train" / "metrics.jsonl")}
    params = json.loads((run_root / "preflight" / "profile" / PROFILE_FILE).read_text())["params"]
    # a reduction issued before the backward's last node is one the plan chose: buckets that split the gradients
    # (when preflight's probe measured compute hiding inline all-reduces) or ZeRO-3's reduce-scatters
    in_backward = kept["choice"]["bucket"] < params or kept["choice"]["zero_stage"] == 3
    for step in (2, 4):  # one step in comm_profile_every is profiled
        m = metrics[step]
        assert 0 < m["comm_share"] < 1 and m["comm_s"] > 0
        assert (0 < m["comm_overlap_share"] < 1) if in_backward else m["comm_overlap_share"] == 0, kept["choice"]
        assert m["predicted_comm_share"] == kept["chosen"]["comm_share"]
        assert m["predicted_step_s"] == kept["chosen"]["step_s"]
    assert "comm_s" not in metrics[1] and "comm_s" not in metrics[3]
