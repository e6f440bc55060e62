"""Text normalization applied to every document before any rule sees it."""
from __future__ import annotations

import re
import unicodedata

# C0/C1 controls except tab and newline; zero-width and BOM characters.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\u200c\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[ \t\u00a0\u3000]+")
_MANY_NEWLINES = re.compile(r"\n{3,}")


def normalize_text(text: str, keep_indentation: bool = False) -> str:
    """NFC, newline unification, control-character stripping, whitespace collapsing.

    Code keeps its indentation and inner spacing (keep_indentation), since
    whitespace is syntax there; prose gets runs of spaces collapsed.
    """
    text = unicodedata.normalize("NFC", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _CONTROL.sub("", text)
    if keep_indentation:
        lines = [line.rstrip() for line in text.split("\n")]
    else:
        lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _MANY_NEWLINES.sub("\n\n", "\n".join(lines)).strip("\n")
