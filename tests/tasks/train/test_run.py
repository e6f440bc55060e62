"""The train stage with real DeepSpeed ranks (2 CPU processes, gloo, ZeRO-1)."""
import base64
import json
import os
import shutil
import sys
from collections import Counter

import pytest
import torch

from model.data import read_manifest
from model.checkpoint_eval import evaluate_checkpoint
from model.export_hf import load_checkpoint_state
from model.llama import ModelArgs, Transformer
from model.checkpoint import complete_tags, read_meta
from model.protocol import read_jsonl
from pretrain.config import LmEvalConfig, MixtureConfig
from tasks.train.export import export_run_checkpoint
from tasks.eval.lm_eval_tasks import run_lm_eval
from tasks.tokenizer.train import load_tokenizer
from tasks.common.ports import free_port
from tasks.train.run import TrainingFailed, launcher_command, run_train
from tasks.train.spec import deepspeed_config

pytestmark = pytest.mark.slow


def train(cfg, root, out, **train_overrides):
    t = cfg.train.changed(**train_overrides)
    lines = []
    result = run_train(cfg.model, t, root / "tokenizer", root / "tokens", out, {}, log_line=lines.append)
    return result, lines


def test_trains_checkpoints_and_resumes(prepared_run, tmp_path):
    cfg, root = prepared_run
    out = tmp_path / "train"
    result, lines = train(cfg, root, out, steps=6, save_every=3)
    assert result["latest_step"] == 6 and result["exit_code"] == 0
    assert any("step 6/6" in line for line in lines)  # rank logs are streamed
    metrics = read_jsonl(out / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3, 4, 5, 6]
    assert all(m["loss"] > 0 and m["tokens_per_s"] > 0 and "grad_norm" in m for m in metrics)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    ckpt_dir = out / "checkpoints"
    assert complete_tags(ckpt_dir) == ["step_00000003", "step_00000006"]
    global_batch = cfg.train.batch.micro_batch_size * 2
    assert read_meta(ckpt_dir, "step_00000006")["data_position"]["consumed_samples"] == 6 * global_batch

    # a partial newer checkpoint must be ignored: resume from the newest complete one
    shutil.copytree(ckpt_dir / "step_00000006", ckpt_dir / "step_00000099")
    (ckpt_dir / "step_00000099" / "COMPLETE").unlink()
    (ckpt_dir / "latest").write_text("step_00000099")
    result, lines = train(cfg, root, out, steps=8, save_every=100)
    assert any("resumed from step_00000006 at step 6" in line for line in lines)
    starts = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "start"]
    assert [e["step"] for e in starts] == [0, 6]
    assert read_meta(ckpt_dir, "step_00000008")["data_position"]["consumed_samples"] == 8 * global_batch

    # the final ZeRO-1 checkpoint exports to the HF format and gives the trained model's logits
    transformers = pytest.importorskip("transformers")
    exported = export_run_checkpoint(out, root / "tokenizer", tmp_path / "hf", dtype="fp32")
    assert exported["tag"] == "step_00000008"
    args = ModelArgs(**json.loads((out / "spec.json").read_text())["model"])
    ours = Transformer(args).eval()
    ours.load_state_dict(load_checkpoint_state(ckpt_dir, "step_00000008"))
    hf = transformers.LlamaForCausalLM.from_pretrained(tmp_path / "hf", torch_dtype=torch.float32).eval()
    tokens = torch.randint(0, 200, (1, 32))
    with torch.no_grad():
        torch.testing.assert_close(hf(tokens).logits, ours(tokens), rtol=1e-4, atol=1e-5)

    # lm-evaluation-harness scores the export offline on a local multiple-choice task as our own model ranks the choices
    pytest.importorskip("lm_eval")
    examples = local_mc_task(tmp_path / "tasks")
    metrics = run_lm_eval(tmp_path / "hf", LmEvalConfig(tasks=["local_mc"], include_path=str(tmp_path / "tasks")), "cpu")
    tok = load_tokenizer(root / "tokenizer")
    expected = sum(best_choice(ours, tok, e["context"], e["choices"]) == e["answer"] for e in examples) / len(examples)
    assert metrics["local_mc/acc"] == pytest.approx(expected)


def local_mc_task(folder):
    folder.mkdir()
    examples = [{"context": "The capital of France is", "choices": ["Paris", "banana", "def f(): pass"], "answer": 0},
                {"context": "预训练的模型", "choices": ["很好", "Paris", "12345"], "answer": 0},
                {"context": "for i in range(10):", "choices": ["print(i)", "北京", "the"], "answer": 0},
                {"context": "One, two,", "choices": ["three", "四", "return"], "answer": 0}]
    (folder / "mc.jsonl").write_text("".join(json.dumps(e, ensure_ascii=False) + "\n" for e in examples))
    (folder / "local_mc.yaml").write_text(
        "task: local_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: " + str(folder / "mc.jsonl")
        + "\ntest_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{context}}'\ndoc_to_choice: '{{choices}}'"
        "\ndoc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n")
    return examples


def best_choice(model, tok, context: str, choices: list[str]) -> int:
    """The choice with the highest summed log-probability after the context (lm-eval's ' ' target delimiter)."""
    scores = []
    for choice in choices:
        ctx = tok.encode(context, add_special_tokens=False).ids
        whole = tok.encode(context + " " + choice, add_special_tokens=False).ids
        ids = torch.tensor([whole])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids[:, :-1]).float(), -1)[0]
        scores.append(sum(logp[i - 1, whole[i]].item() for i in range(len(ctx), len(whole))))
    return max(range(len(choices)), key=scores.__getitem__)


def test_crash_is_reported_with_log_and_checkpoint(prepared_run, tmp_path):
    cfg, root = prepared_run
    (tmp_path / "train").mkdir()
    # break the data after the spec is written: every rank fails at start-up
    bad_tokens = tmp_path / "tokens"
    shutil.copytree(root / "tokens", bad_tokens)
    first = read_manifest(bad_tokens)["shards"][0]["file"]
    (bad_tokens / first).write_bytes(b"not arrow")
    with pytest.raises(TrainingFailed, match=r"bad settings or data .*\(exit code 44\); see .*launcher.log[\s\S]*"
                       rf"error: token shard .*{first} cannot be read"):
        run_train(cfg.model, cfg.train, root / "tokenizer", bad_tokens, tmp_path / "train", {}, log_line=lambda _: None)


def test_deepspeed_config_and_command(tiny_cfg, tmp_path):
    with pytest.raises(ValueError, match="still hold `auto`"):
        deepspeed_config(tiny_cfg.train)  # the bucket size is auto until the communication plan settles it
    ds = deepspeed_config(tiny_cfg.train.changed(**{"bucket_size": 2_000_000}))
    assert ds["zero_optimization"] == {"stage": 1, "reduce_bucket_size": 2_000_000, "allgather_bucket_size": 2_000_000,
                                       "overlap_comm": True}  # gloo hides nothing, but reduces in hooks as GPUs
    off = deepspeed_config(tiny_cfg.train.changed(**{"bucket_size": 2_000_000, "overlap_comm": False}))
    assert off["zero_optimization"]["overlap_comm"] is False
    assert ds["bf16"]["enabled"] is False
    assert ds["train_micro_batch_size_per_gpu"] == tiny_cfg.train.batch.micro_batch_size
    cmd = launcher_command(tiny_cfg.train, tmp_path / "spec.json", port=29555)
    assert cmd[-4:] == ["--module", "model.train", "--spec", str(tmp_path / "spec.json")]
    # one node: DeepSpeed's per-node launcher directly, with the world `deepspeed --num_gpus 2` gives it
    assert cmd[:4] == [sys.executable, "-u", "-m", "tasks.train.local_launcher"]
    [world] = [a for a in cmd if a.startswith("--world_info=")]
    assert json.loads(base64.urlsafe_b64decode(world.split("=", 1)[1])) == {"localhost": [0, 1]}
    assert "--master_port=29555" in cmd and "--master_addr=127.0.0.1" in cmd
    multi = launcher_command(tiny_cfg.train.changed(**{"ssh_launcher": "slurm"}), tmp_path / "s.json",
                             tmp_path / "hosts")
    assert "--hostfile" in multi and "--num_gpus" not in multi
    assert multi[multi.index("--launcher") + 1] == "slurm"


def test_resume_refuses_a_checkpoint_of_another_model(prepared_run, tmp_path):
    cfg, root = prepared_run
    out = tmp_path / "train"
    train(cfg, root, out, steps=2, save_every=2)
    wider = cfg.model.model_copy(update={"ffn_hidden": cfg.model.ffn_hidden * 2})
    with pytest.raises(TrainingFailed, match=r"bad settings or data[\s\S]*different model \(ffn_hidden: 384 -> 768\)"):
        run_train(wider, cfg.train.changed(**{"steps": 4}), root / "tokenizer", root / "tokens", out, {},
                  log_line=lambda _: None)


@pytest.mark.parametrize("stage", [0, 2, 3])
def test_every_zero_stage_trains_evaluates_and_resumes(prepared_run, tmp_path, stage):
    cfg, root = prepared_run
    out = tmp_path / "train"
    result, _ = train(cfg, root, out, steps=2, save_every=2, zero_stage=stage, eval_every=2, eval_samples_per_channel=3)
    assert result["latest_checkpoint"] == "step_00000002"
    in_training = {k.removeprefix("eval_ppl_"): v for m in read_jsonl(out / "metrics.jsonl") for k, v in m.items()
                   if k.startswith("eval_ppl_")}
    assert in_training
    # the eval flow's scorer, one process on the saved checkpoint, gives what the ranks measured at that step
    scored = evaluate_checkpoint(out, "step_00000002")
    assert scored["step"] == 2 and scored["ppl"].keys() == in_training.keys()
    for channel, ppl in in_training.items():
        assert scored["ppl"][channel] == pytest.approx(ppl, rel=1e-4), channel
    result, lines = train(cfg, root, out, steps=3, save_every=3, zero_stage=stage)
    assert any("resumed from step_00000002 at step 2" in line for line in lines) and result["latest_step"] == 3


def test_training_leaves_no_deepspeed_buffers_in_dev_shm(prepared_run, tmp_path):
    from pathlib import Path

    cfg, root = prepared_run
    port = free_port()
    before = set(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))
    assert not before
    result, lines = train(cfg, root, tmp_path / "train", steps=1, save_every=1, master_port=port)
    assert result["exit_code"] == 0
    [removed] = [line for line in lines if "DeepSpeed buffer(s) from /dev/shm" in line]
    assert removed.startswith("removed 2 ") and f"_{port}_" in removed  # one a rank: they existed, and went
    assert not list(Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"))


# Loaded by every Python process of the run (sitecustomize on PYTHONPATH): wraps torch.distributed's collectives and
# records, per call, the first frame outside torch that made it.
TRACER = """
import os
if os.environ.get("PRETRAIN_TEST_TRACE_DIR"):
    import json, sys
    import torch, torch.distributed as dist
    TORCH = os.path.dirname(torch.__file__)
    def wrap(name, fn):
        def traced(*args, **kwargs):
            frame = sys._getframe(1)
            while frame and frame.f_code.co_filename.startswith(TORCH):
                frame = frame.f_back
            path = os.path.join(os.environ["PRETRAIN_TEST_TRACE_DIR"], f"{os.getpid()}.jsonl")
            with open(path, "a") as f:
                f.write(json.dumps({"name": name, "file": frame.f_code.co_filename if frame else "?",
                                    "rank": os.environ.get("RANK")}) + "\\n")
            return fn(*args, **kwargs)
        return traced
    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "barrier", "broadcast", "reduce",
                 "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all_single",
                 "all_gather_object", "broadcast_object_list"):
        setattr(dist, name, wrap(name, getattr(dist, name)))
"""


def test_mixture_and_staged_data_reach_the_ranks_and_every_collective_goes_through_comm(prepared_run, tmp_path,
                                                                                         monkeypatch):
    """A real 2-rank run with a mixture, staging, eval and two checkpoints, traced at torch.distributed: each
    collective our code makes (not DeepSpeed's own) comes from model/comm.py, and a step costs one all-reduce."""
    from tests.conftest import ROOT

    cfg, root = prepared_run
    site, trace = tmp_path / "site", tmp_path / "trace"
    site.mkdir()
    trace.mkdir()
    (site / "sitecustomize.py").write_text(TRACER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("PRETRAIN_TEST_TRACE_DIR", str(trace))
    result, lines = train(cfg, root, tmp_path / "train", steps=4, save_every=2, eval_every=2,
                          eval_samples_per_channel=2, stage_data_dir=str(tmp_path / "shm"),
                          mixture=MixtureConfig(by="channel", weights={"en": 3.0, "code": 1.0}))
    version = read_manifest(root / "tokens")["version"]
    assert result["exit_code"] == 0
    assert any(f"staged token shards to {tmp_path / 'shm' / ('tokens-' + version)}" in line for line in lines)
    plan = next(line for line in lines if "data pools:" in line)
    assert "code:" in plan and "share 0.250" in plan and "en:" in plan and "share 0.750" in plan
    assert "zh:" in plan and "share 0.000" in plan  # pools the mixture does not name are not drawn

    calls = [json.loads(line) for f in trace.glob("*.jsonl") for line in f.read_text().splitlines()]
    assert any(os.sep + "deepspeed" + os.sep in c["file"] for c in calls)  # the tracer sees DeepSpeed's own too
    ours = [c for c in calls if c["file"].startswith(str(ROOT)) and "site-packages" not in c["file"]]
    assert ours and {os.path.relpath(c["file"], ROOT) for c in ours} == {os.path.join("model", "comm.py")}, \
        Counter(c["file"] for c in ours)
    rank0 = Counter(c["name"] for c in ours if c["rank"] == "0")
    # 4 steps' agreements + staging + 2 room-to-save checks + 2 evals; 2 barriers per checkpoint, 1 to leave together,
    # 1 after start (every rank has read the secrets file)
    assert rank0 == {"all_reduce": 4 + 1 + 2 + 2, "barrier": 2 * 2 + 1 + 1}


def test_buffers_of_dead_runs_are_removed_and_live_ones_kept(tmp_path):
    import mmap
    import subprocess
    import sys
    import time as _time

    from tasks.train.run import remove_stale_shm_buffers

    dead = tmp_path / f"deepspeed_allreduce_buffer_{os.getuid()}_0_29500_0"
    live = tmp_path / f"deepspeed_allreduce_buffer_{os.getuid()}_0_29501_0"
    new = tmp_path / f"deepspeed_allreduce_buffer_{os.getuid()}_0_29502_0"
    for path in (dead, live, new):
        path.write_bytes(b"\0" * mmap.PAGESIZE)
    old = _time.time() - 3600
    os.utime(dead, (old, old))
    os.utime(live, (old, old))
    holder = subprocess.Popen([sys.executable, "-c", f"import mmap, sys, time\nf = open({str(live)!r}, 'r+b')\n"
                               "m = mmap.mmap(f.fileno(), 0)\nprint('mapped', flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "mapped"  # a rank of a run still training on this node
        assert remove_stale_shm_buffers(tmp_path) == [dead.name]
    finally:
        holder.kill()
    assert not dead.exists() and live.exists() and new.exists()  # a brand-new one may not be mapped yet
