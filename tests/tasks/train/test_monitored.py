"""Monitored training under injected faults (CPU, gloo, 2 ranks): the product's proof."""
import pytest

from model.checkpoint import complete_tags, read_meta
from model.protocol import read_jsonl
from pretrain.config import RecoveryConfig
from tasks.train.monitored import RecoveryFailed, run_monitored
from tasks.train.recovery import decisions

pytestmark = pytest.mark.slow


def monitored(cfg, root, out, env=None, recovery=None, **overrides):
    t = cfg.train.changed(**{"recovery": recovery or RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1),
                             **overrides})
    lines = []
    import os

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return run_monitored(cfg.model, t, root / "tokenizer", root / "tokens", out, {}, log_line=lines.append), lines
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def per_step(cfg) -> int:
    return cfg.train.batch.micro_batch_size * 2 * cfg.train.batch.grad_accum


def test_nan_loss_rolls_back_skips_the_range_and_finishes(prepared_run, tmp_path):
    cfg, root = prepared_run
    n, out = per_step(cfg), tmp_path / "train"
    result, lines = monitored(cfg, root, out, {"PRETRAIN_NAN_POSITIONS": f"{4 * n}-{5 * n}"}, steps=8, save_every=2)
    assert result["exit_code"] == 0 and result["latest_step"] == 8 and result["attempts"] == 2
    [rollback] = decisions(out)
    assert rollback["action"] == "rollback" and rollback["checkpoint"] == "step_00000004"
    assert rollback["anomaly"]["kind"] == "non_finite" and rollback["anomaly"]["step"] == 5
    assert rollback["skip"] == [4 * n, 6 * n]  # from the checkpoint's position past the anomaly plus a step
    assert read_meta(out / "checkpoints", "step_00000008")["data_position"]["skipped"] == [[4 * n, 6 * n]]
    timing = result["recoveries"][0]
    assert timing["steps_lost"] == 1 and timing["detect_to_first_step_s"] < 60


def test_repeated_spikes_in_one_region_escalate_then_fail_with_a_report(prepared_run, tmp_path):
    cfg, root = prepared_run
    n, out = per_step(cfg), tmp_path / "train"
    recovery = RecoveryConfig(rollback_gap_steps=1, skip_margin_steps=1, widen_factor=2, lr_factor=0.5, max_rollbacks=3)
    with pytest.raises(RecoveryFailed, match="3 rollbacks already"):
        monitored(cfg, root, out, {"PRETRAIN_NAN_POSITIONS": f"{4 * n}-{10**6}"}, recovery, steps=12, save_every=2)
    made = decisions(out)
    assert [d["action"] for d in made] == ["rollback", "rollback", "rollback", "fail"]
    assert [d["escalation"] for d in made[:3]] == [0, 1, 2]
    assert [d["lr_scale"] for d in made[:3]] == [1.0, 1.0, 0.5]
    widths = [d["skip"][1] - d["skip"][0] for d in made[:3]]
    assert widths[0] < widths[1] < widths[2]  # the skip widens each time


def test_killed_rank_resumes_without_skipping_and_keeps_the_data_order(prepared_run, tmp_path):
    cfg, root = prepared_run
    straight, _ = monitored(cfg, root, tmp_path / "straight", steps=6, save_every=2)
    env = {"PRETRAIN_FAULTS": "kill_during_save@1", "PRETRAIN_FAULTS_ONCE_FILE": str(tmp_path / "fired")}
    result, _ = monitored(cfg, root, tmp_path / "killed", env, steps=6, save_every=2)
    [resume] = decisions(tmp_path / "killed")
    assert resume["action"] == "resume" and resume["skip"] is None and resume["checkpoint"] is None  # died at step 2's save
    assert result["latest_step"] == 6 and complete_tags(tmp_path / "killed" / "checkpoints")[-1] == "step_00000006"

    def losses(out):
        return {m["step"]: m["loss"] for m in read_jsonl(out / "metrics.jsonl")}

    assert losses(tmp_path / "killed") == losses(tmp_path / "straight")  # same data, same order, same losses


def poison(tokens_dir, cfg, positions: range, seed: int = 0) -> set[int]:
    """Overwrite the samples at these sampler positions with random tokens, in the shard files themselves."""
    import numpy as np
    import pyarrow as pa

    from model.data import training_dataset, training_sampler
    from tasks.train.spec import data_spec

    data = data_spec(cfg.train, tokens_dir)
    dataset = training_dataset(tokens_dir, data)
    sampler = training_sampler(dataset, data)
    vocab = dataset.manifest["vocab_size"]
    rng = np.random.default_rng(seed)
    by_shard: dict[int, list[tuple[int, int]]] = {}
    samples = {sampler.sample_at(p) for p in positions}
    for sample in samples:
        for shard, a, b in dataset._span(sample):
            by_shard.setdefault(shard, []).append((a, b - 1))  # keep the EOS at a sample's end
    for shard, spans in by_shard.items():
        path = tokens_dir / dataset.entries[shard]["file"]
        with pa.memory_map(str(path)) as source:
            reader = pa.ipc.open_file(source)
            batch, schema = reader.get_batch(0), reader.schema
            col = batch.column("tokens")  # copied out before the file is rewritten under the memory map
            offsets = col.offsets.to_numpy().copy()
            base = offsets[0]
            values = col.values.to_numpy()[base:offsets[-1]].copy()
            channel, src = batch.column("channel").to_numpy().copy(), batch.column("source").to_numpy().copy()
            value_type = col.type.value_type
        for a, b in spans:
            values[a:b] = rng.integers(0, vocab, b - a, dtype=values.dtype)
        tokens = pa.ListArray.from_arrays(pa.array(offsets - base), pa.array(values, type=value_type))
        rebuilt = pa.record_batch([tokens, pa.array(channel), pa.array(src)], schema=schema)
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
            writer.write_batch(rebuilt)
    return samples


def test_poisoned_samples_spike_the_loss_and_the_run_recovers_to_a_clean_runs_loss(prepared_run, tmp_path):
    import shutil

    cfg, root = prepared_run
    cfg = cfg.model_copy(update={"train": cfg.train.changed(**{"seq_len": 32})})
    n = per_step(cfg)
    for name in ("tokenizer", "tokens"):
        shutil.copytree(root / name, tmp_path / "poisoned" / name)
    (tmp_path / "poisoned" / "tokens" / "_SUCCESS").touch()
    poisoned_positions = range(30 * n, 32 * n)  # the samples of steps 31 and 32, within the first epoch
    poison(tmp_path / "poisoned" / "tokens", cfg, poisoned_positions)
    settings = {"steps": 45, "save_every": 5, "anomaly": cfg.train.anomaly.model_copy(update={"window": 10, "warmup": 10})}
    recovery = RecoveryConfig(rollback_gap_steps=2, skip_margin_steps=2)
    clean, _ = monitored(cfg, root, tmp_path / "clean", recovery=recovery, **settings)
    result, _ = monitored(cfg, tmp_path / "poisoned", tmp_path / "recovered", recovery=recovery, **settings)
    assert clean["attempts"] == 1 and result["attempts"] == 2 and result["latest_step"] == 45
    [rollback] = decisions(tmp_path / "recovered")
    assert rollback["anomaly"]["kind"] == "loss_spike" and rollback["anomaly"]["step"] == 31
    a, b = rollback["skip"]
    assert a <= poisoned_positions.start and b >= poisoned_positions.stop  # the skip covers the poison
    final = {name: read_jsonl(tmp_path / name / "metrics.jsonl")[-1]["loss"] for name in ("clean", "recovered")}
    assert final["recovered"] == pytest.approx(final["clean"], rel=0.1)


def test_a_hung_rank_is_caught_relaunched_and_a_slow_one_named(prepared_run, tmp_path):
    """Rank 1 reads slowly at every step and blocks forever before step 4 (once): the hang is caught within its
    timeout, its stack saved, the job relaunched from step 2's checkpoint in the same data order; the slow rank
    is named."""
    cfg, root = prepared_run
    n, out = per_step(cfg), tmp_path / "train"
    env = {"PRETRAIN_FAULTS": "hang_at_step_4@1,slow_rank@1", "PRETRAIN_SLOW_S": "0.4",
           "PRETRAIN_FAULTS_ONCE_FILE": str(tmp_path / "fired")}
    result, lines = monitored(cfg, root, out, env, steps=6, save_every=2, hang_timeout_s=6.0, straggler_reports=2)
    assert result["exit_code"] == 0 and result["latest_step"] == 6 and result["attempts"] == 2
    [resume] = decisions(out)
    assert resume["action"] == "resume" and resume["checkpoint"] == "step_00000002"
    assert resume["hang"]["hung_ranks"] == [1] and "fault_point" in resume["hang"]["where"]["1"]
    assert "run_steps" in resume["hang"]["stacks"]["1"]
    [hang_dir] = [p for p in (out / "hangs").iterdir() if p.is_dir()]
    assert {"rank0.txt", "rank1.txt", "report.json"} <= {p.name for p in hang_dir.iterdir()}
    assert any("stack of hung rank 1" in line for line in lines)
    events = read_jsonl(out / "events.jsonl")
    hang = next(e for e in events if e["event"] == "hang")
    start = [e for e in events if e["event"] == "start"]
    step3 = next(m for m in read_jsonl(out / "metrics.jsonl") if m["step"] == 3)  # the last step before the hang
    assert hang["time"] - step3["time"] < 6.0 + 15  # the timeout, a heartbeat, the grace for the others' stacks
    assert start[1]["time"] - hang["time"] < 60  # relaunched at once
    stragglers = [e for e in events if e["event"] == "straggler"]
    assert stragglers and {e["rank"] for e in stragglers} == {1}
    metrics = read_jsonl(out / "metrics.jsonl")
    assert all(m["own_s_slowest_rank"] == 1 and len(m["rank_own_s"]) == 2 for m in metrics)
    last = {m["step"]: m for m in metrics}  # the relaunch retrains steps 3.. from the same positions
    assert [last[s]["position_start"] for s in range(1, 7)] == [k * n for k in range(6)]


@pytest.mark.parametrize("damage", ["cut_optimizer_shard", "deepspeed_step_edited"])
def test_a_checkpoint_that_does_not_load_is_marked_and_the_run_resumes_from_the_one_before(prepared_run, tmp_path,
                                                                                         damage):
    """A cut optimizer shard (a full disk or a killed copy), or a model file whose DeepSpeed step is not its tag's,
    fails the first launch once (exit 47), is marked UNUSABLE with the reason, and the relaunch resumes from the
    checkpoint before it: not the same failure retried."""
    import torch

    from model.checkpoint import UNUSABLE

    cfg, root = prepared_run
    out = tmp_path / "train"
    monitored(cfg, root, out, steps=4, save_every=2)
    bad = out / "checkpoints" / "step_00000004"
    if damage == "cut_optimizer_shard":
        shard = next(bad.glob("*rank_1*optim_states.pt"))
        shard.write_bytes(shard.read_bytes()[: shard.stat().st_size // 2])
    else:
        states = bad / "mp_rank_00_model_states.pt"
        saved = torch.load(states, weights_only=False)
        torch.save({**saved, "global_steps": 3}, states)
    result, lines = monitored(cfg, root, out, steps=6, save_every=2)
    assert result["latest_step"] == 6 and result["attempts"] == 2
    [resume] = decisions(out)
    assert resume["action"] == "resume" and resume["checkpoint"] == "step_00000002"
    reason = (bad / UNUSABLE).read_text()
    assert ("rank 1" in reason and "Error" in reason) if damage == "cut_optimizer_shard" else "own step is 3" in reason
    assert any("resumed from step_00000002 at step 2" in line for line in lines)
    assert "step_00000004" not in complete_tags(out / "checkpoints")
