"""WARC / WET input: one document per HTML response (visible text extracted) or per WET conversion record.

fastwarc and resiliparse are the optional `warc` extra, imported here only. A
gzipped file is decompressed by Python's gzip, which raises on a truncated
stream; fastwarc's own decoder ends such a file early without an error, which
would lose records silently.
"""
from __future__ import annotations

import gzip
from typing import Iterator

TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")


def _modules():
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecordType
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    except ImportError:
        raise ImportError("WARC input needs fastwarc and resiliparse: pip install 'pretrain-pipeline[warc]'") from None
    return ArchiveIterator, WarcRecordType, extract_plain_text, bytes_to_str, detect_encoding


def read_warc(f, path: str, make_doc) -> Iterator:
    """make_doc(doc_id, text, problem) builds the RawDoc; non-text responses are rejected documents, not dropped."""
    ArchiveIterator, T, extract_plain_text, bytes_to_str, detect_encoding = _modules()
    stream = gzip.GzipFile(fileobj=f) if path.endswith(".gz") else f
    records = ArchiveIterator(stream, record_types=T.response | T.conversion | T.resource,
                              parse_http=True, stream_detect=False)
    for record in records:
        doc_id = record.headers.get("WARC-Target-URI") or record.record_id
        body = record.reader.read()
        if record.reader.tell() < record.content_length:
            raise EOFError(f"WARC record {record.record_id} ends early (truncated file)")
        content_type = (record.http_content_type if record.is_http else record.headers.get("Content-Type")) or ""
        if record.record_type == T.response and not content_type.startswith(TEXT_TYPES):
            yield make_doc(doc_id, "", "warc_payload_not_text")
            continue
        charset = (record.http_charset if record.is_http else None) or detect_encoding(body)
        text = bytes_to_str(body, charset)
        if content_type.startswith(("text/html", "application/xhtml")):
            text = extract_plain_text(text, preserve_formatting=True, main_content=True)
        yield make_doc(doc_id, text, None)
