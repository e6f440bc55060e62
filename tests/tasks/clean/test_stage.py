import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from pretrain.config import CleanConfig, SourceConfig, parse_config
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
    assert {reasons[i] for i in ("spam-1", "spam-2", "spam-3", "spam-4")} == {"dirty_lexicon"}
    assert set(m["kept_by_channel"]) == {"zh", "en", "code"}
    stats = pq.read_table(out / "stats.parquet").to_pylist()
    assert sum(r["count"] for r in stats) == m["docs_in"]
    assert is_complete(out)


def test_bad_records_are_rejected_not_lost(tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"text": "A perfectly ordinary English sentence about the weather in the valley today."}\n'
                    b'{"nope": 1}\n{broken\n')
    m = run_clean(CleanConfig(sources=[SourceConfig(path=str(src))]), tmp_path / "clean")
    assert m["docs_in"] == 3 and m["kept"] == 1
    assert m["rejected_by_reason"] == {"missing_text_field": 1, "invalid_json": 1}


def test_missing_source_writes_nothing(tmp_path):
    cfg = CleanConfig(sources=[SourceConfig(path=str(tmp_path / "absent.jsonl"))])
    with pytest.raises(SourceError):
        run_clean(cfg, tmp_path / "clean")
    assert not (tmp_path / "clean").exists()
    assert not list(tmp_path.glob("clean.tmp-*"))


def test_unreadable_file_is_reported_by_name(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "good.jsonl").write_text('{"text": "A perfectly ordinary English sentence about the weather today."}\n')
    (tmp_path / "in" / "bad.jsonl.gz").write_bytes(b"this is not gzip")
    m = run_clean(CleanConfig(sources=[SourceConfig(path=str(tmp_path / "in"))]), tmp_path / "clean")
    assert [u["path"].rsplit("/", 1)[-1] for u in m["unreadable_files"]] == ["bad.jsonl.gz"]
    assert m["kept"] == 1


def test_crash_mid_stage_leaves_no_complete_output(tmp_path, monkeypatch):
    src = tmp_path / "in.jsonl"
    src.write_text('{"text": "A perfectly ordinary English sentence about the weather in the valley."}\n')
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
        {"path": str(ham), "text_unit": "line", "name": "ham"}], "min_chars": 10, "lexicons": [str(ads)]}))
    m = run_clean(cfg.clean, tmp_path / "clean")
    assert m["docs_in"] == m["kept"] + m["rejected"] == 200
    rejects = ds.dataset(tmp_path / "clean" / "rejects").to_table().to_pylist()
    unique = {s: m["docs_by_source"][s] - sum(1 for r in rejects if r["source"] == s and r["reason"] == "exact_duplicate")
              for s in ("spam", "ham")}
    dirty = {s: sum(1 for r in rejects if r["source"] == s and r["reason"] == "dirty_lexicon") for s in ("spam", "ham")}
    assert dirty["spam"] / unique["spam"] > 4 * dirty["ham"] / unique["ham"]
