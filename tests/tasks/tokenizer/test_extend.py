import pytest

from tasks.tokenizer.train import load_tokenizer
from tasks.tokenizer.extend import existing_texts, extend_tokenizer, read_terms, run_extend


def test_terms_become_single_tokens_after_all_existing_ids(prepared_run, tmp_path):
    tok_dir = prepared_run[1] / "tokenizer"
    before = load_tokenizer(tok_dir)
    terms = tmp_path / "terms.txt"
    terms.write_text("# medical terms\n心肌梗死\nacetaminophen\n心肌梗死\n")
    summary = run_extend(tok_dir, terms, tmp_path / "ext")
    after = load_tokenizer(tmp_path / "ext")
    assert summary["added"] == ["心肌梗死", "acetaminophen"]
    assert after.encode("患者心肌梗死后服用acetaminophen", add_special_tokens=False).tokens.count("心肌梗死") == 1
    assert after.token_to_id("心肌梗死") >= before.get_vocab_size()  # appended, no existing id moved
    old = before.get_vocab(with_added_tokens=True)
    assert all(after.token_to_id(t) == i for t, i in old.items())
    assert (tmp_path / "ext" / "tokenizer_config.json").is_file()


def test_term_inside_an_existing_token_is_refused(prepared_run):
    tok = load_tokenizer(prepared_run[1] / "tokenizer")
    texts = existing_texts(tok)
    longer = next(t for t in sorted(texts, key=len, reverse=True) if t.strip().isalpha() and len(t.strip()) >= 5)
    inner = longer.strip()[1:-1]
    _, ext = extend_tokenizer(tok, [inner])
    assert inner in ext.refused and longer in ext.refused[inner]
    assert tok.encode(longer, add_special_tokens=False).ids == [texts[longer]]  # still reachable


def test_empty_terms_file_is_a_clear_error(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("# nothing\n\n")
    with pytest.raises(ValueError, match="holds no terms"):
        read_terms(path)
