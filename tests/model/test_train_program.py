"""Pieces of the training program that need no process group."""
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F

from pretrain.channels import CHANNELS
from model.evaluate import perplexities
from model.guard import Guard, fault_point
from model.llama import ModelArgs, Transformer
from model.perf import mfu, peak_tflops
from model.steps import LOG_Z, N_CHANNELS, STATS, Z_LOSS, lr_at, step_loss
from tasks.train.spec import train_spec

ARGS = ModelArgs(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=50, ffn_hidden=64, max_seq_len=16)


class Engine(Transformer):
    device = torch.device("cpu")


def test_per_channel_loss_sums_match_a_direct_computation():
    torch.manual_seed(0)
    engine = Engine(ARGS)
    tokens = torch.randint(0, 50, (2, 9))
    channels = torch.tensor([[0] * 3 + [1] * 5, [2] * 8])  # a document boundary inside sample 0
    stats = torch.zeros(STATS)
    loss, cross_entropy = step_loss(engine, tokens, channels, stats)
    assert loss.requires_grad and torch.equal(loss.detach(), cross_entropy)  # no z-loss: the same figure
    logits = engine(tokens[:, :-1]).flatten(0, 1)
    per_token = F.cross_entropy(logits, tokens[:, 1:].flatten(), reduction="none")
    ch = channels.flatten()
    sums = torch.stack([stats[1:1 + N_CHANNELS], stats[1 + N_CHANNELS:1 + 2 * N_CHANNELS]])
    for c in range(len(CHANNELS)):
        assert sums[0, c].item() == pytest.approx(per_token[ch == c].sum().item(), rel=1e-6)
        assert sums[1, c].item() == (ch == c).sum().item()
    assert loss.item() == pytest.approx(sums[0].sum().item() / 16, rel=1e-6)
    assert perplexities(sums)["eval_ppl_zh"] == pytest.approx(math.exp(sums[0, 0].item() / 3))
    log_z = torch.logsumexp(logits, dim=-1)
    assert stats[LOG_Z].item() == pytest.approx(log_z.sum().item(), rel=1e-5) and stats[Z_LOSS].item() == 0

    z_stats = torch.zeros(STATS)  # with z-loss: trained on, logged apart; the channels' cross-entropy unchanged
    z_loss, z_cross_entropy = step_loss(engine, tokens, channels, z_stats, z_weight=1e-2)
    assert z_cross_entropy.item() == pytest.approx(loss.item(), rel=1e-5)
    assert z_loss.item() == pytest.approx(loss.item() + 1e-2 * log_z.square().mean().item(), rel=1e-5)
    assert z_stats[Z_LOSS].item() == pytest.approx(1e-2 * log_z.square().sum().item(), rel=1e-5)
    torch.testing.assert_close(z_stats[1:1 + 2 * N_CHANNELS], stats[1:1 + 2 * N_CHANNELS], rtol=1e-5, atol=1e-5)


def test_schedules_are_selected_by_config(tiny_cfg):
    t = replace(train_spec(tiny_cfg.train), lr=1e-3, min_lr=1e-4, warmup_steps=10, steps=100, decay_frac=0.2)
    assert lr_at(50, replace(t, schedule="wsd")) == 1e-3  # stable phase
    assert lr_at(99, replace(t, schedule="wsd")) == pytest.approx(1e-3 - 0.95 * 9e-4)  # decaying
    assert lr_at(50, replace(t, schedule="cosine")) < 1e-3
    assert lr_at(50, replace(t, schedule="wsd"), scale=0.5) == 5e-4  # an escalated recovery's lower rate


def test_mfu_uses_the_gpu_peak():
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and peak_tflops("cpu") is None
    assert peak_tflops("cpu", override=100.0) == 100.0
    assert mfu(6e9, 1e5, 2, 989.0) == pytest.approx(6e9 * 1e5 / (2 * 989e12))
    assert mfu(6e9, 1e5, 2, None) is None


def test_guard_reports_and_continues(monkeypatch):
    events = []
    guard = Guard(events.append)
    assert guard.run("ok", lambda x: x + 1, 1) == 2
    assert guard.run("boom", lambda: 1 / 0) is None
    assert guard.failures == 1 and events[0]["callback"] == "boom" and "ZeroDivisionError" in events[0]["error"]
    monkeypatch.setenv("PRETRAIN_FAULTS", "eval@1")
    fault_point("eval", 0)  # another rank: nothing happens
    with pytest.raises(RuntimeError, match="injected fault 'eval' on rank 1"):
        fault_point("eval", 1)


def test_a_sigterm_that_comes_with_the_launchers_exit_stays_the_cause():
    """A killpg (Prefect cancel) reaches the launcher and its ranks together; the launcher watch, waking after
    the SIGTERM was handled, must not rename the cause 'launcher gone' (CI caught exactly that)."""
    import signal

    from model.train import StopFlag

    previous = signal.getsignal(signal.SIGTERM)
    try:
        flag = StopFlag(poll_s=0.3)
        flag.launcher_gone = lambda: True  # the launcher died of the same killpg
        flag._handle(signal.SIGTERM, None)
        flag.watch_thread.join(timeout=10)  # the watch has woken, looked and ended: no sleep to hope on
        assert not flag.watch_thread.is_alive()
        assert flag.requested and flag.reason == "SIGTERM" and flag.cause() == "SIGTERM"
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_compiled_blocks_keep_the_state_dict_and_the_logits(tiny_cfg):
    from model.comm import Comm
    from model.spec import Spec
    from model.train import build_model
    from tasks.train.spec import data_spec, deepspeed_config
    from model.spec import Overrides

    def built(**train):
        spec = Spec(ARGS, replace(train_spec(tiny_cfg.train), **train), data_spec(tiny_cfg.train, tiny_cfg.run_root_path()),
                    None, Overrides(), deepspeed_config(tiny_cfg.train.changed(**{"bucket_size": 10**6})),
                    tiny_cfg.run_root_path(), "v")
        torch.manual_seed(0)
        return build_model(spec, Comm(device=torch.device("cpu"), backend="gloo", rank=0, world=1))

    eager, compiled = built(), built(compile=True, compile_backend="eager")
    assert list(compiled.state_dict()) == list(eager.state_dict())  # checkpoints and the HF export read these names
    tokens = torch.randint(0, 50, (2, 8))
    assert torch.allclose(compiled(tokens), eager(tokens))
    assert compiled.layers[0]._compiled_call_impl is not None and eager.layers[0]._compiled_call_impl is None
