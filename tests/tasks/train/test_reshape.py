"""Resume on another number of ranks and another ZeRO stage (real DeepSpeed ranks, gloo, fp32): the data position and
every step's loss are an uninterrupted run's."""
import shutil

import pytest

from model.checkpoint import read_meta
from model.protocol import read_jsonl
from tasks.train.run import TrainingFailed, run_train

pytestmark = pytest.mark.slow

GLOBAL_BATCH = 12  # divides over 4, 3 and 2 ranks of one sample: 3, 4 and 6 accumulation steps
# each launch trains to its own train.steps: a constant learning rate keeps the schedule the straight run's


def train(cfg, root, out, ranks, stage, steps, **settings):
    t = cfg.train.changed(**{"num_gpus": ranks, "zero_stage": stage, "steps": steps, "save_every": 1,
                             "micro_batch_size": 1, "grad_accum": "auto", "global_batch_size": GLOBAL_BATCH,
                             "warmup_steps": 1, "lr": 1e-3, "min_lr": 1e-3, "keep_last": 100,
                             **settings})
    lines = []
    run_train(cfg.model, t, root / "tokenizer", root / "tokens", out, {}, lines.append)
    return lines


def steps_of(out) -> dict[int, dict]:
    return {m["step"]: m for m in read_jsonl(out / "metrics.jsonl") if "loss" in m}


# every ordered pair of ZeRO stages 1-3 once, the first resume from 4 ranks to 2
CHAIN = [(4, 1), (2, 2), (3, 3), (2, 1), (3, 3), (2, 2), (3, 1)]


@pytest.mark.timeout(1800)  # 11 launches, 4 of them of 3-4 ranks on 2 cores: about 5 min alone
def test_resume_on_any_rank_count_and_zero_stage_continues_the_uninterrupted_run(prepared_run, tmp_path):
    cfg, root = prepared_run
    assert cfg.train.compute.precision == "fp32"
    straight = tmp_path / "straight"  # uninterrupted, at the same global batch (2 ranks start faster than 4)
    train(cfg, root, straight, 2, 1, len(CHAIN))
    reference = steps_of(straight)

    chained = tmp_path / "chained"
    for step, (ranks, stage) in enumerate(CHAIN, start=1):
        lines = train(cfg, root, chained, ranks, stage, step)
        if step > 1:
            before = CHAIN[step - 2]
            assert any(f"saved with {before[0]} ranks, ZeRO-{before[1]}, this run has {ranks} ranks, ZeRO-{stage}"
                       in line for line in lines), (step, lines[-20:])
        meta = read_meta(chained / "checkpoints", f"step_{step:08d}")
        assert (meta["world_size"], meta["zero_stage"]) == (ranks, stage)
        assert meta["data_position"]["consumed_samples"] == step * GLOBAL_BATCH == meta["global_batch"] * step
    resumed = steps_of(chained)
    assert sorted(resumed) == sorted(reference)
    for step, m in reference.items():
        assert resumed[step]["position_start"] == m["position_start"], step
        assert resumed[step]["loss"] == pytest.approx(m["loss"], rel=1e-5), step  # only the sums' order differs
    reshapes = [e for e in read_jsonl(chained / "events.jsonl") if e["event"] == "reshaped"]
    assert [(e["saved"]["world_size"], e["now"]["world_size"]) for e in reshapes] == list(zip(
        [r for r, _ in CHAIN[:-1]], [r for r, _ in CHAIN[1:]]))

    # the first checkpoint (4 ranks) also resumes on 3
    branch = tmp_path / "branch"
    shutil.copytree(chained / "checkpoints" / "step_00000001", branch / "checkpoints" / "step_00000001")
    train(cfg, root, branch, 3, 1, 2)
    assert steps_of(branch)[2]["loss"] == pytest.approx(reference[2]["loss"], rel=1e-5)

    # ZeRO-0 holds the whole state on every rank: it resumes on another count without a conversion
    plain = tmp_path / "zero0"
    train(cfg, root, plain, 2, 0, 2)
    lines = train(cfg, root, plain, 3, 0, 3)
    assert not any("universal form" in line for line in lines)
    assert not (plain / "checkpoints" / "step_00000002" / "universal").exists()
    for step, m in steps_of(plain).items():
        assert m["loss"] == pytest.approx(reference[step]["loss"], rel=1e-5), step


def test_a_batch_that_does_not_divide_over_the_ranks_is_refused_before_launch(prepared_run, tmp_path):
    cfg, root = prepared_run
    with pytest.raises(TrainingFailed, match=r"global_batch_size=12 is not a multiple of micro_batch_size 1 x 5 "
                                             r"ranks = 5; set it to 10"):
        train(cfg, root, tmp_path / "t", 5, 1, 1)
