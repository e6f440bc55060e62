"""The corpus sample the classifier's gate learns from: an equal share of each source, spread over its files,
prepared as the rules read it, named by its digest."""
import json

from pretrain.config import CleanConfig
from tasks.clean.reference import MAX_SAMPLE_CHARS, sampled_texts, with_reference
from tasks.clean.resemblance import read_reference


def corpus(tmp_path):
    news = tmp_path / "news"
    news.mkdir()
    for f in range(4):  # four files of 10 articles each
        (news / f"{f}.jsonl").write_text("".join(json.dumps({"text": f"Article {f}-{i}: the council met today and "
                                                               f"voted on the budget for next year."}) + "\n"
                                                   for i in range(10)))
    chat = tmp_path / "chat.jsonl"
    chat.write_text("".join(json.dumps({"text": f"  今天晚上{i}点一起吃饭吧，我在公司楼下等你。  "}, ensure_ascii=False) + "\n"
                            for i in range(30)))
    return [{"path": str(news / "*.jsonl"), "name": "news"}, {"path": str(chat), "name": "chat"}]


def test_each_source_gives_an_equal_share_spread_over_its_files(tmp_path):
    cfg = CleanConfig.model_validate({"sources": corpus(tmp_path)})
    sample = sampled_texts(cfg, 16)
    news = [t for c, t in sample if c == "en"]
    chat = [t for c, t in sample if c == "zh"]
    assert len(news) == 8 and len(chat) == 8
    assert sorted({t.split("-")[0] for t in news}) == ["Article 0", "Article 1", "Article 2", "Article 3"]
    assert chat[0] == "今天晚上0点一起吃饭吧，我在公司楼下等你。"  # normalized as the rules read it


def test_the_stage_draws_a_sample_only_for_a_classifier_and_names_it_by_its_contents(tmp_path):
    sources = corpus(tmp_path)
    plain = CleanConfig.model_validate({"sources": sources})
    assert with_reference(plain, tmp_path) is plain  # no classifier: nothing drawn
    examples = tmp_path / "examples.tsv"
    examples.write_text("1\tWIN a prize\n0\thello\n")
    cfg = CleanConfig.model_validate({"sources": sources, "rules": {"dirty": {
        "classifier_examples": [str(examples)], "classifier_reference_docs": 20}}})
    (tmp_path / "work1").mkdir()
    drawn = with_reference(cfg, tmp_path / "work1")
    path = drawn.rules.dirty.classifier_reference
    assert path.startswith(str(tmp_path / "work1" / "classifier_reference-")) and path.endswith(".jsonl")
    assert len(read_reference(path)) == 20
    (tmp_path / "work2").mkdir()
    again = with_reference(cfg, tmp_path / "work2").rules.dirty.classifier_reference
    assert again.rsplit("/", 1)[1] == path.rsplit("/", 1)[1]  # the same sources give the same sample, same name
    off = cfg.model_copy(update={"rules": cfg.rules.model_copy(update={
        "dirty": cfg.rules.dirty.model_copy(update={"classifier_reference_docs": 0})})})
    assert with_reference(off, tmp_path) is off


def test_a_long_document_is_sampled_up_to_a_bound(tmp_path):
    page = tmp_path / "long.jsonl"
    page.write_text(json.dumps({"text": "The river rose again this spring and the town moved its market. " * 2000}) + "\n")
    [(channel, text)] = sampled_texts(CleanConfig.model_validate({"sources": [{"path": str(page)}]}), 10)
    assert channel == "en" and len(text) == MAX_SAMPLE_CHARS  # 130,000 characters read, 20,000 kept


def test_a_source_with_its_own_rules_is_sampled_with_its_own_edits(tmp_path):
    lines = "Agenda\nThe council met today and voted on the budget for next year.\nMinutes taken by\n"
    for name in ("web", "archive"):
        (tmp_path / f"{name}.jsonl").write_text(json.dumps({"text": lines}) + "\n")
    cfg = CleanConfig.model_validate({"sources": [
        {"path": str(tmp_path / "web.jsonl"), "name": "web"},
        {"path": str(tmp_path / "archive.jsonl"), "name": "archive", "rules": {"c4": {"mode": "tag"}}}]})
    web, archive = (text for _, text in sampled_texts(cfg, 2))
    assert web == "The council met today and voted on the budget for next year."  # C4 removed the other lines
    assert archive == lines.strip()  # as the archive's shards read it: C4 scores, removes nothing
