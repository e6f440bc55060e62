"""The step on the device: no copy to the host per micro step, one per step (the agreement)."""
import json
from dataclasses import replace
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from model.batches import BatchPrefetcher
from model.comm import Comm
from model.data import GlobalSampler, TokenDataset
from model.llama import ModelArgs, Transformer
from model.steps import STATS, PendingStep, agree, step_metrics, train_step
from tasks.train.spec import train_spec

MODEL_DIR = str(Path(__file__).resolve().parents[2] / "model")
TESTS_DIR = str(Path(__file__).resolve().parents[1])
HOST_COPIES = {"item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__", "__index__"}


class HostCopies(TorchFunctionMode):
    """Records every tensor -> host conversion made by code in model/ (DeepSpeed's and torch's own are theirs)."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in HOST_COPIES:
            frame = sys._getframe(1)
            while frame and not frame.f_code.co_filename.startswith((MODEL_DIR, TESTS_DIR)):
                frame = frame.f_back
            if frame and frame.f_code.co_filename.startswith(MODEL_DIR):
                self.calls.append(f"{name} at {Path(frame.f_code.co_filename).name}:{frame.f_lineno}")
        return func(*args, **(kwargs or {}))


class Engine(Transformer):
    """The parts of a DeepSpeed engine the step uses; its grad norm stays a tensor, as ZeRO-1/2's does."""
    device = torch.device("cpu")

    def __init__(self, args):
        super().__init__(args)
        self.optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3)
        self.micro, self.last_norm = 0, None

    def backward(self, loss):
        loss.backward()

    def step(self):
        self.micro += 1
        if self.micro % 4 == 0:  # the accumulation boundary
            self.last_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), 1.0)
            self.optimizer.step()
            self.optimizer.zero_grad()

    def get_global_grad_norm(self):
        return self.last_norm


class SoloComm(Comm):
    """World size 1 without a process group: the reduction is the identity."""

    def all_reduce(self, t, op="sum"):
        return self.place(t)


@pytest.fixture
def step_setup(prepared_run):
    cfg, root = prepared_run
    rows = json.loads((root / "tokenizer" / "report.json").read_text())["embedding_rows"]
    dataset = TokenDataset(root / "tokens", seq_len=32)
    engine = Engine(ModelArgs(dim=32, n_layers=1, n_heads=2, n_kv_heads=1, vocab_size=rows, ffn_hidden=64,
                              max_seq_len=32))
    batches = BatchPrefetcher(dataset, GlobalSampler(len(dataset), seed=1), rank=0, world=1, micro_batch=2, grad_accum=4)
    t = replace(train_spec(cfg.train), lr=1e-3, min_lr=1e-4, warmup_steps=1, steps=10, grad_accum=4)
    yield engine, batches, t
    batches.close()


def test_a_step_of_four_micro_steps_copies_to_the_host_once(step_setup):
    engine, batches, t = step_setup
    comm = SoloComm(torch.device("cpu"), "gloo", 0, 1)
    with HostCopies() as copies:
        pending, state = train_step(engine, batches, t, step=0)
    assert copies.calls == []  # forward, backward and optimizer step of 4 micro batches: nothing to the host
    with HostCopies() as copies:
        agreed = agree(comm, [pending], stop_requested=False, with_stats=False)
    assert len(copies.calls) == 1 and copies.calls[0].startswith("tolist"), copies.calls
    assert not agreed.loss_not_finite and not agreed.stop_requested and agreed.stats is None
    assert state.consumed_samples == 2 * 4 and pending.position_end == 8


def test_due_figures_ride_on_the_same_collective(step_setup):
    engine, batches, t = step_setup
    comm = SoloComm(torch.device("cpu"), "gloo", 0, 1)
    pending = [train_step(engine, batches, t, step=s)[0] for s in range(3)]
    with HostCopies() as copies:
        agreed = agree(comm, pending, stop_requested=True, with_stats=True)
    assert len(copies.calls) == 1 and agreed.stop_requested
    assert len(agreed.stats) == 3 and all(len(row) == STATS for row in agreed.stats)
    for p, row in zip(pending, agreed.stats):
        assert row[0] == pytest.approx(p.stats[0].item())
        p.seconds = 0.5
        metrics = step_metrics(p, row, 1.0, world=1, seq_len=32, flops_per_token=1e6)
        assert metrics["loss"] == pytest.approx(p.stats[0].item()) and metrics["tokens_per_s"] == 8 * 32 / 0.5
        # the per-channel losses average to the step's loss, weighted by their tokens
        tokens = {k: row[1 + 4 + c] for c, k in enumerate(["zh", "en", "code", "other"])}
        weighted = sum(metrics[f"loss_{k}"] * n for k, n in tokens.items() if n) / sum(tokens.values())
        assert weighted == pytest.approx(metrics["loss"], rel=1e-4)


def test_a_non_finite_loss_is_flagged(step_setup, monkeypatch):
    engine, batches, t = step_setup
    monkeypatch.setenv("PRETRAIN_NAN_POSITIONS", "0-1")
    pending, _ = train_step(engine, batches, t, step=0)
    agreed = agree(SoloComm(torch.device("cpu"), "gloo", 0, 1), [pending], stop_requested=False, with_stats=False)
    assert agreed.loss_not_finite


def test_an_injected_spike_multiplies_the_loss_of_those_samples_only(step_setup, monkeypatch):
    from model.steps import SPIKE_FACTOR

    engine, batches, t = step_setup
    monkeypatch.setenv("PRETRAIN_SPIKE_POSITIONS", "8-9")  # a sample of the second step, not the first
    first, _ = train_step(engine, batches, t, step=0)
    second, _ = train_step(engine, batches, t, step=1)
    assert second.position_start == 8
    assert second.stats[0].item() > 0.8 * SPIKE_FACTOR * first.stats[0].item()
    assert torch.isfinite(second.stats[0])


def test_pending_step_keeps_the_device_grad_norm():
    p = PendingStep(1, torch.zeros(STATS), torch.tensor(2.5), 1e-3, 0.0, 8, 0, 8)
    from model.steps import grad_norms

    assert grad_norms([p, PendingStep(2, torch.zeros(STATS), None, 1e-3, 0.0, 8, 8, 16),
                       PendingStep(3, torch.zeros(STATS), 3.0, 1e-3, 0.0, 8, 16, 24)]) == [2.5, None, 3.0]
