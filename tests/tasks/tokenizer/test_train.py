import pyarrow.parquet as pq
import pytest

from tasks.common.outputs import read_json
from pretrain.config import TokenizerConfig
from tasks.tokenizer.train import (BOS, EOS, PAD, load_tokenizer, run_tokenizer, sample_corpus, train_tokenizer,
                             training_pieces)


def test_report_and_files(prepared_run):
    cfg, root = prepared_run
    report = read_json(root / "tokenizer" / "report.json")
    assert report["vocab_size"] == cfg.tokenizer.vocab_size - report["pruning"]["removed_total"]
    assert report["total_tokens"] == report["vocab_size"] + cfg.tokenizer.reserved_tokens
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
    cfg, root = prepared_run
    sample = sample_corpus(root / "clean", cfg.tokenizer)
    held_texts = {t for texts in sample.held.values() for t in texts}
    assert held_texts and not held_texts & set(sample.train)
    recorded = pq.read_table(root / "tokenizer" / "training_sample.parquet").to_pylist()
    assert len(recorded) == len(sample.train) == read_json(root / "tokenizer" / "report.json")["training_docs"]


def test_channel_mix_and_cap_bound_the_sample(prepared_run):
    cfg, root = prepared_run
    capped = cfg.tokenizer.model_copy(update={"max_training_chars": 20_000, "channel_mix": {"zh": 0.5, "code": 0.5}})
    sample = sample_corpus(root / "clean", capped)
    chars = {c: sum(len(t) for t, (_, ch) in zip(sample.train, sample.ids) if ch == c) for c in ("zh", "en", "code")}
    assert chars["en"] == 0  # not in the mix
    assert 0 < chars["code"] < 2 * 10_000  # about its share of the cap (sampling is per document)
    assert sum(chars.values()) < 2 * 20_000
    again = sample_corpus(root / "clean", capped)
    assert again.ids == sample.ids  # deterministic


def test_requires_complete_clean_output(tmp_path, tiny_cfg):
    (tmp_path / "clean").mkdir()
    with pytest.raises(FileNotFoundError, match="no complete 'clean' output"):
        run_tokenizer(tiny_cfg.tokenizer, tmp_path / "clean", tmp_path / "tok")


def test_transformers_loads_the_directory_with_the_same_ids(prepared_run):
    from transformers import AutoTokenizer

    tok_dir = prepared_run[1] / "tokenizer"
    hf = AutoTokenizer.from_pretrained(str(tok_dir))
    raw = load_tokenizer(tok_dir)
    for text in ["价格是9.11元，不是9.9元。", "def f(x):\n    return x ** 2", "plain English text."]:
        assert hf(text)["input_ids"] == raw.encode(text, add_special_tokens=False).ids
        assert hf.decode(hf(text)["input_ids"]) == text
    assert (hf.bos_token_id, hf.eos_token_id, hf.pad_token_id) == (0, 1, 2)


def test_report_diagnostics(prepared_run):
    report = read_json(prepared_run[1] / "tokenizer" / "report.json")
    assert report["digits_split_one_by_one"] is True
    assert report["unreachable_tokens"] == 0
    assert report["partial_utf8_tokens"] > 0  # byte-level BPE always learns some
    assert 0 <= report["cjk_single_token_share"] <= 1 and report["cjk_chars_checked"] > 0
    assert len(report["longest_tokens"]) == 10


def test_unreachable_token_is_detected():
    from tokenizers import Tokenizer, models, pre_tokenizers

    from tasks.tokenizer.report import byte_decoder, vocabulary_diagnostics

    vocab = {ch: i for i, ch in enumerate(sorted(byte_decoder()))}
    vocab["ab"] = len(vocab)  # in the vocabulary, but no merge builds it
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    diag = vocabulary_diagnostics(tok, set())
    assert diag["unreachable_tokens"] == 1 and diag["unreachable_examples"] == ["ab"]


def test_byte_alphabet_maps_to_all_bytes():
    from tasks.tokenizer.report import byte_decoder, token_bytes

    assert sorted(byte_decoder().values()) == list(range(256))
    assert token_bytes("Ġthe") == b" the" and token_bytes("中") is None  # 中 is no byte-alphabet character


def test_vocab_size_below_bytes_and_specials_is_a_clear_error(tmp_path):
    from pretrain.config import ConfigError, parse_config
    from tests.conftest import tiny_dict

    with pytest.raises(ConfigError, match=r"tokenizer.vocab_size=200 leaves no room for merges.*at least 260"):
        parse_config(tiny_dict(tmp_path, tokenizer={"vocab_size": 200}))


def test_empty_corpus_is_a_clear_error(tmp_path, tiny_cfg):
    from pretrain.config import CleanConfig, SourceConfig
    from tasks.clean.stage import run_clean

    src = tmp_path / "empty.jsonl"
    src.write_text('{"text": "short"}\n')
    run_clean(CleanConfig(sources=[SourceConfig(path=str(src))]), tmp_path / "clean")
    with pytest.raises(ValueError, match="no documents to train a tokenizer on"):
        run_tokenizer(tiny_cfg.tokenizer, tmp_path / "clean", tmp_path / "tok")


def test_reference_tokenizers_on_the_same_held_out_text(prepared_run):
    pytest.importorskip("bpe_openai")
    from tasks.tokenizer.report import reference_compression

    held = {"en": ["The old lighthouse keeper wrote the weather in his logbook every evening."],
            "zh": ["今天天气很好，我们去公园散步，然后在湖边喝茶。"]}
    ref = reference_compression(held)
    assert ref["available"] and set(ref) == {"available", "cl100k_base", "o200k_base"}
    assert ref["o200k_base"]["en"] > 3.0  # a 200k vocabulary packs several English characters per token
    report = read_json(prepared_run[1] / "tokenizer" / "report.json")
    assert set(report["reference_chars_per_token"]["cl100k_base"]) == set(report["held_out"])
    md = (prepared_run[1] / "tokenizer" / "report.md").read_text()
    assert "o200k_base chars/token" in md


def test_long_cjk_runs_are_cut_for_training_without_losing_text():
    run = "天地玄黄宇宙洪荒日月盈昃辰宿列张" * 5  # 80 unpunctuated CJK characters
    text = f"abc {run}，短句。{run[:10]}"
    pieces = list(training_pieces([text], max_cjk_run=32))
    assert "".join(pieces) == text
    assert [len(p) for p in pieces] == [4 + 32, 32, len(text) - 68]
    assert list(training_pieces([text], max_cjk_run=0)) == [text]


def test_cut_runs_still_train_merges_inside_them():
    verse = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏"
    cfg = TokenizerConfig(vocab_size=400, max_cjk_run=8, min_frequency=1)
    tok = train_tokenizer([verse * 40] * 3, cfg)
    learned = [tok.decode([i]) for t, i in tok.get_vocab().items() if not t.startswith("<|")]
    assert max(len(t) for t in learned) == 8  # tokens grow up to the piece length and never across a cut
    assert tok.decode(tok.encode(verse * 40).ids) == verse * 40
