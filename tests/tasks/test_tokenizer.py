import pyarrow.dataset as ds
import pytest

from tasks.common.outputs import read_json
from tasks.tokenizer import BOS, EOS, PAD, load_tokenizer, run_tokenizer, split_corpus


def test_report_and_files(prepared_run):
    cfg, root = prepared_run
    report = read_json(root / "tokenizer" / "report.json")
    assert report["vocab_size"] == cfg.tokenizer.vocab_size
    assert report["total_tokens"] == cfg.tokenizer.vocab_size + cfg.tokenizer.reserved_tokens
    assert report["embedding_rows"] % 128 == 0 and report["embedding_rows"] >= report["total_tokens"]
    assert report["special_tokens"] == {BOS: 0, EOS: 1, PAD: 2}
    assert set(report["held_out"]) == {"zh", "en", "code"}
    for channel in report["held_out"].values():
        assert channel["roundtrip_failures"] == 0 and channel["chars_per_token"] > 0
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        assert (root / "tokenizer" / name).is_file()


@pytest.mark.parametrize("text", ["价格是9.11元，不是9.9元。", "def f(x):\n    return x ** 2  # 平方", "Ünïcödé ✓ 🚀 \t tabs", ""])
def test_roundtrip_and_no_unknown(prepared_run, text):
    tok = load_tokenizer(prepared_run[1] / "tokenizer")
    enc = tok.encode(text, add_special_tokens=False)
    assert tok.decode(enc.ids, skip_special_tokens=False) == text
    assert None not in enc.ids


def test_digits_are_split_one_by_one(prepared_run):
    tok = load_tokenizer(prepared_run[1] / "tokenizer")
    tokens = tok.encode("2024 and 9.11", add_special_tokens=False).tokens
    digit_tokens = [t for t in tokens if any(c.isdigit() for c in t)]
    assert digit_tokens and all(sum(c.isdigit() for c in t) == 1 for t in digit_tokens)


def test_held_out_is_disjoint_from_training(prepared_run):
    _, root = prepared_run
    train, held = split_corpus(root / "clean" / "kept", 4)
    held_texts = {t for texts in held.values() for t in texts}
    assert held_texts and not held_texts & set(train)
    assert len(train) + len(held_texts) == ds.dataset(root / "clean" / "kept").count_rows()


def test_requires_complete_clean_output(tmp_path, tiny_cfg):
    (tmp_path / "clean").mkdir()
    with pytest.raises(FileNotFoundError, match="no complete 'clean' output"):
        run_tokenizer(tiny_cfg.tokenizer, tmp_path / "clean", tmp_path / "tok")
