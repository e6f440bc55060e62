import json

import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pretrain.config import CleanConfig, LengthSettings, SourceConfig, parse_config
from tasks.clean.readers import SourceError
from tasks.clean.stage import run_clean
from tasks.common.outputs import is_complete
from tests.conftest import CORPORA, need_shared, tiny_dict


def test_demo_corpus_accounting_and_filters(tiny_cfg, tmp_path):
    out = tmp_path / "clean"
    m = run_clean(tiny_cfg.clean, out)
    assert m["docs_in"] == m["kept"] + m["rejected"]
    kept = ds.dataset(out / "kept").to_table()
    rejects = ds.dataset(out / "rejects").to_table()
    assert kept.num_rows == m["kept"] and rejects.num_rows == m["rejected"]
    reasons = dict(zip(*[rejects.column(c).to_pylist() for c in ("id", "reason")]))
    assert reasons["zh-dup-1"] == reasons["en-dup-1"] == reasons["en-dup-2"] == "exact_duplicate"
    assert {reasons[i] for i in ("spam-1", "spam-2", "spam-3", "spam-4")} == {"dirty_content"}
    assert reasons["junk-symbols"] == "only_punctuation" or reasons["junk-symbols"].startswith("garbage_")
    assert set(m["kept_by_channel"]) == {"zh", "en", "code"}
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert sum(r["docs"] for r in stats if r["outcome"] != "tagged") == m["docs_in"]
    assert sum(r["chars"] for r in stats if r["outcome"] == "kept") == sum(map(len, kept.column("text").to_pylist()))
    samples = pq.read_table(out / "samples.parquet").to_pylist()
    assert {r["reason"] for r in samples} == set(m["rejected_by_reason"])
    spam = [r for r in rejects.to_pylist() if r["id"] == "spam-1"][0]
    assert spam["rule"] == "dirty" and spam["score"] > 2.0
    assert is_complete(out)


def test_outputs_are_queryable_with_duckdb(tiny_cfg, tmp_path):
    import duckdb

    run_clean(tiny_cfg.clean, tmp_path / "clean")
    rows = duckdb.sql(f"""
        SELECT rule, reason, count(*) AS n FROM read_parquet('{tmp_path}/clean/rejects/*.parquet')
        GROUP BY ALL ORDER BY n DESC, reason""").fetchall()
    assert ("dirty", "dirty_content", 4) in rows


def test_tag_mode_keeps_documents_and_records_scores(tmp_path):
    cfg = parse_config(tiny_dict(tmp_path, clean={"rules": {"dirty": {"mode": "tag"}}})).clean
    m = run_clean(cfg, tmp_path / "clean")
    assert "dirty_content" not in m["rejected_by_reason"] and m["tagged_by_reason"]["dirty_content"] == 4
    kept = ds.dataset(tmp_path / "clean" / "kept").to_table().to_pylist()
    spam = [r for r in kept if r["id"] == "spam-1"][0]
    assert spam["flags"] == ["dirty:dirty_content"]
    assert dict(spam["scores"])["dirty.score"] > 2.0


def test_traditional_to_simplified_and_mojibake_repair(tmp_path):
    src = tmp_path / "in.jsonl"

    zh_trad = "這個城市的公共交通在過去十年裡變化很大。地鐵線路從兩條增加到了十幾條，公車也大多換成了電動車，很多人不再開車上班。"
    en_moji = ("The cafÃ© on the corner serves the best coffee in town, and the owner remembers what each regular "
               "likes to drink. On weekends the queue stretches out of the door and along the street. People wait "
               "patiently because the pastries are baked fresh every morning. It is a small place with a big heart.")
    src.write_text("\n".join(json.dumps({"text": t}, ensure_ascii=False) for t in (zh_trad, en_moji)) + "\n")
    cfg = parse_config(tiny_dict(tmp_path, clean={"sources": [{"path": str(src)}],
                                                  "normalize": {"traditional_to_simplified": True}})).clean
    m = run_clean(cfg, tmp_path / "clean")
    kept = {r["channel"]: r for r in ds.dataset(tmp_path / "clean" / "kept").to_table().to_pylist()}
    assert kept["zh"]["text"].startswith("这个城市的公共交通在过去十年里")
    assert "café" in kept["en"]["text"] and "mojibake" in kept["en"]["repairs"]
    assert m["repairs"] == {"traditional_to_simplified": 1, "mojibake": 1}


GOOD = ("The lighthouse keeper climbed the spiral stairs every evening at dusk. He wound the clockwork that turned "
        "the great lens and trimmed the wick. He wrote the weather in a leather logbook with care. Ships passing the "
        "rocky point relied on that steady beam to find the channel. In winter the storms were long and the nights "
        "were cold, but the light never failed the fishermen of the bay.")
GOOD_LINE = ('{"text": "%s"}\n' % GOOD).encode()


def test_bad_records_are_rejected_not_lost(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(GOOD_LINE + b'{"nope": 1}\n{broken\n')
    m = run_clean(CleanConfig(sources=[SourceConfig(path=str(src))]), tmp_path / "clean")
    assert m["docs_in"] == 3 and m["kept"] == 1
    assert m["rejected_by_reason"] == {"missing_text_field": 1, "invalid_json": 1}
    assert m["rejected_by_rule"] == {"input": 2}


def test_missing_source_writes_nothing(tmp_path):
    cfg = CleanConfig(sources=[SourceConfig(path=str(tmp_path / "absent.jsonl"))])
    with pytest.raises(SourceError):
        run_clean(cfg, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()
    assert not list(tmp_path.glob("clean.tmp-*"))


def test_unreadable_file_is_reported_by_name(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "good.jsonl").write_bytes(GOOD_LINE)
    (tmp_path / "in" / "bad.jsonl.gz").write_bytes(b"this is not gzip")
    m = run_clean(CleanConfig(sources=[SourceConfig(path=str(tmp_path / "in"))]), tmp_path / "clean")
    assert [u["path"].rsplit("/", 1)[-1] for u in m["unreadable_files"]] == ["bad.jsonl.gz"]
    assert m["kept"] == 1  # the good file in the same shard is unaffected


def test_small_files_are_grouped_into_shards(tmp_path):
    from tasks.clean.shards import plan_shards

    (tmp_path / "in").mkdir()
    for k in range(10):
        (tmp_path / "in" / f"{k:02d}.jsonl").write_bytes(GOOD_LINE * 100)  # about 40 KB each
    size = (tmp_path / "in" / "00.jsonl").stat().st_size
    specs = plan_shards(CleanConfig(sources=[SourceConfig(path=str(tmp_path / "in"))], shard_max_mb=3.5 * size / 1e6))
    assert [len(s.paths) for s in specs] == [3, 3, 3, 1]
    assert [p for s in specs for p in s.paths] == sorted(str(p) for p in (tmp_path / "in").iterdir())


def test_crash_mid_stage_leaves_no_complete_output(tmp_path, monkeypatch):
    src = tmp_path / "in.jsonl"
    src.write_bytes(GOOD_LINE)
    import tasks.clean.stage as stage

    monkeypatch.setattr(stage, "write_json", lambda *a: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises(OSError, match="disk full"):
        run_clean(CleanConfig(sources=[SourceConfig(path=str(src))]), tmp_path / "clean")
    assert not (tmp_path / "clean").exists()


def test_real_spam_corpus_with_user_lexicon(tmp_path):
    """Real trec06c mail with a real ads lexicon: spam is flagged far more often than ham."""
    spam = need_shared(CORPORA / "dirty" / "zh_trec06c_spam.txt")
    ham = need_shared(CORPORA / "dirty" / "zh_trec06c_ham.txt")
    ads = need_shared(CORPORA / "lexicons" / "sensitive-lexicon" / "ads.txt")
    cfg = parse_config(tiny_dict(tmp_path, clean={"sources": [
        {"path": str(spam), "text_unit": "line", "name": "spam"},
        {"path": str(ham), "text_unit": "line", "name": "ham"}],
        "rules": {"length": {"min_chars": 10}, "dirty": {"lexicons": [str(ads)]}}}))
    m = run_clean(cfg.clean, tmp_path / "clean")
    assert m["docs_in"] == m["kept"] + m["rejected"] == 200
    rejects = ds.dataset(tmp_path / "clean" / "rejects").to_table().to_pylist()
    unique = {s: m["docs_by_source"][s] - sum(1 for r in rejects if r["source"] == s and r["reason"] == "exact_duplicate")
              for s in ("spam", "ham")}
    dirty = {s: sum(1 for r in rejects if r["source"] == s and r["reason"] == "dirty_content") for s in ("spam", "ham")}
    assert dirty["spam"] / unique["spam"] > 4 * dirty["ham"] / unique["ham"]


def test_interrupted_run_resumes_without_redoing_finished_shards(tmp_path, monkeypatch):
    import tasks.clean.shards as shards
    from tasks.clean import stage

    (tmp_path / "in").mkdir()
    for k in range(3):
        (tmp_path / "in" / f"{k}.jsonl").write_bytes(GOOD_LINE.replace(b"dusk", f"dusk {k}".encode()))
    # near-identical on purpose: dedup off, this is about resuming
    cfg = CleanConfig(sources=[SourceConfig(path=str(tmp_path / "in"))], executor={"workers": 1},
                      dedup={"exact": False, "near": False}, shard_max_mb=1e-6)  # a shard per file
    real = shards.clean_shard
    calls = []

    def crash_on_third(cfg, spec, work_dir):
        calls.append(spec.shard_id)
        if spec.index == 2:
            raise KeyboardInterrupt("node lost")
        return real(cfg, spec, work_dir)

    monkeypatch.setattr(stage, "clean_shard", crash_on_third)
    with pytest.raises(KeyboardInterrupt):
        run_clean(cfg, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()
    assert sorted(p.name for p in (tmp_path / "clean.shards").iterdir()) == ["000000", "000001"]

    monkeypatch.setattr(stage, "clean_shard", real)
    m = run_clean(cfg, tmp_path / "clean")
    assert m["shards"] == 3 and m["shards_skipped"] == 2 and m["kept"] == 3
    assert not (tmp_path / "clean.shards").exists()  # scratch removed once the output is complete


def test_changed_input_is_not_skipped(tmp_path):
    from tasks.clean.shards import clean_shard, plan_shards

    src = tmp_path / "a.jsonl"
    src.write_bytes(GOOD_LINE)
    cfg = CleanConfig(sources=[SourceConfig(path=str(src))])
    spec = plan_shards(cfg)[0]
    assert clean_shard(cfg, spec, tmp_path / "work")["skipped"] is False
    assert clean_shard(cfg, spec, tmp_path / "work")["skipped"] is True
    src.write_bytes(GOOD_LINE * 2)
    spec2 = plan_shards(cfg)[0]
    assert spec2.fingerprint != spec.fingerprint
    assert clean_shard(cfg, spec2, tmp_path / "work")["docs"] == 2
    tighter = cfg.model_copy(update={"rules": cfg.rules.model_copy(update={"length": LengthSettings(min_chars=10_000)})})
    assert plan_shards(tighter)[0].fingerprint != spec2.fingerprint


def test_the_manifest_counts_the_lines_each_c4_filter_removed(tmp_path):
    src = tmp_path / "in.jsonl"
    menu = "Home | About | Contact\nWe use cookies to improve your experience on our website.\n"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in (menu + GOOD, "Share\n" + GOOD.replace("keeper", "guard"))))
    cfg = parse_config(tiny_dict(tmp_path, clean={"sources": [{"path": str(src)}], "dedup": {"near": False}})).clean
    m = run_clean(cfg, tmp_path / "clean")
    assert m["kept"] == 2 and m["repairs"] == {"c4_lines_removed": 2}
    assert m["lines_removed"] == {"c4/no_terminal_punct": 2, "c4/policy": 1}


# a mailing-list question: its own sentences, an unpunctuated command and its output, a signature, the list's
# footer; the web rules cut it below Gopher's 50 words (C4 removes the lines without a sentence end)
LIST_MAIL = """Re: rsync over ssh drops the connection

I copy the nightly backups to the file server with rsync over ssh, and since the upgrade the transfer stops
after a few minutes with a broken pipe. Has anyone seen this?

    rsync -az -e ssh /srv/backup/ files:/data/backup/
    packet_write_wait: Connection to files port 22: Broken pipe

Setting ServerAliveInterval to 30 did not help

Thanks
Maria

--
Backup-users mailing list
Backup-users@lists.example.org
https://lists.example.org/mailman/listinfo/backup-users
"""
MAIL_RULES = {"c4": {"mode": "tag"}, "fineweb": {"mode": "tag"}}


def web_and_mail_sources(tmp_path) -> CleanConfig:
    """The same two documents (the list mail, a good paragraph) in a source under clean.rules and in one with
    MAIL_RULES; dedup off."""
    for name in ("web", "mail"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "in.jsonl").write_text(json.dumps({"text": LIST_MAIL}) + "\n" + GOOD_LINE.decode())
    return CleanConfig(sources=[SourceConfig(path=str(tmp_path / "web"), name="web"),
                                SourceConfig(path=str(tmp_path / "mail"), name="mail", rules=MAIL_RULES)],
                       dedup={"exact": False, "near": False})


def test_a_source_judged_by_its_own_rule_settings_keeps_what_the_corpus_rules_cut(tmp_path):
    from tasks.clean.shards import plan_shards

    cfg = web_and_mail_sources(tmp_path)
    m = run_clean(cfg, tmp_path / "clean")
    assert m["rejected_by_source"] == {"web": 1, "mail": 0} and m["kept"] == 3
    assert m["rejected_by_reason"] == {"gopher_short_doc": 1} and m["source_rules"] == {"mail": MAIL_RULES}
    kept = {(r["source"], r["text"][:10]): r for r in ds.dataset(tmp_path / "clean" / "kept").to_table().to_pylist()}
    mail = kept[("mail", LIST_MAIL[:10])]
    lines = [line.split() for line in LIST_MAIL.splitlines() if line.strip()]
    assert [line.split() for line in mail["text"].splitlines() if line.strip()] == lines  # C4 removed no line
    assert mail["flags"] == ["fineweb:fineweb_line_punct_ratio"] and m["tagged_by_reason"] == {
        "fineweb_line_punct_ratio": 1}  # scored, for the mixture to weigh
    # the source's settings are part of its shards' fingerprints, and of no other source's
    looser = cfg.model_copy(update={"sources": [cfg.sources[0], cfg.sources[1].model_copy(
        update={"rules": {**MAIL_RULES, "gopher_repetition": {"mode": "tag"}}})]})
    before, after = plan_shards(cfg), plan_shards(looser)
    assert before[0].fingerprint == after[0].fingerprint and before[1].fingerprint != after[1].fingerprint
