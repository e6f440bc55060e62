"""The communication plan: `auto` settled from preflight's measurements, or from rules without them."""
import json

import pytest
from pydantic import ValidationError

from cli.main import main as cli
from pretrain.config import TrainConfig
from tasks.train.comm_plan import (CommPlan, grad_accum_for, make_plan, measured, measured_from, plan_tags, render,
                                   settled)
from tasks.train.comm_model import Cluster, Layout, ModelSize, predict
from tasks.train.spec import deepspeed_config
from tests.conftest import set_train

PROFILE = {"wall_s": 2.0, "steps": 2, "comm_share": 0.25, "world_size": 2, "backend": "gloo",
           "samples_per_rank_step": 4}
CHECKS = [{"name": "allreduce_probe", "value": 0.5}, {"name": "nccl_tests_all_reduce", "value": 20.0},
          {"name": "free_disk_run_root", "value": 300.0}]


def auto(cfg, **more):
    return cfg.train.changed(**{"zero_stage": "auto", "bucket_size": "auto", "grad_accum": "auto",
                                "global_batch_size": 16, "micro_batch_size": 2, **more})


def test_measurements_come_from_nccl_tests_first_and_the_profiled_steps(tmp_path):
    found = measured_from(CHECKS, PROFILE)
    assert (found.busbw_gbps, found.busbw_source) == (20.0, "nccl_tests_all_reduce")
    assert found.compute_s_per_sample == pytest.approx(1.0 * 0.75 / 4)  # a step's wall less its communication
    assert measured_from(CHECKS[:1], PROFILE).busbw_source == "allreduce_probe"
    assert measured_from(CHECKS[2:], PROFILE) is None  # no bandwidth measured: no plan from measurements
    assert measured_from(CHECKS, {**PROFILE, "samples_per_rank_step": 0}) is None  # a profile of an older version
    assert measured(tmp_path) is None


def test_without_nccl_tests_the_profiled_steps_measure_the_link():
    # ZeRO-1 on 2 ranks: 3 passes of 1e6 fp32 parameters (all-reduce, all-gather), half of each over the link, in
    # 0.25 s less 2 latencies
    profile = {**PROFILE, "params": 1_000_000, "zero_stage": 1, "grad_accum": 1, "bytes_per_param": 4,
               "bucket": 500_000_000}
    found = measured_from(CHECKS[:1], profile)
    assert found.busbw_source == "preflight's profiled steps on 2 ranks"
    assert found.busbw_gbps == pytest.approx(3 * 4e6 / 2 / (0.25 - 2 * 300e-6) / 1e9, rel=1e-3)
    assert measured_from(CHECKS, profile).busbw_source == "nccl_tests_all_reduce"  # measured across nodes: first


def test_accumulation_keeps_the_global_batch_on_any_rank_count(tiny_cfg):
    t = auto(tiny_cfg, global_batch_size=24)
    assert [grad_accum_for(t, n) for n in (1, 2, 3, 4, 6)] == [12, 6, 4, 3, 2]
    with pytest.raises(ValueError, match=r"not a multiple of micro_batch_size 2 x 5 ranks = 10; set it to 20"):
        grad_accum_for(t, 5)
    assert grad_accum_for(tiny_cfg.train, 5) == tiny_cfg.train.batch.grad_accum


def test_auto_needs_a_global_batch_and_a_global_batch_needs_auto(tiny_cfg):
    data = tiny_cfg.train.model_dump()
    with pytest.raises(ValidationError, match="grad_accum: auto needs train.batch.global_batch_size"):
        TrainConfig(**{**data, "batch": {**data["batch"], "grad_accum": "auto"}})
    with pytest.raises(ValidationError, match="set train.batch.grad_accum: auto to derive it"):
        TrainConfig(**{**data, "batch": {**data["batch"], "global_batch_size": 64}})
    with pytest.raises(ValidationError, match="not a multiple of train.batch.micro_batch_size=4"):
        TrainConfig(**{**data, "batch": {**data["batch"], "grad_accum": "auto", "global_batch_size": 66}})


def test_without_measurements_the_rules_settle_every_auto(tiny_cfg):
    plan = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2, None)
    assert plan.rows == [] and plan.chosen is None and "no preflight measurement" in plan.notes[0]
    assert plan.choice == {"zero_stage": 1, "micro_batch": 2, "grad_accum": 4, "bucket": 1_000_000}
    t = settled(auto(tiny_cfg), plan)
    assert (t.cluster.zero_stage, t.batch.grad_accum, t.batch.global_batch_size, t.cluster.bucket_size) == (1, 4, None, 1_000_000)
    assert deepspeed_config(t)["gradient_accumulation_steps"] == 4
    assert plan_tags(json.loads(plan.to_json()))["comm_plan.predicted"] == "none (no preflight measurement)"


def test_with_measurements_every_candidate_is_predicted_and_the_fastest_chosen(tiny_cfg):
    plan = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2, measured_from(CHECKS, PROFILE))
    assert sorted({r["zero_stage"] for r in plan.rows}) == [1, 2, 3] and len(plan.rows) == 3 * 2
    assert plan.chosen["step_s"] == min(r["step_s"] for r in plan.rows if r["fits"])
    assert plan.choice["zero_stage"] == plan.chosen["zero_stage"] and not plan.comm_bound
    table = render(plan)
    assert table.count("\n* ") == 1 and "choice: ZeRO-" in table and "bandwidth 20 GB/s from nccl_tests_all_reduce" in table
    fixed = make_plan(tiny_cfg.model, auto(tiny_cfg, zero_stage=2, bucket_size=123456), 2176, 2,
                      measured_from(CHECKS, PROFILE))
    assert [(r["zero_stage"], r["bucket"]) for r in fixed.rows] == [(2, 123456)]  # only what is auto is searched
    assert "asynchronous all-gather" not in table  # a profile without the probe (one rank, an older version)


def test_the_probed_overlaps_of_asynchronous_gathers_and_bucketed_reductions_reach_the_plan(tiny_cfg):
    found = measured_from(CHECKS[:1], {**PROFILE, "async_overlap": 0.46, "reduce_overlap": 0.3})
    assert (found.async_overlap, found.reduce_overlap) == (0.46, 0.3)
    plan = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2, found)
    assert "hid 46% of an asynchronous all-gather" in render(plan) and plan.measured["async_overlap"] == 0.46
    assert "hid 30% of inline all-reduces in buckets" in render(plan) and plan.measured["reduce_overlap"] == 0.3


def test_preflights_zero3_steps_give_zero3_its_own_cost_beyond_its_traffic(tiny_cfg, tmp_path):
    zero3_profile = {**PROFILE, "zero_stage": 3, "grad_accum": 4, "bucket": 500_000_000, "wall_s": 60.0}
    found = measured_from(CHECKS[:1], PROFILE, zero3_profile)
    assert found.zero3 == {"step_s": 30.0, "ranks": 2, "grad_accum": 4, "bucket": 500_000_000}
    without = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2, measured_from(CHECKS[:1], PROFILE))
    plan = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2, found)
    before = {(r["zero_stage"], r["bucket"]): r["step_s"] for r in without.rows}
    profiled_cell = before[(3, 500_000_000)]  # the layout preflight's ZeRO-3 steps ran (the tiny model in 1 bucket)
    for r in plan.rows:  # what those steps took beyond the prediction, on every ZeRO-3 layout and no other
        extra = r["step_s"] - before[(r["zero_stage"], r["bucket"])]
        assert extra == pytest.approx(30.0 - profiled_cell if r["zero_stage"] == 3 else 0.0)
    assert plan.choice["zero_stage"] != 3 and "ms a micro-step of ZeRO-3's own" in render(plan)
    quick = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 2,
                      measured_from(CHECKS[:1], PROFILE, {**zero3_profile, "wall_s": 1e-3}))
    assert quick.rows == without.rows  # faster than predicted: no negative cost
    (tmp_path / "profile").mkdir()
    (tmp_path / "profile-zero3").mkdir()
    (tmp_path / "report.json").write_text(json.dumps({"checks": CHECKS[:1]}))
    (tmp_path / "profile" / "comm_profile.json").write_text(json.dumps(PROFILE))
    (tmp_path / "profile-zero3" / "comm_profile.json").write_text(json.dumps(zero3_profile))
    assert measured(tmp_path).zero3["step_s"] == 30.0  # where preflight leaves them


def test_a_slow_link_is_called_comm_bound(tiny_cfg):
    slow = measured_from([{"name": "allreduce_probe", "value": 1e-5}], PROFILE)
    plan = make_plan(tiny_cfg.model, auto(tiny_cfg), 2176, 8, slow)
    assert plan.comm_bound and "more nodes will not make this faster" in render(plan)
    assert json.loads(plan.to_json())["comm_bound"] is True


def test_pretrain_plan_cluster_prints_the_table(tiny_cfg, tmp_path, capsys):
    data = tiny_cfg.model_dump(mode="json", exclude_none=True)
    set_train(data, zero_stage="auto", grad_accum="auto", global_batch_size=16)
    config = tmp_path / "c.json"
    config.write_text(json.dumps(data))
    assert cli(["plan", "--cluster", str(config), "--busbw-gbps", "2", "--sample-ms", "50"]) == 0
    out = capsys.readouterr().out
    assert "communication plan for 2 rank(s)" in out and "choice: ZeRO-" in out and "from --sample-ms" in out
    assert cli(["plan", "--cluster", str(config), "--busbw-gbps", "2"]) == 2  # no preflight to complete it
    assert "pass both --busbw-gbps and --sample-ms" in capsys.readouterr().out
    assert cli(["plan", "--cluster", str(config), "--json"]) == 0
    assert CommPlan(**{k: v for k, v in json.loads(capsys.readouterr().out).items() if k != "comm_bound"}).choice


def test_the_profilers_own_cost_is_left_out_of_compute_and_bandwidth():
    # the profiled steps took 1.0 s each, the same steps without the profiler 0.8 s: compute and communication both
    # shrink to the step as training runs it, so the link measures faster and a sample computes faster
    profile = {**PROFILE, "params": 1_000_000, "zero_stage": 1, "grad_accum": 1, "bytes_per_param": 4,
               "bucket": 500_000_000}
    plain, timed = measured_from(CHECKS[:1], profile), measured_from(CHECKS[:1], {**profile, "unprofiled_wall_s": 1.6})
    assert timed.compute_s_per_sample == pytest.approx(plain.compute_s_per_sample * 0.8)
    assert timed.busbw_gbps > plain.busbw_gbps * 1.25  # less time for the same bytes (latencies aside)
    zero3 = {**profile, "zero_stage": 3, "wall_s": 6.0, "unprofiled_wall_s": 5.0}
    assert measured_from(CHECKS[:1], profile, zero3).zero3["step_s"] == pytest.approx(2.5)


def test_the_optimizer_is_paid_once_a_step_not_with_every_sample():
    # a fifth of the profiled step was the optimizer's update: it leaves the per-sample compute, and an accumulating
    # layout pays it once (counted per sample, it made G=4 on the 2 Gbit/s bed about 20% slower than measured)
    profile = {**PROFILE, "params": 1_000_000, "zero_stage": 1, "grad_accum": 1, "bytes_per_param": 4,
               "bucket": 500_000_000}
    plain, split = measured_from(CHECKS[:1], profile), measured_from(CHECKS[:1], {**profile, "optimizer_share": 0.2})
    step_s = profile["wall_s"] / profile["steps"]
    assert split.optimizer_s == pytest.approx(0.2 * step_s)
    samples = profile["samples_per_rank_step"]
    assert split.compute_s_per_sample == pytest.approx(plain.compute_s_per_sample - 0.2 * step_s / samples)
    size = ModelSize(1_000_000, 0, 0, 0, 4)
    g4 = Layout(1, samples, 4, 500_000_000)
    as_measured = predict(size, g4, Cluster(2, 1.0, 0.0, split.compute_s_per_sample, optimizer_s=split.optimizer_s))
    per_sample = predict(size, g4, Cluster(2, 1.0, 0.0, plain.compute_s_per_sample))
    assert per_sample.compute_s - as_measured.compute_s == pytest.approx(3 * 0.2 * step_s)
