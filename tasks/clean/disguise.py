"""The text the dirty rule matches against: spam's disguises folded away, for matching only (the kept text is
never changed).

Chat and SMS spam hides its words from lists with characters that look like others: mathematical alphanumerics
(𝐜𝐚𝐬𝐢𝐧𝐨), full-width letters and digits (ｗｅｃｈａｔ, ８８８), circled or parenthesised ones (①②③, ⓑⓔⓣ), Cyrillic
and Greek look-alikes (саsіnо), and separators between the characters of a word (色❤单❤身, 赌.博, 加-微-信).
Three steps undo that: the compatibility forms of letters and digits folded as NFKC folds them (full-width,
mathematical, circled and parenthesised; not the rest of NFKC, which would also turn ㎡ into m2 and full-width
punctuation into ASCII under patterns that expect them), a map of look-alike letters to the Latin ones they
imitate (in words made of Latin letters and look-alikes only, so Russian or Greek words with letters of their own
stay as they are), and the removal of separator runs that sit between two CJK characters or split a word of single
Latin letters (c.a.s.i.n.o, c a s i n o), and of emoji, arrows and other pictographic symbols wherever they stand
(no list term holds one). A separator run is symbols, emoji, ASCII marks that do not end a clause (- . * _ | ~ and
the like), zero-width characters and spaces: never CJK punctuation (，。、), an ASCII comma, colon, question mark
or bracket, or a letter, so ordinary Chinese clauses stay apart and words are not joined across them.
"""
from __future__ import annotations

import re
import unicodedata

# look-alikes NFKC leaves alone: Cyrillic and Greek letters drawn like Latin ones (Unicode's confusables, the
# lowercase letters spam uses; case is folded before matching)
LOOK_ALIKES = str.maketrans({
    "а": "a", "в": "b", "е": "e", "ё": "e", "к": "k", "м": "m", "н": "h", "о": "o", "р": "p", "с": "c", "т": "t",
    "у": "y", "х": "x", "ѕ": "s", "і": "i", "ї": "i", "ј": "j", "ԁ": "d", "ԛ": "q", "ԝ": "w", "һ": "h", "ɡ": "g",
    "α": "a", "β": "b", "ε": "e", "ι": "i", "κ": "k", "ν": "v", "ο": "o", "ρ": "p", "τ": "t", "υ": "u", "χ": "x",
    "ɑ": "a", "ı": "i", "ℓ": "l",
})
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
# not the ASCII marks a clause or quote ends with (, ; : ! ? ' " and brackets), which mixed-width Chinese uses
_SEPARATOR = r"[\s\u200b-\u200f\u2060\ufeff\ufe0e\ufe0f#$%&*+\-./<=>@\\^_`|~\u2190-\u245f\u2500-\u2bff\u2600-\u27bf\U0001f000-\U0001faff]"
_BETWEEN_CJK = re.compile(rf"(?<=[{_CJK}]){_SEPARATOR}{{1,3}}(?=[{_CJK}])")
# no list term or pattern holds one: padding wherever it stands (love❤you, 电话❤138, 好❤，)
_SYMBOLS = re.compile(r"[\u2190-\u245f\u2500-\u2bff\u2600-\u27bf\U0001f000-\U0001faff]+")
# four or more single letters or digits, each after the same kind of separator: a word spelled out
_SPELLED = re.compile(r"(?<![\w])(?:[a-z0-9](?P<sep>[ .\-_*|/~+]{1,2}))(?:[a-z0-9](?P=sep)){2,}[a-z0-9](?![\w])")
_INVISIBLE = re.compile(r"[\u200b-\u200f\u2060\ufeff\ufe0e\ufe0f\u00ad]")


# full-width letters and digits, enclosed alphanumerics, mathematical alphanumerics, enclosed supplement
_COMPAT_RANGES = ((0xFF10, 0xFF19), (0xFF21, 0xFF3A), (0xFF41, 0xFF5A), (0x2460, 0x24FF), (0x1D400, 0x1D7FF),
                  (0x1F100, 0x1F1FF))
COMPAT_LETTERS = str.maketrans({chr(c): unicodedata.normalize("NFKC", chr(c)) for lo, hi in _COMPAT_RANGES
                                for c in range(lo, hi + 1) if unicodedata.normalize("NFKC", chr(c)) != chr(c)})
_MAPPED = re.compile("[" + "".join(chr(c) for c in LOOK_ALIKES) + "]")
# a word of Latin, Greek or Cyrillic letters (not \w: in Chinese text that would take the CJK around it too)
_WORD = re.compile(r"[a-z0-9\u0131\u0250-\u02af\u0370-\u03ff\u0400-\u052f\u2113]+")
_ONLY_LATIN = re.compile(r"[a-z0-9_]+")


def _latinised(word: re.Match) -> str:
    """A word of Latin letters and look-alikes, or of look-alikes alone, in Latin letters; a word with any other
    letter of its script (Cyrillic ж, Greek λ) stays: it is that language, not a disguise."""
    w = word.group(0)
    if not _MAPPED.search(w):
        return w
    latin = w.translate(LOOK_ALIKES)
    return latin if _ONLY_LATIN.fullmatch(latin) else w


def unmask(text: str) -> str:
    """The text with look-alike characters and separators inside words folded away, lowercase."""
    folded = _SYMBOLS.sub("", _BETWEEN_CJK.sub("", _INVISIBLE.sub("", text)))
    folded = folded.translate(COMPAT_LETTERS).lower()
    if _MAPPED.search(folded):
        folded = _WORD.sub(_latinised, folded)
    return _SPELLED.sub(lambda m: re.sub(r"[^a-z0-9]", "", m.group(0)), folded)
