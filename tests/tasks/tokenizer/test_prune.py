"""Dirty-token pruning on small tokenizers trained here, with known dirty and clean vocabulary."""
import pytest

from pretrain.config import PruneConfig, TokenizerConfig
from tasks.tokenizer.train import SPECIAL_TOKENS, reserved_names, train_tokenizer
from tasks.tokenizer.prune import merge_children, prune_tokenizer, removal_closure, verify
from tasks.tokenizer.report import byte_decoder, whole_characters

CLEAN = ["The old lighthouse keeper wrote the weather in his logbook every evening.",
         "A good recipe for bread needs flour, water, salt and yeast.",
         "今天天气很好，我们去公园散步，然后在湖边喝茶。",
         "The classic class passed the mass assessment in the classroom."]
DIRTY = ["网上百家乐真人荷官，百家乐首存送彩金，百家乐天天开。", "Play at the casino bonus now, casino bonus for all."]


def trained(extra_docs=(), vocab=420):
    texts = CLEAN * 30 + DIRTY * 10 + list(extra_docs)
    cfg = TokenizerConfig(vocab_size=vocab, reserved_tokens=4, min_frequency=2)
    return train_tokenizer(texts, cfg), texts


def specials():
    return set(SPECIAL_TOKENS) | set(reserved_names(4))


def test_closure_follows_merges():
    children = merge_children([("a", "b"), ("ab", "c"), ("x", "y"), ("abc", "x")])
    assert removal_closure("ab", children) == {"ab", "abc", "abcx"}
    assert removal_closure("y", children) == {"y", "xy"}


def test_dirty_token_removed_and_tokenizer_stays_consistent():
    tok, texts = trained()
    assert "百家乐" in {tok.decode([i]) for i in tok.get_vocab().values()}
    result = prune_tokenizer(tok, CLEAN * 30, PruneConfig(), specials())
    assert "百家乐" in result.removed["dirty_lexicon"]
    pruned = result.tokenizer
    decoded = {pruned.decode([i]) for i in pruned.get_vocab(with_added_tokens=False).values()}
    assert "百家乐" not in decoded
    checks = verify(pruned, texts + ["百家乐 still encodes, byte by byte if it must"])
    assert checks == {"ids_contiguous": True, "roundtrip_failures_after_pruning": 0}
    assert pruned.token_to_id("<|eos|>") == 1 and pruned.token_to_id("<|reserved_3|>") == pruned.get_vocab_size() - 1
    assert pruned.get_vocab_size() == tok.get_vocab_size() - result.summary()["removed_total"]


def test_candidate_used_by_many_clean_documents_is_protected():
    tok, _ = trained()
    cfg = PruneConfig(protect_min_docs=5, min_builtin_weight=1.0)
    unused = prune_tokenizer(tok, CLEAN * 30, cfg, specials())
    assert "百家乐" in unused.removed["dirty_lexicon"]  # a candidate: removed while clean documents do not use it
    news = [f"第{i}期报道：市议会讨论了百家乐赌桌的管理，记者走访了港口边的商户。" for i in range(50)]
    result = prune_tokenizer(tok, CLEAN * 30 + news, cfg, specials())
    assert not any("百家乐" in t for v in result.removed.values() for t in v)
    assert any(p["token"] == "百家乐" and p["documents"] >= 5 for p in result.protected)


def test_word_pieces_are_not_matched_as_latin_words(tmp_path):
    tok, _ = trained(["class pass mass assist assemble"] * 40, vocab=460)
    bad_words = tmp_path / "words.txt"
    bad_words.write_text("ass\n")
    result = prune_tokenizer(tok, CLEAN, PruneConfig(lexicons=[str(bad_words)], protect_min_docs=1000), specials())
    removed = [t for v in result.removed.values() for t in v]
    latin = [t for t in result.removed.get("dirty_lexicon", []) if t.strip().isascii()]
    assert latin == [" ass"]  # the word-initial token only, never the piece inside class / pass / mass
    assert not {" class", "class", "ass", " pass", " mass"} & set(removed)


def test_pruning_reported_by_the_stage(prepared_run):
    from tasks.common.outputs import read_json

    report = read_json(prepared_run[1] / "tokenizer" / "report.json")
    assert report["pruning"]["enabled"] is True
    assert report["pruning"]["ids_contiguous"] is True and report["pruning"]["roundtrip_failures_after_pruning"] == 0
    assert report["total_tokens"] == report["vocab_size"] + report["reserved_tokens"]


@pytest.mark.parametrize("text,reason", [(" www.", "url_fragment"), ("://", None), ("HTTPConnection", None),
                                         (" HTTP", None), (".com", "url_fragment"), ("========", "repeated_character"),
                                         ("    ", None), (" 六合彩", "dirty_lexicon"), ("ass", None)])
def test_candidate_reasons(text, reason):
    from tasks.tokenizer.prune import candidate_reason, pruning_lexicon

    assert candidate_reason(text, pruning_lexicon(PruneConfig()), PruneConfig()) == reason


ZH = ["今天天气很好，我们去公园散步，然后在湖边喝茶。", "城市的公共交通在过去十年里变化很大，地铁线路增加了。",
      "做红烧肉的关键在于火候，小火慢炖一个小时。"]
EN = ["A small boat and a smart smile in a small town.", "The small dog sat by the smoke of the small fire."]


def test_protection_is_judged_per_channel(tmp_path):
    """' small' is built from ' sma': with a list naming 'sma', eight English documents among 1,200 Chinese ones
    cannot protect it by a share of all documents, and do by a share of the English ones."""
    tok = train_tokenizer(ZH * 100 + EN * 40, TokenizerConfig(vocab_size=420, reserved_tokens=4, min_frequency=2))
    assert " small" in {tok.decode([i]) for i in tok.get_vocab().values()}
    words = tmp_path / "words.txt"
    words.write_text("sma\n")
    cfg = PruneConfig(lexicons=[str(words)])
    pooled = prune_tokenizer(tok, ZH * 400 + EN * 4, cfg, specials())
    assert " small" in pooled.removed["built_from_removed_token"]
    per_channel = prune_tokenizer(tok, {"zh": ZH * 400, "en": EN * 4}, cfg, specials())
    assert per_channel.removed == {}
    assert per_channel.protected[0]["token"] == " sma" and per_channel.protected[0]["channel"] == "en"
    assert per_channel.summary()["remaining_list_matches"] == 1  # the protected ' sma' is still a list term
    words.write_text("sm\n")  # two-letter abbreviations (SM, LY on Chinese ad lists) are no pruning terms at all
    assert prune_tokenizer(tok, ZH * 400 + EN * 4, cfg, specials()).removed == {}


def test_everyday_words_on_dirty_lists_stay_and_nothing_dirty_remains(tmp_path):
    """按摩 (massage) and 铃声 (ringtone) are on shared porn/ad lists and in the built-in allow-list; 色情 is not."""
    texts = ["按摩椅和按摩器卖得很好。", "手机铃声太吵了，换个铃声吧。", "举报色情网站，色情内容必须删除。"] * 60
    tok = train_tokenizer(texts + ZH * 30, TokenizerConfig(vocab_size=400, reserved_tokens=4, min_frequency=2))
    vocab = {tok.decode([i]) for i in tok.get_vocab().values()}
    assert {"按摩", "举报色情网站"} <= vocab and any("铃声" in t for t in vocab)
    words = tmp_path / "zh.txt"
    words.write_text("按摩\n铃声\n色情\n")
    result = prune_tokenizer(tok, {"zh": ZH * 10}, PruneConfig(lexicons=[str(words)]), specials())
    left = {result.tokenizer.decode([i]) for i in result.tokenizer.get_vocab().values()}
    assert "举报色情网站" in result.removed["dirty_lexicon"] and not any("色情" in t for t in left)
    assert "按摩" in left and any("铃声" in t for t in left)
    assert result.summary()["remaining_list_matches"] == 0


def test_tokens_that_cut_a_character_are_judged_by_the_characters_they_hold():
    """Byte-level BPE learns pieces such as '色情内' + the first byte of 容: no UTF-8 text, but a dirty term all the
    same; before, pruning skipped every such piece and they stayed in the vocabulary."""
    texts = ["举报色情网站，色情内容必须删除。"] * 60
    tok = train_tokenizer(texts + ZH * 30, TokenizerConfig(vocab_size=400, reserved_tokens=4, min_frequency=2))
    partial = [t for t in (tok.decode([i]) for i in tok.get_vocab().values()) if "色情" in t and "\ufffd" in t]
    assert partial  # this corpus does teach such pieces
    result = prune_tokenizer(tok, {"zh": ZH * 10}, PruneConfig(), specials())
    removed = result.removed["dirty_lexicon"]
    assert any("色情" in t and "\ufffd" in t for t in removed)  # shown with U+FFFD where a character is cut
    left = [result.tokenizer.decode([i]) for i in result.tokenizer.get_vocab().values()]
    assert not any("色情" in t for t in left) and result.summary()["remaining_list_matches"] == 0
    assert verify(result.tokenizer, texts + ZH)["roundtrip_failures_after_pruning"] == 0


def test_whole_characters_sets_the_cut_bytes_aside():
    to_token = {b: c for c, b in byte_decoder().items()}
    piece = lambda raw: "".join(to_token[b] for b in raw)  # noqa: E731
    word = "色情内".encode()
    assert whole_characters(piece(word[:-1])) == "色情\ufffd"
    assert whole_characters(piece("站色情".encode()[2:])) == "\ufffd色情"
    assert whole_characters(piece(word)) == "色情内" and whole_characters("\u2581x") is None  # no byte-level piece
