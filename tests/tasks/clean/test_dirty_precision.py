"""Precision of the dirty rule on real clean text: words inside longer words, single mentions, courtesy phrases,
and a classifier whose threshold comes from its own cross-validation."""
import csv
import json

import pytest

from pretrain.config import CleanConfig, DirtySettings
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.normalize import normalize_text
from tasks.clean.rules.base import Doc
from tasks.clean.rules.dirty import DirtyRule, Lexicon, PatternSet, builtin_paths, read_list
from tasks.clean.spam_model import CrossValidation, channel_models, choose_scope, choose_threshold, choose_veto
from tasks.clean.stage import run_clean
from tests.conftest import CORPORA, need_shared


def judge(rule: DirtyRule, text: str):
    text, _ = normalize_text(text)
    feats = DocFeatures(text)
    return rule.evaluate(Doc(text, detect_channel(feats), feats))


def test_a_term_inside_a_longer_word_is_not_found():
    """色情 inside 白色情人節 (White Day), 赌场 inside 赌场景: straddling a word of the segmentation is no match."""
    porn_words = need_shared(CORPORA / "lexicons" / "ldnoobw" / "zh")
    lex = Lexicon.from_paths([str(porn_words)], word_aware=True)
    plain = Lexicon.from_paths([str(porn_words)], word_aware=False)
    white_day = "白色情人節那天，他送了她一盒巧克力。"
    assert ("色情", 1.0) in plain.hits(white_day)  # what substring matching did
    assert "色情" not in [t for t, _ in lex.hits(white_day)]
    assert "色情" in [t for t, _ in lex.hits("举报色情网站和色情广告")]  # a word of its own, or a word that holds it
    assert Lexicon({"贷款": 1.0}, word_aware=True).hits("申请小额贷款") == [("贷款", 1.0)]


def test_one_term_never_rejects_however_often_it_is_repeated():
    rule = DirtyRule(DirtySettings())
    film = "电影《赌城风云》讲述了赌场经理的故事。赌场里的灯光和赌场外的雨夜形成对比。"
    assert judge(rule, film).failure is None  # 赌场 x3, one term
    microcredit = ("本文研究农村小额贷款对家庭收入的影响。我们用三省农户调查数据估计贷款的效果，发现贷款使收入提高了百分之八。"
                   "贷款的作用在低收入家庭中更大。")
    assert judge(rule, microcredit).failure is None
    advert = "澳门赌场真人荷官在线发牌，百家乐全天开放，首存送彩金！"
    assert judge(rule, advert).failure.reason == "dirty_content"


def test_owner_replies_in_real_hotel_reviews_are_not_adverts():
    """"期待您的光临" in a hotel's reply to a review is courtesy, not advertising (the rule before this change removed 30 of
    41). Tune rows only (even rows): the odd ones are the benchmark's held-out half."""
    with open(need_shared(CORPORA / "zh" / "ChnSentiCorp_htl_all.csv"), encoding="utf-8") as f:
        replies = [r["review"] for r in list(csv.DictReader(f))[0::2] if "期待您的" in r["review"] and "光临" in r["review"]]
    assert len(replies) == 41
    rule = DirtyRule(DirtySettings())
    removed = [t for t in replies if judge(rule, t).failure is not None]
    assert removed == []


def news_article(row: int) -> str:
    """A row of the shared cnews set (even rows are the benchmark's tune half, the only ones tests may use)."""
    assert row % 2 == 0
    lines = need_shared(CORPORA / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()
    return lines[row].split("\t", 1)[1]


def test_the_contact_details_of_a_press_release_are_one_hit(tmp_path):
    """Two real news articles (tune rows of cnews) list several phone numbers and a QQ number: one way to reach the
    sender. Counted one hit a number, they were removed; as the 'contact' group, they are kept. A spam SMS with a
    solicitation beside its number is still removed. (At the Chinese density the rule had then, 8 per 1000
    characters: at today's 20 neither article comes near it, whichever way numbers count.)"""
    study_abroad, game_quiz = news_article(72), news_article(128)
    assert "15911134466" in study_abroad and "QQ：569803881" in game_quiz
    rule = DirtyRule(DirtySettings(min_score_per_kchar_zh=8))
    ungrouped = tmp_path / "ungrouped.patterns.txt"
    ungrouped.write_text("\n".join(line.removesuffix("\tcontact") for path in builtin_paths(".patterns.txt")
                                   for line in read_list(path)), encoding="utf-8")
    one_a_number = DirtyRule(DirtySettings(min_score_per_kchar_zh=8))
    one_a_number.patterns = PatternSet.from_paths([str(ungrouped)])
    for article in (study_abroad, game_quiz):
        assert [hit for hit, _ in rule.patterns.hits(article)] == ["<contact>"]
        assert judge(rule, article).failure is None
        assert judge(one_a_number, article).failure.reason == "dirty_content"
    with open(need_shared(CORPORA / "dirty" / "zh_sms_labeled.tsv"), encoding="utf-8") as f:
        excavators = next(text for label, text in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
                          if label == "1" and text.startswith("你好，我叫薄冰"))
    assert judge(rule, excavators).failure.reason == "dirty_content"
    assert judge(DirtyRule(DirtySettings()), excavators).failure.reason == "dirty_content"


def test_the_sums_of_a_business_report_are_one_hit(tmp_path):
    """A results report names a dozen sums in pounds. Counted one hit a sum, the BBC business and film reports of the
    genre benchmark's tune half were removed (3 of 1,113); as the 'price' group they are kept. A prize SMS (a tune
    row) is still removed: its premium number is evidence of its own."""
    report = ("Quarterly profits at the retailer rose to £198m from £130m a year earlier, as sales grew 6% to £2.89bn. "
              "The group beat its savings target, delivering £234m of cuts against the £220m it had aimed for, and "
              "cut its debt to £160m from £610m. It plans a further £105m of savings next year but expects an £80m "
              "charge for moving its head office. Analysts had forecast profits of about £185m. Shares rose 4p to "
              "312p in early trading, and the board raised the final dividend, saying the year had begun well and "
              "that it expected further gradual improvement in the second quarter.")
    rule = DirtyRule(DirtySettings())
    assert [hit for hit, _ in rule.patterns.hits(report)] == ["<price>"]
    assert judge(rule, report).failure is None
    ungrouped = tmp_path / "ungrouped.patterns.txt"
    ungrouped.write_text("\n".join(line.removesuffix("\tprice") for path in builtin_paths(".patterns.txt")
                                   for line in read_list(path)), encoding="utf-8")
    one_a_sum = DirtyRule(DirtySettings())
    one_a_sum.patterns = PatternSet.from_paths([str(ungrouped)])
    assert judge(one_a_sum, report).failure.reason == "dirty_content"
    with open(need_shared(CORPORA / "dirty" / "en_sms_spam_collection.tsv"), encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    label, prize = rows[188]
    assert label == "spam" and "guaranteed £1000 cash or £5000 prize" in prize
    assert judge(rule, prize).failure.reason == "dirty_content"


def test_chinese_text_needs_the_chinese_density_and_english_text_the_english_one():
    """A Chinese character says about what three English letters say, so the same offers make a Chinese text about
    three times as dense. A real market report about discounts (cnews tune row) reaches 8 per 1000 characters, not
    20; a real sale round-up (满500送50, 10送4, 88折) reaches both. An English SMS advert (a tune row) at 19 per 1000
    characters is still removed: the English threshold stays 8."""
    report, sale = news_article(402), news_article(486)
    assert "打出超低折扣" in report and "满500送50" in sale
    rule = DirtyRule(DirtySettings())
    assert judge(rule, report).failure is None
    assert judge(DirtyRule(DirtySettings(min_score_per_kchar_zh=8)), report).failure.reason == "dirty_content"
    assert judge(rule, sale).failure.reason == "dirty_content"
    with open(need_shared(CORPORA / "dirty" / "en_sms_spam_collection.tsv"), encoding="utf-8") as f:
        rows = list(csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[1:]
    label, orange = rows[1378]
    assert label == "spam" and orange.startswith("Double Mins & Double Txt")
    assert judge(rule, orange).failure.reason == "dirty_content"
    assert judge(DirtyRule(DirtySettings(min_score_per_kchar=20)), orange).failure is None


def test_a_pattern_line_with_a_bad_weight_or_too_many_fields_names_the_fix(tmp_path):
    bad = tmp_path / "mine.patterns.txt"
    bad.write_text("\\d{11}\tone\n", encoding="utf-8")
    with pytest.raises(ValueError, match="is not a number; write regex<TAB>weight<TAB>group"):
        PatternSet.from_paths([str(bad)])
    bad.write_text("\\d{11}\t1\tcontact\textra\n", encoding="utf-8")
    with pytest.raises(ValueError, match="4 tab-separated fields"):
        PatternSet.from_paths([str(bad)])


def test_the_threshold_is_the_lowest_that_keeps_out_of_fold_ham_within_the_rate():
    labels = [False] * 200 + [True] * 20
    scores = [i / 1000 for i in range(200)] + [0.5] * 19 + [None]  # the best ham is 0.199; one spam unjudged
    cv = choose_threshold(labels, scores, max_ham_rate=0.01, folds=5)
    assert cv.threshold == 0.197  # two ham (1%) may be above it: 0.198 and 0.199
    assert cv.ham_rate == 0.01 and cv.spam_recall == 19 / 20


def sms_examples(tmp_path, ham: list[str] = ()):
    """Tune rows only (even rows: the odd ones are the benchmark's held-out half): every other tune row of the
    shared zh SMS as classifier examples, with any further ham; the other tune rows, to judge."""
    with open(need_shared(CORPORA / "dirty" / "zh_sms_labeled.tsv"), encoding="utf-8", errors="replace") as f:
        zh = [(r[0] == "1", r[1]) for r in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE) if len(r) == 2]
    tune = zh[0::2]
    path = tmp_path / "examples.tsv"
    rows = tune[0::2] + [(False, t) for t in ham]
    path.write_text("".join(f"{int(s)}\t{' '.join(t.split())}\n" for s, t in rows), encoding="utf-8")
    return path, tune[1::2]


def test_cross_validation_runs_when_the_stage_starts_and_the_manifest_records_it(tmp_path):
    examples, judged = sms_examples(tmp_path)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for _, t in judged[:200]),
                      encoding="utf-8")
    cfg = CleanConfig.model_validate({"sources": [{"path": str(corpus)}],
                                      "rules": {"dirty": {"classifier_examples": [str(examples)]}}})
    m = run_clean(cfg, tmp_path / "clean")
    zh_cv = m["classifier"]["zh"]
    assert zh_cv["folds"] == 5 and (zh_cv["spam"], zh_cv["ham"]) == (31, 242)  # every other tune row
    assert 0 < zh_cv["threshold"] < 1 and zh_cv["ham_rate"] <= 0.005 and zh_cv["spam_recall"] > 0.3
    assert zh_cv["judges_up_to_chars"] > 100
    assert zh_cv["scope"] in ("evidence", "all") and set(zh_cv["recall_by_scope"]) == {"evidence", "all"}
    assert zh_cv["spam_recall"] == max(zh_cv["recall_by_scope"].values())
    assert 0 < zh_cv["veto_threshold"] <= zh_cv["threshold"] and zh_cv["veto_spam_lost"] <= 0.01


def test_the_classifier_never_judges_a_long_page_and_judges_text_without_evidence_only_in_scope_all(tmp_path):
    examples, _ = sms_examples(tmp_path)
    narrow = DirtyRule(DirtySettings(classifier_examples=[str(examples)], classifier_scope="evidence"))
    wide = DirtyRule(DirtySettings(classifier_examples=[str(examples)], classifier_scope="all"))
    assert (narrow.classifiers["zh"].cv.scope, wide.classifiers["zh"].cv.scope) == ("evidence", "all")
    news = [line.split("\t", 1)[1] for line in
            need_shared(CORPORA / "zh" / "cnews.val.txt").read_text(encoding="utf-8").splitlines()]
    long_article = next(t for t in news if len(t) > narrow.classifiers["zh"].judges_up_to_chars and narrow.hits(t))
    short_clean = next(t for t in news if len(t) < 300 and not narrow.hits(t))
    assert "dirty.classifier" not in judge(narrow, long_article).scores
    assert "dirty.classifier" not in judge(wide, long_article).scores
    assert "dirty.classifier" not in judge(narrow, short_clean).scores
    assert "dirty.classifier" in judge(wide, short_clean).scores


def test_spam_without_a_listed_term_is_caught_only_when_the_classifier_judges_every_text(tmp_path):
    """English tune rows (even rows of the shared SMS collection): the model learns from every other one; of the
    other tune rows' spam, 17 hold no listed term when written, and the model caught 10 of them in scope 'all'."""
    from tests.tasks.clean.test_spam_model import sms_rows

    tune = sms_rows()[1][0::2]
    examples = tmp_path / "en.tsv"
    examples.write_text("".join(f"{int(s)}\t{' '.join(t.split())}\n" for s, t in tune[0::2]), encoding="utf-8")
    settings = {"classifier_examples": [str(examples)], "min_score": 1e9}  # the classifier alone
    narrow = DirtyRule(DirtySettings(**settings, classifier_scope="evidence"))
    wide = DirtyRule(DirtySettings(**settings, classifier_scope="all"))
    unlisted = [t for s, t in tune[1::2] if s and not narrow.hits(normalize_text(t)[0])]
    assert len(unlisted) >= 10  # spam that words around every listed term
    assert not any(judge(narrow, t).failure for t in unlisted)
    assert sum(judge(wide, t).failure is not None for t in unlisted) >= len(unlisted) // 2


def test_the_scope_is_the_one_that_removes_more_spam_out_of_fold():
    labels = [False] * 200 + [True] * 20
    scores = [i / 1000 for i in range(200)] + [0.5] * 20
    # half the spam holds no listed term: judged only in scope 'all'
    evidence = [True] * 200 + [True] * 10 + [False] * 10
    cv = choose_scope(labels, scores, evidence, max_ham_rate=0.01, folds=5)
    assert (cv.scope, cv.spam_recall, cv.recall_by_scope) == ("all", 1.0, {"evidence": 0.5, "all": 1.0})
    assert cv.spam_with_evidence == 0.5  # all that scope 'evidence' could ever remove
    assert choose_scope(labels, scores, evidence, 0.01, 5, scope="evidence").spam_recall == 0.5
    # ham without evidence that looks like spam: judging it costs the threshold more than it gains
    scores = [0.9] * 20 + [i / 1000 for i in range(180)] + [0.5] * 20
    evidence = [False] * 20 + [True] * 180 + [True] * 18 + [False] * 2
    cv = choose_scope(labels, scores, evidence, max_ham_rate=0.01, folds=5)
    assert (cv.scope, cv.spam_recall, cv.recall_by_scope) == ("evidence", 0.9, {"evidence": 0.9, "all": 0.0})
    # a tie keeps the narrower scope
    assert choose_scope(labels, scores, [True] * 220, 0.01, 5).scope == "evidence"


def test_the_veto_threshold_keeps_the_ham_it_may_and_gives_up_no_spam_for_nothing():
    labels = [False] * 100 + [True] * 400
    scores = [i / 100 for i in range(100)] + [0.05, 0.1, 0.2, 0.3] + [0.95] * 396
    rejected = [i % 10 == 0 for i in range(100)] + [True] * 400  # the lists reject 10 ham and every spam
    cv = CrossValidation(threshold=0.9, spam_recall=0.99, ham_rate=0.01, spam=400, ham=100, folds=5)
    choose_veto(cv, labels, scores, rejected, max_spam_loss=0.005)  # 2 of 400 spam may be overruled: bound 0.2
    assert cv.veto_threshold == 0.15  # midway between the ham it keeps (0, 0.1) and the next spam (0.2)
    assert (cv.veto_spam_lost, cv.veto_ham_kept) == (2 / 400, 2 / 100)
    choose_veto(cv, labels, scores, rejected, max_spam_loss=0.0)
    assert cv.veto_threshold == 0.025 and cv.veto_spam_lost == 0 and cv.veto_ham_kept == 1 / 100
    # never above the model's own threshold: what scores above it is removed whatever the lists say
    choose_veto(cv, labels, scores, rejected, max_spam_loss=0.5)
    assert cv.veto_threshold == 0.875 and cv.veto_ham_kept == 9 / 100
    # a budget that would overrule spam up to 0.3 but keeps no ham above 0.1: the veto stops below the spam at 0.2
    rejected = [i in (0, 10) for i in range(100)] + [True] * 400
    choose_veto(cv, labels, scores, rejected, max_spam_loss=0.0075)  # 3 of 400: bound 0.3
    assert cv.veto_threshold == 0.15 and cv.veto_spam_lost == 2 / 400
    # no ham the lists reject under the bound: nothing to keep, no veto
    choose_veto(cv, labels, scores, [False] * 100 + [True] * 400, max_spam_loss=0.005)
    assert (cv.veto_threshold, cv.veto_spam_lost, cv.veto_ham_kept) == (0.0, 0.0, 0.0)


def test_the_classifier_overrules_the_lists_on_text_like_its_ham_and_loses_no_spam(tmp_path):
    """Ham examples from the genre a user trains on (1,500 tune rows of the hotel reviews, beside the SMS), judged
    on the other tune rows: a review the lists reject (free drinks, 送100元代金券, when written: 1 of the 548 the
    lists hit) is kept by the veto; no spam SMS is."""
    with open(need_shared(CORPORA / "zh" / "ChnSentiCorp_htl_all.csv"), encoding="utf-8") as f:
        reviews = [r["review"] for r in csv.DictReader(f)]
    tune_reviews = reviews[0::2]
    examples, judged = sms_examples(tmp_path, ham=tune_reviews[0::2][:1500])
    rule = DirtyRule(DirtySettings(classifier_examples=[str(examples)]))
    cv = rule.classifiers["zh"].cv
    assert 0 < cv.veto_threshold <= cv.threshold and cv.veto_spam_lost == 0  # 31 spam examples: none may be lost
    held = [(False, t) for t in tune_reviews[1::2] if rule.hits(t)] + judged  # a review without a hit is no question
    outcomes = [(s, t, judge(rule, t)) for s, t in held]
    overruled = [(s, t, o) for s, t, o in outcomes if "dirty.overruled" in o.scores]
    assert overruled and not any(s for s, _, _ in overruled)  # no spam kept by the veto
    for _, t, outcome in overruled:
        text = normalize_text(t)[0]
        assert outcome.failure is None
        assert not rule.lists_verdict(rule.hits(text), DocFeatures(text).n_chars, "zh")[-1]  # the lists reject it


def test_channel_models_need_enough_of_both_labels():
    rows = [(True, f"中奖啦快来领取第{i}号大奖") for i in range(19)] + [(False, f"明天{i}点开会别迟到") for i in range(40)]
    assert channel_models(rows) == {}  # 19 spam cannot be cross-validated into a threshold
    with pytest.raises(ValueError, match="both spam and ham"):
        from tasks.clean.spam_model import SpamModel
        SpamModel([(False, "只有正常短信")] * 30)


def test_unsubscribing_is_news_and_only_the_sms_footer_is_an_advert():
    """退订 alone is also a report of a campaign to unsubscribe from paper statements (a cnews article of the tune
    half was removed for it, with its prize winners); the advert's evidence is the SMS footer, reply T or TD to
    unsubscribe, however it is written."""
    report = ("本报讯 某基金公司日前公布了“退订纸质账单”活动第二期的中奖客户名单，奖品将于近日寄出。据该公司负责人介绍，活动"
              "开展两个多月以来，得到了基金持有人的积极响应，已有四千多名客户主动退订了纸质对账单，改为每月接收一期电子对账单，"
              "既节约了纸张，也让客户更及时地了解自己的账户。")
    rule = DirtyRule(DirtySettings())
    assert judge(rule, report).failure is None
    for footer in ("回T退订", "回TD退订", "回复TD退订", "回复 N 退订"):
        advert = f"【某某商城】周年庆全场5折起，满300减100，先到先得！{footer}"
        assert judge(rule, advert).failure.reason == "dirty_content", footer
        assert any(hit.startswith("回") for hit, _ in rule.patterns.hits(advert)), footer
