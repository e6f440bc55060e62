"""The training program under real DeepSpeed ranks (2 CPU processes, gloo): exact resume, dead ranks, broken callbacks."""
import json

import pytest
import torch

from model.checkpoint import complete_tags, latest_complete
from model.export_hf import load_checkpoint_state
from model.protocol import read_jsonl
from model.spec import Overrides
from tasks.train.run import TrainingFailed, run_train

pytestmark = pytest.mark.slow


def train(cfg, root, out, env=None, launch=Overrides(), **settings):
    t = cfg.train.changed(**settings)
    lines = []
    result = run_train(cfg.model, t, root / "tokenizer", root / "tokens", out, env or {}, lines.append, launch)
    return result, lines


def losses(out) -> dict[int, float]:
    return {m["step"]: m["loss"] for m in read_jsonl(out / "metrics.jsonl") if "loss" in m}


def test_resume_is_bit_exact_on_cpu_fp32(prepared_run, tmp_path):
    cfg, root = prepared_run
    assert cfg.train.compute.precision == "fp32"
    train(cfg, root, tmp_path / "straight", steps=6, save_every=6)
    train(cfg, root, tmp_path / "halves", steps=3, save_every=3)
    _, lines = train(cfg, root, tmp_path / "halves", steps=6, save_every=3)
    assert any("resumed from step_00000003 at step 3" in line for line in lines)
    assert losses(tmp_path / "halves") == losses(tmp_path / "straight")  # exact, every step
    a = load_checkpoint_state(tmp_path / "straight" / "checkpoints", "step_00000006")
    b = load_checkpoint_state(tmp_path / "halves" / "checkpoints", "step_00000006")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_rank_killed_while_saving_leaves_latest_on_the_previous_checkpoint(prepared_run, tmp_path):
    cfg, root = prepared_run
    out = tmp_path / "train"
    train(cfg, root, out, steps=2, save_every=2)
    with pytest.raises(TrainingFailed, match="crashed"):
        train(cfg, root, out, env={"PRETRAIN_FAULTS": "kill_during_save@1"}, steps=4, save_every=2)
    ckpt_dir = out / "checkpoints"
    assert (ckpt_dir / "step_00000004").is_dir()  # rank 0 wrote its part ...
    assert complete_tags(ckpt_dir) == ["step_00000002"] and latest_complete(ckpt_dir) == "step_00000002"
    result, lines = train(cfg, root, out, steps=4, save_every=2)  # ... and the rerun resumes before it
    assert any("resumed from step_00000002 at step 2" in line for line in lines)
    assert result["latest_checkpoint"] == "step_00000004"


def test_eval_perplexity_and_broken_callbacks_do_not_stop_training(prepared_run, tmp_path):
    cfg, root = prepared_run
    result, lines = train(cfg, root, tmp_path / "ok", steps=4, save_every=4, eval_every=2, eval_samples_per_channel=4)
    evals = [m for m in read_jsonl(tmp_path / "ok" / "metrics.jsonl") if any(k.startswith("eval_ppl_") for k in m)]
    assert [m["step"] for m in evals] == [2, 4]
    assert {"eval_ppl_zh", "eval_ppl_en", "eval_ppl_code"} <= set(evals[-1])
    assert all(1 < v < 1e5 for m in evals for k, v in m.items() if k.startswith("eval_ppl_"))

    out = tmp_path / "faulty"
    result, _ = train(cfg, root, out, env={"PRETRAIN_FAULTS": "eval@1,metrics"}, steps=4, save_every=4,
                      eval_every=2, eval_samples_per_channel=4, keep_last=1)
    assert result["exit_code"] == 0 and result["latest_step"] == 4
    events = read_jsonl(out / "events.jsonl")
    failed = [e["callback"] for e in events if e["event"] == "callback_error"]
    assert "metrics" in failed  # rank 0's own failures are reported; rank 1's eval failure skips the eval
    assert [e["step"] for e in events if e["event"] == "eval_skipped"] == [2, 4]
    assert complete_tags(out / "checkpoints") == ["step_00000004"]


def test_complete_checkpoints_are_mirrored_to_an_fsspec_url(prepared_run, tmp_path):
    cfg, root = prepared_run
    out, mirror = tmp_path / "train", tmp_path / "mirror"
    result, _ = train(cfg, root, out, steps=4, save_every=2, keep_last=1, mirror_url=f"file://{mirror}")
    assert result["exit_code"] == 0
    local = out / "checkpoints" / "step_00000004"
    assert sorted(p.name for p in mirror.iterdir()) == ["step_00000002", "step_00000004"]  # retention is local only
    for path in local.rglob("*"):
        if path.is_file():
            assert (mirror / "step_00000004" / path.relative_to(local)).read_bytes() == path.read_bytes()
    events = read_jsonl(out / "events.jsonl")
    assert [e["tag"] for e in events if e["event"] == "checkpoint_mirrored"] == ["step_00000002", "step_00000004"]
    assert complete_tags(out / "checkpoints") == ["step_00000004"]


def test_injected_nan_loss_is_an_anomaly_event_and_exit_42(prepared_run, tmp_path):
    cfg, root = prepared_run
    out = tmp_path / "train"
    per_step = cfg.train.batch.micro_batch_size * 2 * cfg.train.batch.grad_accum
    nan_at = f"{2 * per_step}-{3 * per_step}"  # the samples of step 3
    with pytest.raises(TrainingFailed, match="loss anomaly") as err:
        train(cfg, root, out, env={"PRETRAIN_NAN_POSITIONS": nan_at}, steps=6, save_every=2)
    assert err.value.exit_code == 42
    anomaly = next(e for e in read_jsonl(out / "events.jsonl") if e["event"] == "anomaly")
    assert anomaly["kind"] == "non_finite" and anomaly["step"] == 3 and anomaly["position_end"] == 3 * per_step
    assert complete_tags(out / "checkpoints") == ["step_00000002"]  # nothing saved after the anomaly


def test_skip_ranges_handed_to_a_launch_are_never_trained_on(prepared_run, tmp_path):
    cfg, root = prepared_run
    per_step = cfg.train.batch.micro_batch_size * 2 * cfg.train.batch.grad_accum
    poisoned = (2 * per_step, 3 * per_step)
    result, _ = train(cfg, root, tmp_path / "train", env={"PRETRAIN_NAN_POSITIONS": "-".join(map(str, poisoned))},
                      launch=Overrides(skip_ranges=(poisoned,)), steps=4, save_every=4)
    assert result["exit_code"] == 0  # the NaN samples were skipped
    from model.checkpoint import read_meta

    position = read_meta(tmp_path / "train" / "checkpoints", "step_00000004")["data_position"]
    assert position["skipped"] == [list(poisoned)] and position["consumed_samples"] == 5 * per_step


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of the given size, mounted for the test (root only: CI runs as root)."""
    import os
    import subprocess

    mounted = []

    def mount(megabytes: int):
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
        where = tmp_path / f"disk-{megabytes}mb"
        where.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(where)], check=True)
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_training_that_could_save_nothing_fails_and_says_so(prepared_run, small_disk):
    cfg, root = prepared_run
    out = small_disk(15) / "train"  # smaller than one checkpoint (about 22 MB)
    with pytest.raises(TrainingFailed) as err:
        train(cfg, root, out, steps=4, save_every=2)
    assert err.value.exit_code == 45
    message = str(err.value)
    assert "reached step 4 but could not save it" in message and "The last durable step is none" in message
    events = [e["event"] for e in read_jsonl(out / "events.jsonl")]
    assert events.count("checkpoint_skipped") == 2 and "done_unsaved" in events and "done" not in events


def test_a_final_save_that_did_not_fit_names_the_last_durable_step(prepared_run, small_disk):
    cfg, root = prepared_run
    out = small_disk(50) / "train"  # two checkpoints fit, the third does not
    with pytest.raises(TrainingFailed) as err:
        train(cfg, root, out, steps=6, save_every=2)
    assert err.value.exit_code == 45 and "The last durable step is step 4 (step_00000004)" in str(err.value)
    assert complete_tags(out / "checkpoints") == ["step_00000002", "step_00000004"]


STAGE = """
import sys
from pathlib import Path
from pretrain.config import load_config
from tasks.train.run import TrainingFailed, run_train
cfg, root, out = load_config(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
try:
    run_train(cfg.model, cfg.train, root / "tokenizer", root / "tokens", out, {})
except TrainingFailed as err:
    print(f"TrainingFailed {err.exit_code}: {err}")
    sys.exit(3)
"""


def start_stage(prepared_run, tmp_path):
    """The train stage in a process of its own, training 'forever' without periodic checkpoints."""
    import subprocess
    import sys
    import time

    import yaml

    from tests.conftest import ROOT, tiny_dict

    _, root = prepared_run
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(tiny_dict(root, train={"steps": 10**6, "save_every": 10**6})))
    out = tmp_path / "train"
    proc = subprocess.Popen([sys.executable, "-c", STAGE, str(config), str(root), str(out)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    while len(read_jsonl(out / "metrics.jsonl")) < 3:
        assert proc.poll() is None and time.time() < deadline, proc.stdout.read()[-3000:]
        time.sleep(0.5)
    return proc, out


def left_behind(out) -> list:
    import psutil

    spec = str(out / "spec.json")
    return [p for p in psutil.process_iter(["cmdline"]) if spec in " ".join(p.info["cmdline"] or [])]


def test_sigterm_to_the_stage_stops_the_ranks_after_they_save(prepared_run, tmp_path):
    import signal

    proc, out = start_stage(prepared_run, tmp_path)
    proc.send_signal(signal.SIGTERM)  # what cancelling the Prefect flow run sends
    proc.communicate(timeout=180)
    [stopped] = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "stopped"]
    assert stopped["reason"] == "SIGTERM" and stopped["step"] >= 3
    assert latest_complete(out / "checkpoints") == f"step_{stopped['step']:08d}"  # the work up to the stop is kept
    assert not left_behind(out)


def test_a_killed_deepspeed_launcher_leaves_no_rank_training_orphaned(prepared_run, tmp_path):
    import signal
    import time

    proc, out = start_stage(prepared_run, tmp_path)
    [launcher] = [p for p in left_behind(out) if "tasks.train.local_launcher" in p.info["cmdline"]]
    launcher.send_signal(signal.SIGKILL)  # as the OOM killer would: it cannot pass anything on; the ranks notice
    output, _ = proc.communicate(timeout=180)
    [stopped] = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "stopped"]
    assert stopped["reason"] == "launcher gone"
    assert latest_complete(out / "checkpoints") == f"step_{stopped['step']:08d}"
    time.sleep(1)
    assert not left_behind(out), output[-2000:]


def decay_settings():
    from pretrain.config import MixtureConfig

    mix = MixtureConfig(by="channel", weights={"zh": 1.0, "en": 1.0}, decay_weights={"en": 1.0, "code": 1.0})
    return dict(steps=8, save_every=3, schedule="wsd", decay_frac=0.5, warmup_steps=1, mixture=mix)


@pytest.fixture(scope="module")
def decayed_run(prepared_run, tmp_path_factory):
    """8 steps of wsd whose second half draws another mix; checkpoints at 3, 6 and 8."""
    cfg, root = prepared_run
    out = tmp_path_factory.mktemp("decayed") / "train"
    _, lines = train(cfg, root, out, **decay_settings())
    return out, lines


def test_the_decay_mix_starts_at_the_schedules_decay_and_resumes_exactly_on_both_sides(prepared_run, decayed_run,
                                                                                         tmp_path):
    cfg, root = prepared_run
    straight, lines = decayed_run
    settings = decay_settings()
    assert any("zh:" in line and "(decay 0.000)" in line and "code:" in line for line in lines)  # the planned mix
    m = {r["step"]: r for r in read_jsonl(straight / "metrics.jsonl")}
    # decay_frac 0.5 of 8 steps: the decay begins with the 5th step (index 4), the mix with it
    assert [m[s]["tokens/decay/code"] > 0 for s in range(1, 9)] == [False] * 4 + [True] * 4
    assert [m[s]["tokens/decay/zh"] for s in range(1, 9)] == [0] * 8
    assert len({m[s]["tokens/stable/zh"] for s in range(4, 9)}) == 1 and m[4]["tokens/stable/code"] == 0
    assert m[5]["lr"] == m[4]["lr"] > m[6]["lr"] > m[8]["lr"]  # the schedule's decay: from step index 4 on
    global_batch = cfg.train.batch.micro_batch_size * cfg.train.batch.grad_accum * 2
    ledger = {k: v for k, v in m[8].items() if k.startswith("tokens/")}
    assert sum(ledger.values()) == 8 * global_batch * cfg.train.batch.seq_len

    out = tmp_path / "resumed"
    with pytest.raises(TrainingFailed):
        train(cfg, root, out, env={"PRETRAIN_FAULTS": "crash_at_step_5"}, **settings)  # saved at 3: before it
    with pytest.raises(TrainingFailed):
        train(cfg, root, out, env={"PRETRAIN_FAULTS": "crash_at_step_8"}, **settings)  # from 3; saved at 6: in it
    _, lines = train(cfg, root, out, **settings)
    assert any("resumed from step_00000006 at step 6" in line for line in lines)
    assert losses(out) == losses(straight)  # exact, every step, both crossings
    last = read_jsonl(out / "metrics.jsonl")[-1]
    assert {k: last[k] for k in ledger} == ledger


def test_task_files_score_checkpoints_in_chinese_and_english(prepared_run, decayed_run, tmp_path):
    from pretrain.config import parse_config
    from tasks.eval.evaluate import evaluate
    from tests.conftest import tiny_dict

    _, root = prepared_run
    straight, _ = decayed_run
    run_root = tmp_path / "run"
    run_root.mkdir()
    (run_root / "train").symlink_to(straight)
    (run_root / "tokenizer").symlink_to(root / "tokenizer")
    tasks = {"zh-cloze": [{"context": "今天的天气", "choices": ["很好。", "电脑键盘"], "answer": 0},
                          {"context": "我们一起去", "choices": ["学校。", "的的的"], "answer": 0},
                          {"context": "北京是中国的", "answer": "首都。"}],
             "en-cloze": [{"context": "The cat sat on the", "choices": [" mat.", " of the"], "answer": 0},
                          {"context": "She opened the", "choices": [" door.", " was"], "answer": 0},
                          {"context": "Water boils at one hundred", "answer": " degrees."}]}
    files = []
    for name, items in tasks.items():
        files.append(tmp_path / f"{name}.jsonl")
        files[-1].write_text("\n".join(json.dumps(i, ensure_ascii=False) for i in items))
    data = tiny_dict(run_root)
    data["eval"] = {"task_files": [str(f) for f in files]}
    cfg = parse_config(data)
    first, last = evaluate(cfg, "step_00000003"), evaluate(cfg, "step_00000008")
    for result in (first, last):
        assert set(result["tasks"]) == {"zh-cloze", "en-cloze"}
        for scores in result["tasks"].values():
            assert scores["items"] == 3 and scores["mc_items"] == 2 and 0 < scores["bpb"] < 40
            assert scores["acc"] in (0.0, 0.5, 1.0) and scores["bpb_se"] > 0
    assert {(r["task"], r["figure"]) for r in last["task_comparison"] if r["previous"] is not None} == \
        {(t, f) for t in tasks for f in ("bpb", "acc", "acc_norm")}  # compared with step 3's scores
    assert last["tasks"]["en-cloze"]["bpb"] != first["tasks"]["en-cloze"]["bpb"]  # the weights changed between
