"""Small-scale evals: multiple-choice and QA task files scored as cloze log-likelihood and bits per byte.

At 0.1-1.5B parameters multiple-choice benchmarks sit near chance when the
model is asked to name a letter; scored as cloze (which continuation does the
model find likeliest) and as bits per byte of the right continuation, they move
smoothly with training. Each figure comes with its standard error over the
task's items, so a change smaller than the task's own noise is not called a
regression.

A task file is JSONL, one item a line: {"context": ..., "choices": [...],
"answer": <index>} for multiple choice, {"context": ..., "answer": "<text>"}
for QA (bits per byte only). Continuations are scored after the context as a
document of the training data starts (after an end-of-document token), the
continuation's tokens being those the context and continuation encode to
beyond the context's own (as lm-evaluation-harness splits them).
"""
from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Item:
    context: str
    choices: tuple[str, ...]  # QA: the answer alone
    answer: int


def read_task(path: Path) -> list[Item]:
    """The items of a task file; ValueError naming the file and line of the first bad one."""
    items = []
    for n, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(parse_item(json.loads(line)))
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"{path} line {n}: {err}; an item is {{\"context\": ..., \"choices\": [...], "
                             f"\"answer\": <index>}} or {{\"context\": ..., \"answer\": \"<text>\"}}") from None
    if not items:
        raise ValueError(f"{path} holds no items")
    return items


def parse_item(raw: dict) -> Item:
    context, answer = raw["context"], raw["answer"]
    if "choices" not in raw:
        if not isinstance(answer, str) or not answer:
            raise ValueError("a QA item's answer must be non-empty text")
        return Item(context, (answer,), 0)
    choices = tuple(raw["choices"])
    if len(choices) < 2 or not all(isinstance(c, str) and c for c in choices):
        raise ValueError("choices must be two or more non-empty texts")
    if not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise ValueError(f"answer must be an index into the {len(choices)} choices, got {answer!r}")
    return Item(context, choices, answer)


def split_ids(tokenizer, context: str, continuation: str) -> tuple[list[int], list[int]]:
    whole = tokenizer.encode(context + continuation).ids
    head = tokenizer.encode(context).ids
    if whole[:len(head)] != head:  # a merge across the boundary: score the continuation as encoded alone
        return head, tokenizer.encode(continuation).ids
    return head, whole[len(head):]


@torch.no_grad()
def continuation_logprob(model, prefix: list[int], continuation: list[int], max_len: int, device: str) -> float:
    """Natural-log probability of `continuation` after `prefix` (the prefix cut from the left to fit)."""
    ids = (prefix + continuation)[-(max_len + 1):]
    x = torch.tensor([ids], device=device)
    logp = torch.log_softmax(model(x[:, :-1]).float(), dim=-1)[0]
    targets = x[0, 1:]
    picked = logp.gather(1, targets[:, None])[:, 0]
    return picked[-len(continuation):].double().sum().item()


def mean_and_se(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan"))


def score_items(model, tokenizer, items: list[Item], eos: int, max_len: int, device: str = "cpu") -> dict:
    """Cloze accuracy (raw and per byte) over the multiple-choice items, bits per byte of every item's right
    continuation, each with its standard error over items, and the item counts."""
    correct, correct_norm, bpb = [], [], []
    for item in items:
        scores = []
        for choice in item.choices:
            head, cont = split_ids(tokenizer, item.context, choice)
            scores.append((continuation_logprob(model, [eos] + head, cont, max_len, device), len(choice.encode())))
        logprob, n_bytes = scores[item.answer]
        bpb.append(-logprob / math.log(2) / n_bytes)
        if len(item.choices) > 1:
            correct.append(float(max(range(len(scores)), key=lambda k: scores[k][0]) == item.answer))
            correct_norm.append(float(max(range(len(scores)), key=lambda k: scores[k][0] / scores[k][1])
                                      == item.answer))
    out = {"items": len(items), "bpb": mean_and_se(bpb)[0], "bpb_se": mean_and_se(bpb)[1]}
    if correct:
        (acc, acc_se), (norm, norm_se) = mean_and_se(correct), mean_and_se(correct_norm)
        out.update(mc_items=len(correct), acc=acc, acc_se=acc_se, acc_norm=norm, acc_norm_se=norm_se)
    return out
