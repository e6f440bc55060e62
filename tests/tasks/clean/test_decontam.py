"""Decontamination with planted leaks: real news items as eval sets, embedded re-typeset in real articles."""
import csv
import json

import pyarrow.dataset as ds
import pytest

from pretrain.config import CleanConfig, DecontamSettings, EvalSet
from tasks.clean.eval_sets import load_eval_ngrams, tokens, window_for, window_hashes
from tasks.clean.stage import run_clean
from tests.conftest import CORPORA, need_shared

OTHER_RULES_OFF = {name: {"mode": "off"} for name in ("length", "garbage", "dirty", "gopher_quality", "gopher_repetition",
                                                      "c4", "fineweb", "chinese", "code")}


@pytest.fixture(scope="module")
def real():
    with open(need_shared(CORPORA / "en" / "ag_news_test.csv"), encoding="utf-8") as f:
        ag = [row for row in csv.reader(f) if len(row) == 3]
    news = [line.split("\t", 1)[1] for line in
            (CORPORA / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()[:60]]
    return ag, news


def write_eval_sets(folder, ag, news):
    """An lm-eval-like JSONL (query, choices, gold) and a CSV of Chinese reading questions."""
    folder.mkdir()
    with open(folder / "agnews_eval.jsonl", "w", encoding="utf-8") as f:
        for cls, title, desc in ag[:30]:
            f.write(json.dumps({"query": desc, "choices": ["World", "Sports", "Business", "Sci/Tech"],
                                "gold": int(cls) - 1, "doc_id": title}) + "\n")
    with open(folder / "cnews_eval.csv", "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["question", "answer"])
        for article in news[:20]:
            writer.writerow([article[100:220], "A"])
    (folder / "unplanted.txt").write_text("\n".join(desc for _, _, desc in ag[7000:7010]), encoding="utf-8")
    return [EvalSet(name="agnews", path=str(folder / "agnews_eval.jsonl"), fields=["query", "choices"]),
            EvalSet(name="cnews", path=str(folder / "cnews_eval.csv"), fields=["question"]),
            EvalSet(name="unplanted", path=str(folder / "unplanted.txt"))]


def training_docs(ag, news) -> dict[str, str]:
    leaked = ag[3][2]
    words = leaked.split()
    retyped = leaked.upper().replace(" ", "  ").replace(",", " ;").replace("'", "\u2019")
    zh_leak = news[5][100:220].replace("，", ", ").replace("。", ". ")
    return {
        "en-clean": " ".join(desc for _, _, desc in ag[100:110]),
        "en-leak": " ".join(desc for _, _, desc in ag[200:204]) + " " + retyped + " " + ag[205][2],
        "en-12-words": ag[300][2] + " " + " ".join(words[:12]) + " and then something else entirely. " + ag[301][2],
        "zh-clean": news[40],
        "zh-leak": news[41][:300] + zh_leak[:60] + news[42][:300],
        "zh-12-chars": news[43][:300] + "".join(c for c in news[6][100:200] if "\u4e00" <= c <= "\u9fff")[:12]
        + news[44][:300],
    }


def test_windows_ignore_case_width_and_punctuation():
    assert tokens("The ＦＥＤ raised rates, again!") == ["the", "fed", "raised", "rates", "again"]
    assert tokens("央行再次加息，幅度0.25%") == ["央", "行", "再", "次", "加", "息", "幅", "度", "0", "25"]
    a = window_hashes(tokens("One two three four five six"), 5)
    b = window_hashes(tokens("ONE, two; three -- four five six."), 5)
    assert len(a) == 2 and (a == b).all()
    assert len(window_hashes(tokens("too short"), 5)) == 0


def test_planted_leaks_are_removed_and_reported_per_eval_set(real, tmp_path):
    ag, news = real
    sets = write_eval_sets(tmp_path / "eval", ag, news)
    docs = training_docs(ag, news)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in docs.items()),
                      encoding="utf-8")
    rules = {**OTHER_RULES_OFF, "decontam": {"eval_sets": [s.model_dump() for s in sets]}}
    cfg = CleanConfig.model_validate({"sources": [{"path": str(corpus), "id_field": "id"}], "rules": rules,
                                      "dedup": {"near": False}})
    m = run_clean(cfg, tmp_path / "clean")
    rejects = {r["id"]: r["reason"] for r in ds.dataset(tmp_path / "clean" / "rejects").to_table().to_pylist()}
    assert rejects == {"en-leak": "eval_overlap_agnews", "zh-leak": "eval_overlap_cnews"}
    assert m["docs_in"] == 6 and m["kept"] == 4
    report = m["decontamination"]
    assert report["agnews"]["rejected_docs"] == report["cnews"]["rejected_docs"] == 1
    assert report["unplanted"]["rejected_docs"] == 0 and report["unplanted"]["items"] == 10
    assert report["agnews"]["items"] == 30 and report["cnews"]["items"] == 20
    assert report["agnews"]["window"] == report["cnews"]["window"] == 13  # sets of long items: the longest window
    assert m["rejected_by_reason"] == {"eval_overlap_agnews": 1, "eval_overlap_cnews": 1}


def test_tag_mode_keeps_the_leak_and_flags_it(real, tmp_path):
    ag, news = real
    sets = write_eval_sets(tmp_path / "eval", ag, news)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"id": "en-leak", "text": training_docs(ag, news)["en-leak"]}) + "\n")
    rules = {**OTHER_RULES_OFF, "decontam": {"mode": "tag", "eval_sets": [s.model_dump() for s in sets]}}
    m = run_clean(CleanConfig.model_validate({"sources": [{"path": str(corpus), "id_field": "id"}], "rules": rules}),
                  tmp_path / "clean")
    [kept] = ds.dataset(tmp_path / "clean" / "kept").to_table().to_pylist()
    assert kept["flags"] == ["decontam:eval_overlap_agnews"]
    assert m["decontamination"]["agnews"]["tagged_docs"] == 1


def test_a_changed_eval_set_cleans_again(real, tmp_path):
    """Shards judged against the old eval data must not be reused once it changes."""
    ag, news = real
    folder = tmp_path / "eval"
    folder.mkdir()
    eval_file = folder / "set.jsonl"
    eval_file.write_text(json.dumps({"text": ag[50][2]}) + "\n")
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": ag[40][2] + " " + ag[41][2] + " " + ag[60][2]}) + "\n")
    rules = {**OTHER_RULES_OFF, "decontam": {"eval_sets": [{"name": "s", "path": str(eval_file)}]}}
    cfg = CleanConfig.model_validate({"sources": [{"path": str(corpus)}], "rules": rules})
    assert run_clean(cfg, tmp_path / "clean")["kept"] == 1
    eval_file.write_text(json.dumps({"text": ag[60][2]}) + "\n")
    m = run_clean(cfg, tmp_path / "clean")
    assert m["kept"] == 0 and m["shards_skipped"] == 0 and m["decontamination"]["s"]["rejected_docs"] == 1


def test_an_eval_set_that_names_nothing_is_an_error_naming_the_setting(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"no records read .* fix clean.rules.decontam.eval_sets"):
        load_eval_ngrams(EvalSet(name="e", path=str(empty)), DecontamSettings().ngram)


def test_a_leak_is_found_across_traditional_and_simplified_script(real, tmp_path):
    """A benchmark published in Traditional script leaks into a Simplified corpus, and the other way round; the
    clean stage's own conversion (normalize.traditional_to_simplified) is off here, so only decontamination's
    character-by-character t2s can see it."""
    from opencc import OpenCC

    _, news = real
    s2t = OpenCC("s2t").convert
    leak_a, leak_b = news[8][100:220], news[9][100:220]
    assert s2t(leak_a) != leak_a and s2t(leak_b) != leak_b  # the scripts really differ on these passages
    folder = tmp_path / "eval"
    folder.mkdir()
    (folder / "traditional.jsonl").write_text(json.dumps({"q": s2t(leak_a)}, ensure_ascii=False) + "\n", encoding="utf-8")
    (folder / "simplified.jsonl").write_text(json.dumps({"q": leak_b}, ensure_ascii=False) + "\n", encoding="utf-8")
    docs = {"simplified-doc": news[50][:300] + leak_a[20:90] + news[51][:300],
            "traditional-doc": s2t(news[52][:300] + leak_b[10:80] + news[53][:300]),
            "clean-doc": s2t(news[54][:400])}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}, ensure_ascii=False) + "\n" for k, v in docs.items()),
                      encoding="utf-8")
    sets = [{"name": "trad", "path": str(folder / "traditional.jsonl")},
            {"name": "simp", "path": str(folder / "simplified.jsonl")}]
    cfg = CleanConfig.model_validate({"sources": [{"path": str(corpus), "id_field": "id"}], "dedup": {"near": False},
                                      "rules": {**OTHER_RULES_OFF, "decontam": {"eval_sets": sets}}})
    assert cfg.normalize.traditional_to_simplified is False
    run_clean(cfg, tmp_path / "clean")
    rejects = {r["id"]: r["reason"] for r in ds.dataset(tmp_path / "clean" / "rejects").to_table().to_pylist()}
    assert rejects == {"simplified-doc": "eval_overlap_trad", "traditional-doc": "eval_overlap_simp"}


def test_each_eval_set_gets_the_window_gpt3_chose_by_its_item_lengths():
    assert window_for([30] * 97 + [5] * 3, 8, 13) == 13  # long items (3% short ones aside): the longest window
    assert window_for(list(range(9, 29)), 8, 13) == 9  # the 5th-percentile item
    assert window_for([3] * 50 + [20] * 50, 8, 13) == 8  # never shorter than the shortest window
    assert window_for([3] * 50, 13, 13) == 13  # min_ngram == ngram: one fixed window
    with pytest.raises(ValueError, match="min_ngram=14 is longer than ngram=13: set min_ngram to at most ngram"):
        DecontamSettings(min_ngram=14)


def test_a_set_of_short_questions_is_found_with_a_shorter_window(real, tmp_path):
    """AG News titles are lm-eval-sized questions (most under 13 words): a fixed 13-token window cannot find them."""
    ag, _ = real
    titles = [title for _, title, _ in ag[1000:1100] if 8 <= len(tokens(title)) <= 12]
    assert len(titles) >= 20
    (tmp_path / "titles.jsonl").write_text("".join(json.dumps({"q": t}) + "\n" for t in titles), encoding="utf-8")
    leak = titles[7].upper().replace(" ", "  ")
    docs = {"leak": ag[400][2] + " " + leak + ". " + ag[401][2], "clean": ag[402][2] + " " + ag[403][2]}
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": k, "text": v}) + "\n" for k, v in docs.items()), encoding="utf-8")

    def run(decontam: dict, out: str):
        rules = {**OTHER_RULES_OFF, "decontam": {"eval_sets": [{"name": "titles", "path": str(tmp_path / "titles.jsonl")}],
                                                 **decontam}}
        cfg = CleanConfig.model_validate({"sources": [{"path": str(corpus), "id_field": "id"}], "rules": rules,
                                          "dedup": {"near": False}})
        return run_clean(cfg, tmp_path / out)["decontamination"]["titles"]

    fixed = run({"min_ngram": 13}, "fixed")
    assert fixed["window"] == 13 and fixed["items_shorter_than_ngram"] == len(titles) and fixed["rejected_docs"] == 0
    gpt3 = run({}, "gpt3")
    assert gpt3["window"] == 8 and gpt3["items_shorter_than_ngram"] == 0 and gpt3["rejected_docs"] == 1
    rejects = ds.dataset(tmp_path / "gpt3" / "rejects").to_table().to_pylist()
    assert [r["id"] for r in rejects] == ["leak"]


def test_a_set_of_chinese_items_never_gets_a_window_shorter_than_its_own_floor(real, tmp_path):
    """Eight characters spell common names (中华人民共和国, a bank's full name): Chinese sets stop at min_ngram_cjk."""
    _, news = real
    chars = [c for c in ("".join(c for c in article if "\u4e00" <= c <= "\u9fff") for article in news) if len(c) > 70][:30]
    (tmp_path / "short.txt").write_text("\n".join(c[50:59] for c in chars), encoding="utf-8")  # 9 characters each
    (tmp_path / "medium.txt").write_text("\n".join(c[50:62] for c in chars), encoding="utf-8")  # 12 each
    settings = DecontamSettings()
    short = load_eval_ngrams(EvalSet(name="short", path=str(tmp_path / "short.txt")), settings.ngram,
                             settings.min_ngram, settings.min_ngram_cjk)
    assert (short.n, short.short_items, len(short.hashes)) == (11, 30, 0)  # reported, not matched on 9 characters
    medium = load_eval_ngrams(EvalSet(name="medium", path=str(tmp_path / "medium.txt")), settings.ngram,
                              settings.min_ngram, settings.min_ngram_cjk)
    assert (medium.n, medium.short_items) == (12, 0)
