"""Held-out perplexity per channel, computed on every rank's share of the eval samples."""
from __future__ import annotations

import math

import torch

from model.comm import Comm
from model.data import TokenDataset
from pretrain.channels import CHANNELS
from model.loss import token_cross_entropy


def local_eval_sums(engine, dataset: TokenDataset, micro: int, rank: int, world: int) -> torch.Tensor:
    """(loss sum, token count) per channel over this rank's eval samples (j = rank, rank + world, ...),
    accumulated on the engine's device: nothing crosses to the host until the reduction."""
    L = dataset.seq_len
    sums = torch.zeros(2, len(CHANNELS), dtype=torch.float64, device=engine.device)
    engine.eval()
    try:
        with torch.no_grad():
            for channel, count in sorted(dataset.eval_counts.items()):
                stream = torch.from_numpy(dataset.eval_tokens(channel))
                mine = list(range(rank, count, world))
                c = CHANNELS.index(channel)
                # every rank runs the same number of forward passes (ZeRO-3 gathers parameters in each),
                # a rank with fewer samples running its first one again and not counting it
                for b in range(0, -(-count // world), micro):
                    chunk = mine[b:b + micro]
                    tokens = torch.stack([stream[j * L: j * L + L + 1] for j in chunk or [0]]).to(engine.device)
                    logits = engine(tokens[:, :-1])
                    if not chunk:
                        continue
                    sums[0, c] += token_cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).sum()
                    sums[1, c] += tokens[:, 1:].numel()
    finally:
        engine.train()
    return sums


def perplexities(sums: torch.Tensor) -> dict[str, float]:
    return {f"eval_ppl_{name}": math.exp(sums[0, c].item() / sums[1, c].item())
            for c, name in enumerate(CHANNELS) if sums[1, c] > 0}


def reduce_eval(comm: Comm, sums: torch.Tensor | None) -> dict[str, float] | None:
    """All-reduce every rank's sums; a rank whose eval failed sends a flag, and then nobody reports.

    Every rank reaches this collective whether its eval worked or not, so a
    failure on one rank cannot leave the others waiting.
    """
    packed = torch.zeros(2 * len(CHANNELS) + 1, dtype=torch.float64, device=comm.device)
    if sums is None:
        packed[-1] = 1.0
    else:
        packed[:-1] = sums.flatten()
    packed = comm.all_reduce(packed).cpu()
    if packed[-1] > 0:
        return None
    return perplexities(packed[:-1].view(2, len(CHANNELS)))
