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
