"""Text normalization, each step switchable in clean.normalize."""
from __future__ import annotations

import html
import re
import unicodedata
from functools import lru_cache

from pretrain.config import NormalizeConfig
from tasks.clean.features import fenced_blocks

# C0/C1 controls except tab and newline; zero-width and BOM characters.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200b\u200c\u200d\u2060\ufeff]")
_SPACES = re.compile(r"[ \t\u00a0\u3000]+")
_MANY_NEWLINES = re.compile(r"\n{3,}")
_ENTITY = re.compile(r"&(?:#\d{2,7}|#[xX][0-9a-fA-F]{2,6}|[a-zA-Z][a-zA-Z0-9]{1,31});")
_HTML_TAG = re.compile(r"</?[a-zA-Z][a-zA-Z0-9]*(?:\s[^<>]*)?/?>")


# UTF-8 read as Latin-1/cp1252 always shows a lead byte as one of these characters
_MOJIBAKE_LEAD = re.compile("[\u00c2-\u00f4]")


def repair_mojibake(text: str) -> str:
    if not _MOJIBAKE_LEAD.search(text):
        return text  # nothing ftfy could repair; skipping it saves most of its cost
    import ftfy  # only the encoding repair: no quote uncurling or other rewrites

    return ftfy.fix_encoding(text)


def unescape_entities(text: str) -> str:
    """HTML character references decoded in prose: `&#8220;fish.&#8221;` ends a sentence, `&amp;` is an
    ampersand. A text with HTML tags is HTML, where they are syntax; fenced code keeps them as written."""
    if "&" not in text or not _ENTITY.search(text) or _HTML_TAG.search(text):
        return text
    return "\n".join(block if is_code else html.unescape(block) for is_code, block in fenced_blocks(text))


@lru_cache(maxsize=1)
def _t2s():
    import opencc

    return opencc.OpenCC("t2s")


def to_simplified(text: str) -> str:
    return _t2s().convert(text)


def normalize_text(text: str, cfg: NormalizeConfig = NormalizeConfig(), keep_indentation: bool = False) -> tuple[str, list[str]]:
    """(normalized text, names of the repairs that changed it)."""
    repairs = []
    if cfg.fix_mojibake:
        fixed = repair_mojibake(text)
        if fixed != text:
            repairs.append("mojibake")
            text = fixed
    if cfg.unescape_html_entities and not keep_indentation:
        decoded = unescape_entities(text)
        if decoded != text:
            repairs.append("html_entities")
            text = decoded
    if cfg.unicode_form != "none":
        text = unicodedata.normalize(cfg.unicode_form, text)
    if cfg.strip_control:
        text = _CONTROL.sub("", text.replace("\r\n", "\n").replace("\r", "\n"))
    if cfg.whitespace:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        text = "\n".join(spaces_normalized(is_code or keep_indentation, block) for is_code, block in fenced_blocks(text))
        text = _MANY_NEWLINES.sub("\n\n", text).strip("\n")
    return text, repairs


def spaces_normalized(is_code: bool, text: str) -> str:
    """Runs of spaces collapsed and lines stripped; code (a code document, a Markdown fenced block) keeps its
    indentation, which is its syntax in Python and YAML."""
    if is_code:
        return "\n".join(line.rstrip() for line in text.split("\n"))
    return "\n".join(_SPACES.sub(" ", line).strip() for line in text.split("\n"))
