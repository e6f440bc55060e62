import gzip
import json

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pretrain.config import SourceConfig
from tasks.clean.readers import SourceError, iter_source


def read_all(source: SourceConfig):
    unreadable = []
    return list(iter_source(source, unreadable)), unreadable


def test_jsonl_with_problems_keeps_every_record(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(b'{"text": "good one", "id": 7}\n'
                     b'{"body": "no text field"}\n'
                     b'not json at all\n'
                     b'{"text": 12}\n'
                     b'\n'
                     b'{"text": "bad byte \xff here"}\n')
    docs, unreadable = read_all(SourceConfig(path=str(path), id_field="id"))
    assert [d.problem for d in docs] == [None, "missing_text_field", "invalid_json", "text_not_a_string", None]
    assert docs[0].doc_id == "7"
    assert docs[-1].repaired == "replaced_undecodable_bytes" and "\ufffd" in docs[-1].text
    assert unreadable == []


def test_truncated_gzip_reports_file_and_keeps_docs_read(tmp_path):
    path = tmp_path / "b.jsonl.gz"
    payload = gzip.compress(b"".join(json.dumps({"text": f"doc {i} " * 50}).encode() + b"\n" for i in range(200)))
    path.write_bytes(payload[: len(payload) // 2])
    docs, unreadable = read_all(SourceConfig(path=str(path)))
    assert len(unreadable) == 1 and unreadable[0].path.endswith("b.jsonl.gz")
    assert unreadable[0].docs_read_before_error == len(docs) > 0


def test_parquet_and_missing_column(tmp_path):
    path = tmp_path / "c.parquet"
    pq.write_table(pa.table({"content": ["x" * 50, "y" * 60]}), path)
    docs, _ = read_all(SourceConfig(path=str(path), text_field="content"))
    assert [len(d.text) for d in docs] == [50, 60]
    with pytest.raises(SourceError, match="no column 'text'"):
        read_all(SourceConfig(path=str(path)))


def test_text_per_line_and_per_file(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_text("line one\n\nline two\n")
    docs, _ = read_all(SourceConfig(path=str(tmp_path / "t"), text_unit="line"))
    assert [d.text for d in docs] == ["line one", "line two"]
    docs, _ = read_all(SourceConfig(path=str(tmp_path / "t" / "*.txt")))
    assert len(docs) == 1 and docs[0].text.startswith("line one")


def test_fsspec_memory_url():
    fs = fsspec.filesystem("memory")
    fs.pipe("/corpus/x.jsonl", b'{"text": "from memory"}\n')
    docs, _ = read_all(SourceConfig(path="memory://corpus/*.jsonl"))
    assert docs[0].text == "from memory"


def test_missing_source_names_path_and_fix(tmp_path):
    with pytest.raises(SourceError, match=r"nothing found at .*nope.*fix clean.sources"):
        read_all(SourceConfig(path=str(tmp_path / "nope" / "*.jsonl")))


def test_csv_with_header_and_quoted_newlines(tmp_path):
    path = tmp_path / "a.csv"
    path.write_text('id,review\n1,"good hotel, clean room"\n2,"two\nlines"\n3,too,many\n')
    docs, _ = read_all(SourceConfig(path=str(path), text_field="review", id_field="id"))
    assert [(d.doc_id, d.text, d.problem) for d in docs] == [
        ("1", "good hotel, clean room", None), ("2", "two\nlines", None), (f"{path}:3", "", "wrong_column_count")]


def test_tsv_without_header_uses_named_columns(tmp_path):
    path = tmp_path / "a.tsv"
    path.write_text('spam\tWIN a "free" prize now\nham\tsee you at 5\n')
    docs, _ = read_all(SourceConfig(path=str(path), columns=["label", "text"]))
    assert [d.text for d in docs] == ['WIN a "free" prize now', "see you at 5"]
    with pytest.raises(SourceError, match="no column 'text'.*columns for a file without a header"):
        read_all(SourceConfig(path=str(path)))


def test_jsonl_zst_and_truncated_zst(tmp_path):
    import zstandard

    payload = b"".join(json.dumps({"text": f"document {i}"}).encode() + b"\n" for i in range(1000))
    good, bad = tmp_path / "a.jsonl.zst", tmp_path / "b.jsonl.zst"
    good.write_bytes(zstandard.ZstdCompressor().compress(payload))
    bad.write_bytes(good.read_bytes()[:200])
    docs, unreadable = read_all(SourceConfig(path=str(good)))
    assert len(docs) == 1000 and unreadable == []
    docs, unreadable = read_all(SourceConfig(path=str(bad)))
    assert len(unreadable) == 1 and unreadable[0].docs_read_before_error == len(docs)


def test_fifty_megabyte_single_line_is_judged_not_fatal(tmp_path):
    from pretrain.config import CleanConfig
    from tasks.clean.stage import run_clean

    path = tmp_path / "big.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"text": "spam " * 10_000_000}) + "\n")
    m = run_clean(CleanConfig(sources=[SourceConfig(path=str(path))]), tmp_path / "clean")
    assert m["docs_in"] == 1 and m["rejected_by_reason"] == {"document_too_large": 1}  # 50 MB > 4 x 2M chars


RECORDS = [{"id": "a1", "text": "第一篇文章的正文。"}, {"id": "a2", "text": "The second article's body."}]


def test_a_json_array_file_is_read_as_its_records(tmp_path):
    """A .json export holding one array (compact or pretty-printed) is its records, not one invalid record."""
    (tmp_path / "compact.json").write_text(json.dumps(RECORDS + ["not an object"], ensure_ascii=False))
    (tmp_path / "pretty.json").write_text(json.dumps(RECORDS, ensure_ascii=False, indent=2))
    docs, unreadable = read_all(SourceConfig(path=str(tmp_path / "compact.json"), id_field="id"))
    assert [(d.doc_id, d.text, d.problem) for d in docs] == [
        ("a1", RECORDS[0]["text"], None), ("a2", RECORDS[1]["text"], None),
        (f"{tmp_path / 'compact.json'}:2", "", "record_not_an_object")] and unreadable == []
    docs, _ = read_all(SourceConfig(path=str(tmp_path / "pretty.json"), id_field="id"))
    assert [d.text for d in docs] == [r["text"] for r in RECORDS]


def test_a_file_whose_suffix_says_nothing_is_read_by_its_content(tmp_path):
    """part-00000 files from Spark or Hadoop: JSONL (plain or gzipped) is read as records, not one text document;
    text that merely starts with a brace stays text."""
    lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in RECORDS).encode()
    (tmp_path / "part-00000").write_bytes(lines)
    (tmp_path / "part-00001").write_bytes(gzip.compress(lines))
    (tmp_path / "part-00002").write_bytes(json.dumps(RECORDS).encode())
    (tmp_path / "notes").write_text("{{Infobox river}} The river rises in the hills.\nIt flows west.\n")
    for name in ("part-00000", "part-00001", "part-00002"):
        docs, unreadable = read_all(SourceConfig(path=str(tmp_path / name), id_field="id"))
        assert [d.doc_id for d in docs] == ["a1", "a2"] and [d.text for d in docs] == [r["text"] for r in RECORDS], name
        assert unreadable == []
    docs, _ = read_all(SourceConfig(path=str(tmp_path / "notes")))
    assert len(docs) == 1 and docs[0].text.startswith("{{Infobox river}}")


def test_a_broken_gzip_without_a_suffix_is_named_unreadable(tmp_path):
    (tmp_path / "dump").write_bytes(b"\x1f\x8b\x08\x00garbage that is not deflate")
    docs, unreadable = read_all(SourceConfig(path=str(tmp_path / "dump")))
    assert docs == [] and len(unreadable) == 1 and unreadable[0].path.endswith("dump")


def test_a_line_over_the_cap_is_named_and_skipped_without_being_held(tmp_path):
    import tracemalloc

    path = tmp_path / "one-line.txt"
    with open(path, "wb") as f:
        f.write(b"first line of text\n")
        for _ in range(64):
            f.write(b"x" * (1 << 20))  # one 64 MiB line, no newline until the end
        f.write(b"\nlast line of text\n")
    tracemalloc.start()
    docs = list(iter_source(SourceConfig(path=str(path), text_unit="line"), [], cap=4000))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert [(d.doc_id.rsplit(":", 1)[1], d.problem, d.size_bytes) for d in docs] == [
        ("1", None, None), ("2", "document_too_large", 64 << 20), ("3", None, None)]
    assert docs[2].text == "last line of text"
    assert peak < 8 << 20  # read past in 1 MiB pieces: never the 64 MiB line


@pytest.mark.parametrize("name,unit", [("big.jsonl", "line"), ("big.jsonl.zst", "line"), ("big.txt", "file")])
def test_every_reader_caps_a_document_and_keeps_the_rest(tmp_path, name, unit):
    import zstandard

    lines = [json.dumps({"text": "small one"}), json.dumps({"text": "y" * 100_000}), json.dumps({"text": "small two"})]
    data = ("\n".join(lines) + "\n").encode()
    path = tmp_path / name
    path.write_bytes(zstandard.ZstdCompressor().compress(data) if name.endswith(".zst") else data)
    docs = list(iter_source(SourceConfig(path=str(path), text_unit=unit), [], cap=4000))
    if unit == "file":
        assert [(d.problem, d.size_bytes) for d in docs] == [("document_too_large", len(data))]
    else:
        assert [(d.problem, d.size_bytes) for d in docs] == [
            (None, None), ("document_too_large", len(lines[1])), (None, None)]


def test_the_clean_stage_rejects_a_document_too_large_to_read_naming_file_and_line(tmp_path):
    from pretrain.config import CleanConfig
    from tasks.clean.stage import run_clean

    path = tmp_path / "dump.txt"
    path.write_bytes(b"A normal paragraph about the weather and the river in spring, long enough.\n"
                     + b"z" * 5_000_000 + b"\n")
    cfg = CleanConfig.model_validate({"sources": [{"path": str(path), "text_unit": "line"}],
                                      "rules": {"length": {"max_chars": 1000}}})
    m = run_clean(cfg, tmp_path / "clean")
    assert m["docs_in"] == 2 == m["kept"] + m["rejected"] and m["rejected_by_reason"]["document_too_large"] == 1
    rejects = pq.read_table(tmp_path / "clean" / "rejects").to_pylist()
    [big] = [r for r in rejects if r["reason"] == "document_too_large"]
    assert big["id"].endswith("dump.txt:2") and big["rule"] == "input" and big["score"] == 5_000_000
