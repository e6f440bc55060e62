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
CONTENT_SCHEMES = ("http://", "https://", "ftp://", "file://")


def _modules():
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecordType
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    except ImportError:
        raise ImportError("WARC input needs fastwarc and resiliparse: pip install 'pretrain-pipeline[warc]'") from None
    return ArchiveIterator, WarcRecordType, extract_plain_text, bytes_to_str, detect_encoding


def read_warc(f, path: str, make_doc, gzipped: bool | None = None) -> Iterator:
    """make_doc(doc_id, text, problem) builds the RawDoc. Every record is accounted for: non-text responses and
    records that hold no page (warcinfo, request, metadata, revisit, a crawler's own files kept as resources
    under metadata:// URIs) are rejected documents with a reason, never dropped and never text."""
    ArchiveIterator, T, extract_plain_text, bytes_to_str, detect_encoding = _modules()
    gzipped = path.endswith(".gz") if gzipped is None else gzipped
    stream = gzip.GzipFile(fileobj=f) if gzipped else f
    for record in ArchiveIterator(stream, record_types=T.any_type, parse_http=True, stream_detect=False):
        doc_id = record.headers.get("WARC-Target-URI") or record.record_id
        body = record.reader.read()
        if record.reader.tell() < record.content_length:
            raise EOFError(f"WARC record {record.record_id} ends early (truncated file)")
        problem = not_content(record, T, doc_id)
        if problem:
            yield make_doc(doc_id, "", problem)
            continue
        content_type = (record.http_content_type if record.is_http else record.headers.get("Content-Type")) or ""
        if record.record_type == T.response and not content_type.startswith(TEXT_TYPES):
            yield make_doc(doc_id, "", "warc_payload_not_text")
            continue
        charset = (record.http_charset if record.is_http else None) or detect_encoding(body)
        text = bytes_to_str(body, charset)
        if content_type.startswith(("text/html", "application/xhtml")):
            text = extract_plain_text(text, preserve_formatting=True, main_content=True)
        yield make_doc(doc_id, text, None)


def not_content(record, T, uri: str) -> str | None:
    """Why a record is not a page's content (None when it is one)."""
    kind = record.record_type
    if kind not in (T.response, T.conversion, T.resource):
        return f"warc_{kind}_record"
    if kind == T.resource and not uri.startswith(CONTENT_SCHEMES):
        return "warc_metadata_record"  # wget keeps its arguments, manifest and log as resources under metadata://
    if kind == T.response and record.is_http and record.http_headers.status_code >= 300:
        return "warc_http_not_ok"  # redirects and error pages
    return None
