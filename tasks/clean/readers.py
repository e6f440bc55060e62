"""Read raw documents from the sources a config names, through fsspec.

A reader never drops a document silently: a record it cannot turn into text
becomes a RawDoc with `problem` set (rejected downstream with that reason),
and a file it cannot read at all is reported by name in UnreadableFile.
"""
from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import fsspec
import pyarrow.parquet as pq
import zstandard

from pretrain.config import SourceConfig
from tasks.clean.warc import read_warc


class SourceError(ValueError):
    """A source that names nothing, or names something that is not there."""


@dataclass
class RawDoc:
    doc_id: str
    text: str
    source: str
    channel_hint: str | None
    problem: str | None = None   # set when the record could not yield text
    repaired: str | None = None  # set when bytes had to be replaced to decode
    size_bytes: int | None = None  # a document too large to read: its size


# a document larger than this is never read whole: 4 bytes a character at most, so past 4 x the length rule's
# max_chars it is too long anyway (a 2 GiB single line once took 4.6 GB and ended in an Arrow error)
DEFAULT_MAX_DOC_BYTES = 4 * 2_000_000
SKIP_CHUNK = 1 << 20  # what a line over the cap is read past by


@dataclass(frozen=True)
class Oversized:
    """A line or file over the size cap, read past in pieces, never held: its size in bytes."""
    size: int


def _too_large(doc_id: str, source: SourceConfig, size: int) -> "RawDoc":
    return RawDoc(doc_id, "", source.source_name, source.channel_hint, problem="document_too_large", size_bytes=size)


def _bounded_lines(f, cap: int) -> Iterator[bytes | Oversized]:
    """The lines of a binary stream, none held past cap bytes: a longer one is skipped in pieces, as Oversized."""
    while line := f.readline(cap + 1):
        if len(line) <= cap or line.endswith(b"\n") and len(line) == cap + 1:
            yield line
            continue
        size = len(line)
        while not line.endswith(b"\n") and (line := f.readline(SKIP_CHUNK)):
            size += len(line)
        yield Oversized(size - line.endswith(b"\n"))


@dataclass
class UnreadableFile:
    path: str
    error: str
    docs_read_before_error: int


def source_fs(source: SourceConfig) -> fsspec.AbstractFileSystem:
    return fsspec.get_fs_token_paths(source.resolved_path())[0]


def expand_source(source: SourceConfig) -> tuple[fsspec.AbstractFileSystem, list[str]]:
    url = source.resolved_path()
    fs, _, paths = fsspec.get_fs_token_paths(url)
    if any(ch in url for ch in "*?["):
        files = sorted(p for p in paths if not fs.isdir(p))
    elif paths and fs.isdir(paths[0]):
        files = sorted(p for p in fs.find(paths[0]) if not fs.isdir(p))
    else:
        files = [p for p in paths if fs.exists(p)]
    if not files:
        raise SourceError(f"source '{source.source_name}': nothing found at {url}; "
                          f"fix clean.sources[].path (a file, a directory or a glob)")
    return fs, files


SUFFIXES = ((".warc.gz", "warc"), (".warc", "warc"), (".wet.gz", "warc"), (".wet", "warc"), (".jsonl.gz", "jsonl.gz"),
            (".json.gz", "jsonl.gz"), (".jsonl.zst", "jsonl.zst"), (".json.zst", "jsonl.zst"), (".jsonl", "jsonl"),
            (".json", "jsonl"), (".parquet", "parquet"), (".csv", "csv"), (".tsv", "tsv"), (".txt", "text"),
            (".text", "text"), (".md", "text"))
SNIFF_BYTES = 64 << 10


def file_format(f, path: str, declared: str) -> str:
    """The declared format, else the suffix's, else what the first bytes hold (a JSONL file named part-00000 is
    not one huge text document; only then is the head read). JSON files may hold one array of records: _read_json."""
    if declared != "auto":
        return declared
    for suffix, fmt in SUFFIXES:
        if path.endswith(suffix):
            return fmt
    head = f.read(SNIFF_BYTES)
    f.seek(0)
    return sniff_format(head)


def starts_json_array(data: bytes) -> bool:
    return data.lstrip(b"\xef\xbb\xbf \t\r\n").startswith(b"[")


def sniff_format(head: bytes) -> str:
    if head.startswith(b"\x1f\x8b"):
        try:
            inner = zlib.decompressobj(31).decompress(head)
        except zlib.error:
            return "text.gz"  # gzip then names what is wrong with it, as an unreadable file
        return {"jsonl": "jsonl.gz", "warc": "warc.gz"}.get(sniff_format(inner), "text.gz")
    if head.startswith(b"\x28\xb5\x2f\xfd"):
        return "jsonl.zst"
    if head.startswith(b"PAR1"):
        return "parquet"
    if head.startswith(b"WARC/"):
        return "warc"
    start = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if starts_json_array(start) and start[1:].lstrip()[:1] in (b"{", b"]"):
        return "jsonl"  # an array of records, read by _read_json
    if start.startswith(b"{") and _is_json_object(start.split(b"\n", 1)[0]):
        return "jsonl"
    return "text"


def _is_json_object(line: bytes) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _decode(raw: bytes) -> tuple[str, bool]:
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return raw.decode("utf-8", errors="replace"), True


def _record_doc(record: object, source: SourceConfig, fallback_id: str) -> RawDoc:
    name, hint = source.source_name, source.channel_hint
    if not isinstance(record, dict):
        return RawDoc(fallback_id, "", name, hint, problem="record_not_an_object")
    doc_id = str(record.get(source.id_field, fallback_id)) if source.id_field else fallback_id
    text = record.get(source.text_field)
    if text is None:
        return RawDoc(doc_id, "", name, hint, problem="missing_text_field")
    if not isinstance(text, str):
        return RawDoc(doc_id, "", name, hint, problem="text_not_a_string")
    return RawDoc(doc_id, text, name, hint)


def _read_json(stream, source: SourceConfig, path: str, cap: int) -> Iterator[RawDoc]:
    """JSON Lines, or one JSON array of records (a .json export): the first byte that is not blank decides."""
    first = b""
    lines = _bounded_lines(stream, cap) if hasattr(stream, "readline") else iter(stream)
    for first in lines:
        if isinstance(first, Oversized) or first.strip():
            break
    if isinstance(first, Oversized) or not starts_json_array(first):
        yield from _read_jsonl(itertools.chain([first], lines), source, path)
        return
    rest = list(lines)
    if any(isinstance(line, Oversized) for line in rest):
        yield _too_large(path, source, len(first) + sum(x.size if isinstance(x, Oversized) else len(x) for x in rest))
        return
    raw = first + b"".join(rest)  # an array is parsed whole: it has no line boundaries to stream by
    text, repaired = _decode(raw)
    try:
        records = json.loads(text)
    except json.JSONDecodeError:
        yield from _read_jsonl(iter(raw.splitlines(keepends=True)), source, path)  # array-looking JSON lines
        return
    for index, record in enumerate(records):
        doc = _record_doc(record, source, f"{path}:{index}")
        doc.repaired = "replaced_undecodable_bytes" if repaired else None
        yield doc


def _read_jsonl(stream, source: SourceConfig, path: str) -> Iterator[RawDoc]:
    for lineno, raw in enumerate(stream, start=1):
        fallback = f"{path}:{lineno}"
        if isinstance(raw, Oversized):
            yield _too_large(fallback, source, raw.size)
            continue
        if not raw.strip():
            continue
        line, repaired = _decode(raw)
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            yield RawDoc(fallback, "", source.source_name, source.channel_hint, problem="invalid_json")
            continue
        doc = _record_doc(record, source, fallback)
        doc.repaired = "replaced_undecodable_bytes" if repaired else None
        yield doc


def _read_parquet(f, source: SourceConfig, path: str) -> Iterator[RawDoc]:
    pf = pq.ParquetFile(f)
    columns = [c for c in (source.text_field, source.id_field) if c]
    missing = [c for c in columns if c not in pf.schema_arrow.names]
    if missing:
        raise SourceError(f"{path}: no column {missing[0]!r} (columns: {pf.schema_arrow.names}); "
                          f"set text_field/id_field of source '{source.source_name}'")
    row = 0
    for batch in pf.iter_batches(columns=columns, batch_size=4096):
        for record in batch.to_pylist():
            yield _record_doc(record, source, f"{path}:{row}")
            row += 1


def _zstd_lines(f, cap: int = DEFAULT_MAX_DOC_BYTES, chunk_size: int = 1 << 20) -> Iterator[bytes | Oversized]:
    """Lines of a (multi-frame) zstd stream, none held past cap bytes (Oversized instead); raises EOFError when it
    ends mid-frame.

    zstandard's stream_reader returns a truncated stream as a short one without
    error, which would lose documents silently.
    """
    dobj, pending, frame_open, skipped = zstandard.ZstdDecompressor().decompressobj(), b"", False, 0
    while chunk := f.read(chunk_size):
        while chunk:
            pending += dobj.decompress(chunk)
            frame_open = not dobj.eof
            chunk = dobj.unused_data if dobj.eof else b""
            if dobj.eof:
                dobj = zstandard.ZstdDecompressor().decompressobj()
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if skipped:
                yield Oversized(skipped + len(line))
                skipped = 0
            else:
                yield line + b"\n" if len(line) <= cap else Oversized(len(line))
        if len(pending) > cap:  # a line longer than the cap: count it, do not keep it
            skipped, pending = skipped + len(pending), b""
    if frame_open:
        raise EOFError("zstd stream ends in the middle of a frame (truncated file)")
    if skipped or pending:
        yield Oversized(skipped + len(pending)) if skipped or len(pending) > cap else pending


def _read_delimited(f, source: SourceConfig, path: str, delimiter: str) -> Iterator[RawDoc]:
    """CSV/TSV with a header row, or with source.columns naming the columns of a headerless file."""
    text_stream = io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline="")
    csv.field_size_limit(2**31 - 1)  # a 50 MB cell is read, then judged by the length rule
    reader = csv.reader(text_stream, delimiter=delimiter, quoting=csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL)
    header = list(source.columns) if source.columns else next(reader, None)
    if header is None:
        return
    if source.text_field not in header:
        raise SourceError(f"{path}: no column {source.text_field!r} (columns: {header}); set text_field, or "
                          f"columns for a file without a header row, in source '{source.source_name}'")
    for rowno, row in enumerate(reader, start=1):
        if len(row) != len(header):
            yield RawDoc(f"{path}:{rowno}", "", source.source_name, source.channel_hint, problem="wrong_column_count")
            continue
        yield _record_doc(dict(zip(header, row)), source, f"{path}:{rowno}")


def _read_text(f, source: SourceConfig, path: str, cap: int) -> Iterator[RawDoc]:
    if source.text_unit == "file":
        data = f.read(cap + 1)
        if len(data) > cap:
            size = len(data)
            while chunk := f.read(SKIP_CHUNK):
                size += len(chunk)
            yield _too_large(path, source, size)
            return
        text, repaired = _decode(data)
        yield RawDoc(path, text, source.source_name, source.channel_hint,
                     repaired="replaced_undecodable_bytes" if repaired else None)
        return
    for lineno, raw in enumerate(_bounded_lines(f, cap), start=1):
        if isinstance(raw, Oversized):
            yield _too_large(f"{path}:{lineno}", source, raw.size)
            continue
        text, repaired = _decode(raw.rstrip(b"\r\n"))
        if text.strip():
            yield RawDoc(f"{path}:{lineno}", text, source.source_name, source.channel_hint,
                         repaired="replaced_undecodable_bytes" if repaired else None)


def read_file(fs: fsspec.AbstractFileSystem, path: str, source: SourceConfig,
              cap: int = DEFAULT_MAX_DOC_BYTES) -> Iterator[RawDoc]:
    """The documents of one file; a document over `cap` bytes is a document_too_large problem, never read whole."""
    with fs.open(path, "rb") as f:
        fmt = file_format(f, path, source.format)
        if fmt == "jsonl.gz":
            with gzip.open(f) as gz:
                yield from _read_json(gz, source, path, cap)
        elif fmt == "jsonl.zst":
            yield from _read_json(_zstd_lines(f, cap), source, path, cap)
        elif fmt in ("csv", "tsv"):
            yield from _read_delimited(f, source, path, "," if fmt == "csv" else "\t")
        elif fmt == "jsonl":
            yield from _read_json(f, source, path, cap)
        elif fmt == "parquet":
            yield from _read_parquet(f, source, path)
        elif fmt in ("warc", "warc.gz"):
            yield from read_warc(f, path, lambda doc_id, text, problem: RawDoc(
                doc_id, text, source.source_name, source.channel_hint, problem=problem),
                gzipped=path.endswith(".gz") or fmt == "warc.gz")
        elif fmt == "text.gz":
            with gzip.open(f) as gz:
                yield from _read_text(gz, source, path, cap)
        else:
            yield from _read_text(f, source, path, cap)


def source_root(source: SourceConfig) -> str | None:
    """The real local folder a source names (before its first wildcard); None for a remote one."""
    url = source.resolved_path()
    if "://" in url and not url.startswith("file://"):
        return None
    parts = Path(url.removeprefix("file://")).parts
    fixed = [p for p in itertools.takewhile(lambda p: not any(ch in p for ch in "*?["), parts)]
    base = Path(*fixed) if fixed else Path(".")
    return os.path.realpath(base.parent if base.is_file() else base)


def refusal(path: str, source: SourceConfig, root: str | None) -> str | None:
    """Why a local file of a source (whose folder is `root`, source_root's) is not read: a link to nothing, or
    (without follow_symlinks) a link that leads out of the source's folder, as a corpus link to /etc/shadow would.
    None: read it."""
    if root is None:
        return None
    target = os.path.realpath(path)
    if not os.path.exists(target):
        return f"a symlink to {target}, which does not exist"
    if not source.follow_symlinks and os.path.commonpath([root, target]) != root:
        return (f"a symlink to {target}, outside the source's folder {root}: not read "
                f"(clean.sources[].follow_symlinks: true reads it)")
    return None


def iter_source(source: SourceConfig, unreadable: list[UnreadableFile],
                cap: int = DEFAULT_MAX_DOC_BYTES) -> Iterator[RawDoc]:
    """All documents of one source; files that break mid-read are appended to `unreadable`."""
    fs, files = expand_source(source)
    yield from iter_files(fs, files, source, unreadable, cap)


def iter_files(fs: fsspec.AbstractFileSystem, paths, source: SourceConfig,
               unreadable: list[UnreadableFile], cap: int = DEFAULT_MAX_DOC_BYTES) -> Iterator[RawDoc]:
    """Documents of the given files of one source; a file that breaks is appended to `unreadable`.

    Documents read from a file before it broke are kept (they are real text),
    and the report says how many there were.
    """
    root = source_root(source)
    for path in paths:
        count = 0
        if reason := refusal(path, source, root):
            unreadable.append(UnreadableFile(path, reason, 0))
            continue
        try:
            for doc in read_file(fs, path, source, cap):
                count += 1
                yield doc
        except SourceError:
            raise
        except (OSError, EOFError, ValueError, zlib.error, zstandard.ZstdError) as err:
            unreadable.append(UnreadableFile(path, f"{type(err).__name__}: {err}", count))
