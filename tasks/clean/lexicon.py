"""Dirty-term lexicons: load word lists and count hits in a document."""
from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import fsspec


def builtin_lexicon_paths() -> list[str]:
    folder = resources.files("tasks.clean") / "lexicons"
    return sorted(str(p) for p in folder.iterdir() if p.name.endswith(".txt"))


def read_terms(path: str) -> list[str]:
    try:
        with fsspec.open(path, "rt", encoding="utf-8") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        raise FileNotFoundError(f"lexicon {path} does not exist; fix clean.lexicons in the config") from None
    return [t.strip() for t in lines if t.strip() and not t.lstrip().startswith("#")]


class Lexicon:
    """Case-insensitive matcher: CJK terms match as substrings, Latin terms on word boundaries."""

    def __init__(self, terms: list[str]):
        unique = sorted({t.lower() for t in terms if len(t) >= 2}, key=len, reverse=True)
        self.size = len(unique)
        parts = [re.escape(t) if not t[0].isascii() else rf"\b{re.escape(t)}\b" for t in unique]
        self._pattern = re.compile("|".join(parts), re.I) if parts else None

    @classmethod
    def from_paths(cls, paths: list[str]) -> "Lexicon":
        terms: list[str] = []
        for path in paths:
            terms.extend(read_terms(path))
        return cls(terms)

    def hits(self, text: str) -> list[str]:
        if self._pattern is None:
            return []
        return [m.group(0).lower() for m in self._pattern.finditer(text)]


def default_paths(extra: list[str]) -> list[str]:
    return builtin_lexicon_paths() + [str(Path(p).expanduser()) if "://" not in p else p for p in extra]
