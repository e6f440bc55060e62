"""Evaluation data as a set of n-gram hashes, for finding it inside training documents.

Tokens are what survives any re-typesetting of a benchmark item: Latin words lowercased
(NFKC, so full-width letters and digits count as their ASCII forms), and each CJK character
on its own, since Chinese has no spaces to cut words at. Punctuation and whitespace are
not tokens. Each window of `n` tokens is hashed to 64 bits by a polynomial over the
tokens' own hashes; an eval set is the sorted array of its windows' hashes, 8 bytes a
window, looked up with one vectorised search per document.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import unicodedata
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterator

import numpy as np
import pyarrow.parquet as pq

from pretrain.config import EvalSet, SourceConfig
from tasks.clean.normalize import to_simplified
from tasks.clean.readers import expand_source, file_format, starts_json_array

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W_{_CJK}]+")
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_MULTIPLIER = np.uint64(0x9E3779B97F4A7C15)  # odd, so the polynomial mixes every position


def tokens(text: str) -> list[str]:
    simplified = _simplified_characters().get
    # mapped token by token: a CJK token is one character, and str.translate over the whole text cost twice as much
    return [simplified(t, t) for t in _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())]


@lru_cache(maxsize=1)
def _simplified_characters() -> dict[str, str]:
    """Each Traditional CJK character's Simplified form (OpenCC t2s, character by character): a benchmark published
    in Traditional script is found in a Simplified corpus, and the other way round, whether or not the clean stage
    converts its documents (clean.normalize.traditional_to_simplified)."""

    table = {}
    for low, high in ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF)):
        chars = [chr(c) for c in range(low, high + 1)]
        # one character a line, so that no two neighbours in the code table are read as a phrase
        for char, simple in zip(chars, to_simplified("\n".join(chars)).split("\n")):
            if simple != char:
                table[char] = simple
    return table


def window_hashes(toks: list[str], n: int) -> np.ndarray:
    """One uint64 per window of n consecutive tokens (empty when there are fewer than n)."""
    return windows_of(token_hashes(toks), n)


def token_hashes(toks: list[str]) -> np.ndarray:
    # zlib.crc32 rather than hash(): the same value in every worker process, whatever PYTHONHASHSEED says
    return np.fromiter((zlib.crc32(t.encode()) for t in toks), dtype=np.uint64, count=len(toks))


def windows_of(token_hash: np.ndarray, n: int) -> np.ndarray:
    """One uint64 per window of n consecutive token hashes."""
    if len(token_hash) < n:
        return np.empty(0, dtype=np.uint64)
    windows = np.lib.stride_tricks.sliding_window_view(token_hash, n)
    powers = _MULTIPLIER ** np.arange(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return (windows * powers).sum(axis=1, dtype=np.uint64)


@dataclass
class EvalNgrams:
    name: str
    n: int                 # this set's window length in tokens
    hashes: np.ndarray     # sorted, unique
    items: int             # records (or lines of text files) read
    short_items: int       # items with fewer tokens than one window: they cannot be found by this rule

    def matches(self, doc_hashes: np.ndarray) -> int:
        """How many of a document's windows (of this set's length) occur in this eval set."""
        if not len(self.hashes) or not len(doc_hashes):
            return 0
        at = np.searchsorted(self.hashes, doc_hashes)
        return int((self.hashes[np.minimum(at, len(self.hashes) - 1)] == doc_hashes).sum())

    def summary(self) -> dict:
        return {"items": self.items, "window": self.n, "items_shorter_than_ngram": self.short_items,
                "ngrams": int(len(self.hashes))}


def window_for(lengths: list[int], shortest: int, longest: int) -> int:
    """GPT-3's window for one eval set (Brown et al. 2020, appendix C): the 5th-percentile item length in tokens, at
    least `shortest` (shorter windows collide with common phrases) and at most `longest`. A set of long passages gets
    `longest`; a set of short questions a window that still finds 95% of them."""
    ordered = sorted(lengths)
    fifth = ordered[int(0.05 * (len(ordered) - 1))] if ordered else longest
    return max(shortest, min(longest, fifth))


def load_eval_ngrams(eval_set: EvalSet, longest: int, shortest: int | None = None,
                     shortest_cjk: int | None = None) -> EvalNgrams:
    """The set's windows; `shortest` bounds the window of a set of words, `shortest_cjk` that of a set whose tokens
    are mostly CJK characters (a character says less than a word: 8 of them spell 中华人民共和国 or a bank's name)."""
    # the window depends on every item's length: items are kept as token hashes (8 bytes a token, what their
    # windows take anyway) until it is known
    items, cjk = [], 0
    for text in eval_texts(eval_set):
        toks = tokens(text)
        cjk += sum(1 for t in toks if _CJK_CHAR.fullmatch(t))
        items.append(token_hashes(toks))
    if not items:
        raise ValueError(f"eval set '{eval_set.name}': no records read from {eval_set.path}; "
                         f"fix clean.rules.decontam.eval_sets[].path")
    floor = shortest_cjk if 2 * cjk > sum(map(len, items)) and shortest_cjk is not None else shortest
    n = window_for([len(item) for item in items], longest if floor is None else floor, longest)
    parts = [windows_of(item, n) for item in items]
    return EvalNgrams(eval_set.name, n, np.unique(np.concatenate(parts)), len(parts),
                      sum(not len(h) for h in parts))


def eval_texts(eval_set: EvalSet) -> Iterator[str]:
    """Each item's text: a record's chosen string values joined, or a text file's lines."""
    fs, files = expand_source(SourceConfig(path=eval_set.path, name=eval_set.name))
    for path in files:
        with fs.open(path, "rb") as f:
            for record in _records(f, file_format(f, path, "auto"), path):
                text = record if isinstance(record, str) else " ".join(_strings(record, eval_set.fields))
                if text.strip():
                    yield text


def _records(f, fmt: str, path: str) -> Iterator[object]:
    if fmt in ("jsonl.gz", "text.gz"):
        f, fmt = gzip.open(f), fmt.removesuffix(".gz")
    if fmt == "parquet":
        yield from pq.read_table(f).to_pylist()
    elif fmt in ("csv", "tsv"):
        yield from csv.DictReader(io.TextIOWrapper(f, encoding="utf-8", errors="replace", newline=""),
                                  delimiter="," if fmt == "csv" else "\t")
    elif fmt == "jsonl":
        raw = f.read()
        if starts_json_array(raw):
            yield from json.loads(raw.decode("utf-8", errors="replace"))
        else:
            yield from (json.loads(line) for line in raw.decode("utf-8", errors="replace").splitlines() if line.strip())
    elif fmt == "text":
        yield from (line for line in io.TextIOWrapper(f, encoding="utf-8", errors="replace"))
    else:
        raise ValueError(f"{path}: eval data as {fmt} is not supported; give JSONL, JSON, Parquet, CSV, TSV or text")


def _strings(value: object, fields: list[str] | None) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            if fields is None or key in fields:
                yield from _strings(inner, None)
    elif isinstance(value, (list, tuple)):
        for inner in value:
            yield from _strings(inner, fields)
