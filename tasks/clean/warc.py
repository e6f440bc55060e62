"""WARC / WET input: one document per HTML response (visible text extracted) or per WET conversion record.

fastwarc and resiliparse are the optional `warc` extra, imported here only. A
gzipped file is decompressed by Python's gzip, which raises on a truncated
stream; fastwarc's own decoder ends such a file early without an error, which
would lose records silently.
"""
from __future__ import annotations

import gzip
import re
from typing import Iterator

TEXT_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
CONTENT_SCHEMES = ("http://", "https://", "ftp://", "file://")
# a private-use character marks quoted text through the extractor; one in the page itself (written or as a
# character reference) is dropped first
QUOTE_MARK = "\ue000"
_PAGE_MARK = re.compile(QUOTE_MARK + r"|&#(?:x0*e000|0*57344);?", re.IGNORECASE)
_QUOTE_MARKS = re.compile(QUOTE_MARK + "+")
_MARKED_LINE = re.compile(f"^.*{QUOTE_MARK}.*$", re.MULTILINE)
_MARKED = "data-pretrain-quote"
_BLOCKQUOTE = re.compile("<blockquote", re.IGNORECASE)
_PREFORMATTED = ("pre", "textarea", "listing", "plaintext", "xmp")  # their line breaks are lines of the text
# how html_text calls resiliparse's extract_plain_text (with main_content as its caller asks)
EXTRACT_SETTINGS = {"preserve_formatting": True, "alt_texts": False}


def _modules():
    try:
        from fastwarc.warc import ArchiveIterator, WarcRecordType
        from resiliparse.parse.encoding import bytes_to_str, detect_encoding
    except ImportError:
        raise ImportError("WARC input needs fastwarc and resiliparse: pip install 'pretrain-pipeline[warc]'") from None
    return ArchiveIterator, WarcRecordType, bytes_to_str, detect_encoding


def html_text(html: str, main_content: bool) -> str:
    """The visible text of an HTML page (resiliparse), a <blockquote>'s lines marked "> " per depth as a quoted
    e-mail reply is: a forum answer that quotes the question, or a reply quoting a post, then reads as a quote,
    not as the page repeating its own lines (boilerplate to the duplicate-line rules). An image's alternative text
    is left out, as datatrove's resiliparse extractor leaves it: it is no sentence of the page, and inside a
    paragraph ("... a whole slew of them now. enter image description here") it cut the paragraph's end, for
    which C4 removes the paragraph."""
    try:
        from resiliparse.extract.html2text import extract_plain_text
        from resiliparse.parse.html import HTMLTree
    except ImportError:
        raise ImportError("HTML input needs resiliparse: pip install 'pretrain-pipeline[warc]'") from None
    if _BLOCKQUOTE.search(html) is None:
        return extract_plain_text(html, main_content=main_content, **EXTRACT_SETTINGS)
    tree = HTMLTree.parse(_PAGE_MARK.sub("", html))
    # the outermost quote not yet marked, found by the parser's own selector: a walk of the whole page in Python
    # would cost more than the extraction (resiliparse's node lists are quadratic in their length)
    while (quote := tree.document.query_selector(f"blockquote:not([{_MARKED}])")) is not None:
        _mark_quote(quote)
    text = extract_plain_text(tree, main_content=main_content, **EXTRACT_SETTINGS)
    # the page's own marks were dropped: a mark in the text is a quote's
    return _MARKED_LINE.sub(_quoted_line, text) if QUOTE_MARK in text else text


def _mark_quote(quote) -> None:
    """Each text inside the blockquote starts with one mark per enclosing blockquote, and so does each line of
    preformatted text in it; the blockquotes are marked done. Walked by first child and next sibling, iteratively
    (a page may nest deeper than Python recurses)."""
    from resiliparse.parse.html import NodeType
    stack = [(quote, 0, False)]
    while stack:
        node, depth, pre = stack.pop()
        if node.type == NodeType.TEXT:
            if node.text.strip():
                marks = QUOTE_MARK * depth
                node.node_value = marks + (node.text.replace("\n", "\n" + marks) if pre else node.text)
            continue
        if node.type == NodeType.ELEMENT:
            pre = pre or node.tag in _PREFORMATTED
            if node.tag == "blockquote":
                node.setattr(_MARKED, "")
                depth += 1
        child = node.first_child
        while child is not None:
            stack.append((child, depth, pre))
            child = child.next


def _quoted_line(match: re.Match) -> str:
    line = match.group()
    depth = max(map(len, _QUOTE_MARKS.findall(line)))
    line = line.replace(QUOTE_MARK, "")
    return "> " * depth + line if line.strip() else line


def read_warc(f, path: str, make_doc, gzipped: bool | None = None) -> Iterator:
    """make_doc(doc_id, text, problem) builds the RawDoc. Every record is accounted for: non-text responses and
    records that hold no page (warcinfo, request, metadata, revisit, a crawler's own files kept as resources
    under metadata:// URIs) are rejected documents with a reason, never dropped and never text."""
    ArchiveIterator, T, bytes_to_str, detect_encoding = _modules()
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
            text = html_text(text, main_content=True)
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
