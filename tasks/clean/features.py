"""Per-document features, computed once and shared by every rule."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_WORD = re.compile(r"[A-Za-z]+(?:'[A-Za-z]+)?")
_CODE_SIGNALS = re.compile(
    r"^\s*(def |class |import |from \S+ import|#include|public |private |function |return\b|if .*:$|for .*:$|"
    r"[{}];?$|//|/\*|\*/|#!/)", re.M)
_PLAIN = re.compile(r"[\w\s\u3000-\u303f\uff00-\uffef.,;:!?'\"()\[\]\-–—…“”‘’、，。！？；：（）《》]")


@dataclass
class DocFeatures:
    text: str

    @cached_property
    def n_chars(self) -> int:
        return len(self.text)

    @cached_property
    def lines(self) -> list[str]:
        return [line for line in self.text.split("\n") if line.strip()]

    @cached_property
    def words(self) -> list[str]:
        return _WORD.findall(self.text)

    @cached_property
    def cjk_ratio(self) -> float:
        non_space = sum(1 for c in self.text if not c.isspace()) or 1
        return len(_CJK.findall(self.text)) / non_space

    @cached_property
    def symbol_ratio(self) -> float:
        non_space = sum(1 for c in self.text if not c.isspace()) or 1
        plain = len(_PLAIN.findall(self.text)) - sum(1 for c in self.text if c.isspace())
        return max(0, non_space - plain) / non_space

    @cached_property
    def duplicate_line_ratio(self) -> float:
        if len(self.lines) < 3:
            return 0.0
        counts = Counter(line.strip() for line in self.lines)
        repeated = sum(c - 1 for c in counts.values() if c > 1)
        return repeated / len(self.lines)

    @cached_property
    def code_line_ratio(self) -> float:
        if not self.lines:
            return 0.0
        return len(_CODE_SIGNALS.findall(self.text)) / len(self.lines)

    @cached_property
    def max_line_chars(self) -> int:
        return max((len(line) for line in self.lines), default=0)
