"""Cloze and bits-per-byte scoring against values worked out by hand: a word-level tokenizer and a model whose
next-token distribution is fixed, so every log-likelihood is a sum of known logs."""
import json
import math

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers

from model.task_eval import read_task, score_items

VOCAB = {"<|eos|>": 0, "the": 1, "cat": 2, "dog": 3, "sat": 4, "[UNK]": 5}
PROBS = torch.tensor([1, 1, 1, 1, 4, 2], dtype=torch.float64) / 10  # p(cat) = p(dog) = 0.1, p(sat) = 0.4


class FixedNextToken(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PROBS.log().float().expand(x.shape[0], x.shape[1], len(PROBS))


def word_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.WordLevel(VOCAB, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def write_task(path, items):
    path.write_text("\n".join(json.dumps(i) for i in items) + "\n")
    return path


def test_cloze_accuracy_and_bits_per_byte_match_the_hand_computed_values(tmp_path):
    task = write_task(tmp_path / "toy.jsonl", [
        {"context": "the cat", "choices": [" sat", " dog"], "answer": 0},   # ln .4 > ln .1: right
        {"context": "the", "choices": [" dog", " cat sat"], "answer": 0},   # ln .1 > ln .1 + ln .4: right; per byte
        {"context": "the dog", "answer": " sat"},                           # -0.576 < -0.402: wrong. QA: bpb only
    ])
    got = score_items(FixedNextToken(), word_tokenizer(), read_task(task), eos=0, max_len=16)
    bpb = [-math.log2(0.4) / 4, -math.log2(0.1) / 4, -math.log2(0.4) / 4]  # " sat" and " dog" are 4 bytes
    mean = sum(bpb) / 3
    se = math.sqrt(sum((b - mean) ** 2 for b in bpb) / 2) / math.sqrt(3)
    assert got["items"] == 3 and got["mc_items"] == 2
    assert got["bpb"] == pytest.approx(mean, rel=1e-6) and got["bpb_se"] == pytest.approx(se, rel=1e-6)
    assert (got["acc"], got["acc_se"]) == (1.0, 0.0)
    assert got["acc_norm"] == 0.5 and got["acc_norm_se"] == pytest.approx(0.5)


@pytest.mark.parametrize("line, message", [
    ({"context": "a", "choices": ["x"], "answer": 0}, "two or more"),
    ({"context": "a", "choices": ["x", "y"], "answer": 2}, "an index into the 2 choices"),
    ({"context": "a", "answer": ""}, "non-empty text"),
    ({"question": "a", "answer": "b"}, "'context'"),
])
def test_a_bad_item_is_named_by_file_and_line(tmp_path, line, message):
    task = write_task(tmp_path / "bad.jsonl", [{"context": "ok", "answer": " fine"}, line])
    with pytest.raises(ValueError, match=rf"bad.jsonl line 2: .*{message}"):
        read_task(task)
