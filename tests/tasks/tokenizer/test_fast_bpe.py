"""Exact fast encoding: tiktoken gives HF tokenizers' ids for the stage's byte-level BPE, or it is not used."""
import json

import pytest
from tokenizers import Tokenizer, models

from tasks.tokenize import run_tokenize
from tasks.tokenizer.fast_bpe import equivalence, fast_bpe
from tasks.tokenizer.report import byte_decoder
from tasks.tokenizer.train import load_tokenizer, new_tokenizer


def test_the_stage_proves_its_pruned_tokenizer_equal_and_tokenize_encodes_with_tiktoken(prepared_run):
    _, root = prepared_run
    report = json.loads((root / "tokenizer" / "report.json").read_text())
    proof = report["fast_encoding"]
    assert report["pruning"]["removed_total"] > 0  # pruned, and still equal
    assert proof["encoder"] == "tiktoken" and proof["differing"] == 0
    assert proof["random_strings"] >= 25_000 and proof["texts"] > 0 and proof["compared"] >= 25_000
    manifest = json.loads((root / "tokens" / "manifest.json").read_text())
    assert manifest["encoder"]["used"] == "tiktoken" and "0 of" in manifest["encoder"]["why"]
    # the shards hold HF's ids: tests/tasks/tokenize/test_stage.py compares every document with HF's encoding


def test_tiktoken_gives_hfs_ids_on_the_hard_cases(prepared_run):
    _, root = prepared_run
    hf, fast = load_tokenizer(root / "tokenizer"), fast_bpe(root / "tokenizer" / "tokenizer.json")
    hard = ["a  5", "x\t\t42 y", "it's 9.11 > 9.9", "１２３ ٣٤ ²½", "e\u0301 café", "  \n\n  end", "tab\t", "’s 's",
            "価格は3000円", "🚀🚀 go", "\u00a0\u3000x", "don't stop 1,000,000"]
    for text in hard:
        assert fast.ids(text) == hf.encode(text, add_special_tokens=False).ids, text


def test_a_text_holding_an_added_token_is_left_to_hf(prepared_run):
    _, root = prepared_run
    fast = fast_bpe(root / "tokenizer" / "tokenizer.json")
    assert fast.holds_added("the end <|eos|> of it") and not fast.holds_added("the end")
    assert fast.flat(["fine", "x <|eos|>"], 0, "int64") is None  # the batch goes to HF, which splits it out


def toy_bpe(merges: list[tuple[str, str]]) -> Tokenizer:
    alphabet = sorted(byte_decoder())
    vocab = {c: i for i, c in enumerate(alphabet)}
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = new_tokenizer()
    tok.model = models.BPE(vocab, merges)
    return tok


def test_a_bpe_whose_token_another_split_reaches_is_not_proven_and_tokenize_uses_hf(prepared_run, tmp_path):
    cfg, root = prepared_run
    # HF: "abc" -> ab + c (no merge joins them); tiktoken: ab + c -> abc (the bytes "abc" are a token, via a + bc)
    toy = toy_bpe([("a", "b"), ("b", "c"), ("a", "bc")])
    toy.save(str(tmp_path / "tokenizer.json"))
    proof = equivalence(tmp_path / "tokenizer.json", ["abc"], n_random=200)
    assert proof["encoder"] == "tokenizers" and proof["differing"] >= 1 and "abc" in proof["examples"]
    assert "encode differently" in proof["reason"]
    assert fast_bpe(tmp_path / "tokenizer.json").ids("abc") != toy.encode("abc").ids


@pytest.mark.parametrize("setting,why", [("tokenizers", "tokenize.encoder: tokenizers"),
                                         ("auto", "changed after its report")])
def test_tokenize_falls_back_to_hf_and_says_why(prepared_run, tmp_path, setting, why):
    cfg, root = prepared_run
    tokenizer = tmp_path / "tokenizer"
    tokenizer.mkdir()
    for f in (root / "tokenizer").iterdir():
        (tokenizer / f.name).write_bytes(f.read_bytes())
    if setting == "auto":  # a tokenizer.json edited after the stage proved the one it wrote
        data = json.loads((tokenizer / "tokenizer.json").read_text())
        data["truncation"] = None
        (tokenizer / "tokenizer.json").write_text(json.dumps(data, indent=1))
    manifest = run_tokenize(cfg.tokenize.model_copy(update={"encoder": setting}), root / "clean", tokenizer,
                            tmp_path / "tokens")
    assert manifest["encoder"]["used"] == "tokenizers" and why in manifest["encoder"]["why"]
    assert manifest["total_tokens"] == json.loads((root / "tokens" / "manifest.json").read_text())["total_tokens"]
