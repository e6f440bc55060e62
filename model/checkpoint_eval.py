"""Score one saved checkpoint on the held-out samples of every channel, in one process (no DeepSpeed ranks).

The samples are the ones training held out (train.data.eval_samples_per_channel, from
the end of each channel's data), so the figures line up with the in-training eval.
"""
from __future__ import annotations

import math
from pathlib import Path

import torch

from model import checkpoint as ckpt
from model.data import training_dataset
from model.export_hf import load_checkpoint_state
from model.llama import Transformer
from model.loss import token_cross_entropy
from model.protocol import SPEC_FILE
from model.spec import Spec


def load_model(train_dir: Path, tag: str, device: str) -> tuple[Transformer, Spec]:
    spec = Spec.load(Path(train_dir) / SPEC_FILE)
    model = Transformer(spec.model)
    model.load_state_dict(load_checkpoint_state(Path(train_dir) / "checkpoints", tag))
    return model.to(device).eval(), spec


def channel_loss(model: Transformer, stream: torch.Tensor, count: int, seq_len: int, batch: int, device: str
                 ) -> tuple[float, int]:
    """(summed next-token loss, tokens) over eval samples 0..count-1 of one channel's held-out stream."""
    total, tokens = torch.zeros((), dtype=torch.float64, device=device), 0
    with torch.no_grad():
        for b in range(0, count, batch):
            rows = torch.stack([stream[j * seq_len: j * seq_len + seq_len + 1] for j in range(b, min(count, b + batch))])
            rows = rows.to(device)
            logits = model(rows[:, :-1])
            total += token_cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten()).sum()  # as training computes it
            tokens += rows[:, 1:].numel()
    return total.item(), tokens


def evaluate_checkpoint(train_dir: Path, tag: str | None = None, device: str = "cpu", batch: int = 8,
                        max_samples_per_channel: int | None = None) -> dict:
    """Perplexity per channel of the named (or newest complete) checkpoint of a training run."""
    ckpt_dir = Path(train_dir) / "checkpoints"
    tag = ckpt.complete_tag(ckpt_dir, tag)
    model, spec = load_model(train_dir, tag, device)
    scores = held_out_scores(model, spec, device, batch, max_samples_per_channel, str(train_dir))
    return {"tag": tag, "step": ckpt.read_meta(ckpt_dir, tag)["step"], **scores}


def held_out_scores(model: Transformer, spec: Spec, device: str = "cpu", batch: int = 8,
                    max_samples_per_channel: int | None = None, trained_in: str = "the run") -> dict:
    """Perplexity, mean loss and tokens per channel of `model` on the samples the run of `spec` held out."""
    if not spec.data.eval_samples_per_channel:
        raise ValueError(f"{trained_in} was trained without a held-out set (train.data.eval_samples_per_channel: 0); "
                         f"nothing unseen to score it on. Set it above 0 for the next run")
    dataset = training_dataset(spec.data.tokens_dir, spec.data)
    result = {"ppl": {}, "loss": {}, "tokens": {}}
    for channel, count in sorted(dataset.eval_counts.items()):
        count = min(count, max_samples_per_channel or count)
        stream = torch.from_numpy(dataset.eval_tokens(channel))
        loss, n = channel_loss(model, stream, count, spec.data.seq_len, batch, device)
        result["loss"][channel], result["tokens"][channel] = loss / n, n
        result["ppl"][channel] = math.exp(loss / n)
    return result
