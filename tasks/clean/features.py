"""Per-document features, computed once (lazily) and shared by every rule."""
from __future__ import annotations

import re
from collections import Counter
from functools import cached_property
from typing import Callable

import numpy as np

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RUN = re.compile(f"[{_CJK}]+")
# the units of mixed Chinese and Latin text: a CJK, kana or Hangul character, or a run of other letters and
# digits (a word); kana one by one, so that Japanese does not pass for Chinese
_SYLLABIC = "\u3040-\u30ff\u31f0-\u31ff\uac00-\ud7af"
_TEXT_UNIT = re.compile(f"[{_CJK}{_SYLLABIC}]|[^\\W{_CJK}{_SYLLABIC}]+")
# a line that only draws: a Markdown table's rule row, a horizontal rule (the lookahead keeps it linear on a
# long run of dashes that ends in a letter, where a pattern around a "--" in the middle backtracks quadratically)
_LAYOUT_LINE = re.compile(r"^(?=[^\n]*?(?:--|==))[ \t|:+=*_~-]+$", re.M)
# a Chinese sentence or clause (so a repeated sentence is found inside a line too)
_ZH_SENTENCE = re.compile(r"[^。！？；!?;\n]+[。！？；!?;]?")
_TOKEN = re.compile(r"\w+(?:['’]\w+)*|[^\w\s]")
_PUNCT_MARK = re.compile(r"[，。！？；：、,.!?;:]")
_CODE_SIGNALS = re.compile(
    r"^\s*(def |class |import |from \S+ import|#include|public |private |function |return\b|if .*:$|for .*:$|"
    r"[{}];?$|//|/\*|\*/|#!/)", re.M)
# a "symbol": neither a word character, whitespace, nor common CJK/Latin punctuation
_SYMBOL = re.compile(r"[^\w\s\u3000-\u303f\uff00-\uffef.,;:!?'\"()\[\]\-–—…“”‘’、，。！？；：（）《》]")
_NON_ALNUM = re.compile(r"[\W_]")
_WHITESPACE = (" ", "\n", "\t", "\r", "\u3000", "\xa0")
# Byte sequences that UTF-8 text takes on when read as Latin-1 / cp1252 and left unrepaired
_MOJIBAKE = re.compile(r"Ã[\u0080-\u00bf]|Â[\u0080-\u00bf]|â€[\u0080-\u00bf™œž\u201a-\u201e\u2020-\u2022\u2026]|ï¿½|æ[\u0080-\u00bf][\u0080-\u00bf]")
TERMINAL_PUNCT = (".", "?", "!", '"', "'", "。", "！", "？", "”", "…")
# C4's marks, with the typographic closing quotes that stand for its straight ones in typeset text
C4_END_PUNCT = (".", "?", "!", '"', "'", "”", "’")
# what may close a sentence after its mark: a bracket, Markdown emphasis ("(_Thanks, Steve!_)")
_CLOSERS = ")]_*"
# informal text (e-mail, chat, forums) ends a sentence with a smiley as often as with a full stop
_SMILEY_END = re.compile(r"[:;]-?[)(DPp]+$")
_SMILEY_MOUTHS = frozenset(")(DPp")
# a note's mark after the sentence's end, as PDF text sets a superscript: "fits that description.5", "practice.”12";
# the word before the mark is a word, not a file name or a number ("libpq.so.2", "version 2.5")
_NOTE_MARK_END = re.compile(r"(?:^|\s)[(“‘\"']?[^\W\d_](?:[^\W\d_]|[’'-])*[.?!][”’\"')\]]?\d{1,3}$")
# a list item starts a line of its own, whatever the line above it ends with ("the steps are:")
_LIST_ITEM = re.compile(r"(?:[-*+•]|\d{1,3}[.)])\s")
# the marks of a quoted e-mail reply, one per depth
_QUOTE = re.compile(r">(?:[ \t]?>)*[ \t]?")
# a line ending in one of these has not ended its sentence: a verse line, a speaker's name, a lead-in
CLAUSE_PUNCT = (",", ";", ":")
# no sentence starts with these: a line that does runs on from the line above ("detection\n:cite:`Ren`.")
_NO_SENTENCE_OPENS = frozenset(",;:)]")


# e-mail and plain text are wrapped at 72-80 columns; a line at least WRAPPED_LINE_CHARS long that stops
# mid-sentence in such a text was broken by the wrap, whatever the next line starts with ("I", a name)
WRAP_WIDTH, WRAPPED_LINE_CHARS, MIN_WRAPPED_LINES = 80, 50, 3
# a log line, a URL or a pasted table runs past the width of a wrapped message; one in ten lines may
MAX_SHARE_OVER_WIDTH = 0.1


def logical_lines(text: str, join_wrapped: bool, join_verse: bool = False) -> list[list[str]]:
    """The stripped non-empty lines, grouped into the lines a web page would show: a line that has not ended its
    sentence is continued by the next when that one starts in lower case (e-mail, Markdown and plain-text books
    wrap at a width), when it ends in a comma, semicolon or colon (verse, a speaker's name above the speech,
    a lead-in), or when the text is hard-wrapped and the line runs close to the width; a blank line or a list
    item ends a group. Web text, one paragraph a line, is left as it is. With `join_verse`, a stanza's lines
    that stop mid-sentence run on to the line that ends the sentence (`verse_sentences`)."""
    lines = [line.strip() for line in text.split("\n")]
    wrapped = join_wrapped and hard_wrapped(lines)
    groups: list[list[str]] = []
    block_starts = [0]  # the group each block of lines (between blank lines) starts with
    previous = ""
    for line in lines:
        if not line and groups and block_starts[-1] < len(groups):
            block_starts.append(len(groups))
        if line and join_wrapped and previous and continues(previous, line, wrapped):
            groups[-1].append(line)
        elif line:
            groups.append([line])
        previous = line
    if not (join_wrapped and join_verse):
        return groups
    bounds = zip(block_starts, block_starts[1:] + [len(groups)])
    return [group for start, end in bounds for group in verse_sentences(groups[start:end])]


# verse: a stanza of at least VERSE_MIN_LINES lines, none past the width of a printed line and most of them
# short, starting in upper case and ending in a mark (a comma or a full stop; a line without one runs on)
VERSE_MIN_LINES, VERSE_MAX_MEDIAN_CHARS, VERSE_MIN_UPPER_SHARE, VERSE_MIN_PUNCT_SHARE = 4, 60, 0.8, 0.5
_LINE_END_MARKS = CLAUSE_PUNCT + C4_END_PUNCT + (")",)


def is_verse(lines: list[str]) -> bool:
    """Lines set as verse: each starts in upper case whatever the sentence does, and where a line stops
    without a mark its sentence runs on into the next (a stanza of a play or poem; not a menu or a list of
    links, whose lines end in no mark, nor a web page's paragraphs, each a line longer than print's)."""
    lengths = sorted(map(len, lines))
    if len(lines) < VERSE_MIN_LINES or lengths[-1] > WRAP_WIDTH:
        return False
    median_chars = lengths[len(lengths) // 2]
    upper = sum(line[0].isupper() for line in lines) / len(lines)
    marked = sum(line.endswith(_LINE_END_MARKS) for line in lines) / len(lines)
    return median_chars <= VERSE_MAX_MEDIAN_CHARS and upper >= VERSE_MIN_UPPER_SHARE and \
        marked >= VERSE_MIN_PUNCT_SHARE


def verse_sentences(block: list[list[str]]) -> list[list[str]]:
    """A block's groups, those of a stanza (`is_verse`) joined into its sentences: a group that stops
    mid-sentence runs on to the next group that ends one (a group that ends a sentence stays as it is, so a
    short line still counts as short). Lines after the stanza's last sentence end stay as they are."""
    if not is_verse([line for group in block for line in group]):
        return block
    sentences: list[list[str]] = []
    running_on: list[list[str]] = []
    for group in block:
        if ends_sentence(group[-1]):
            sentences.append([line for earlier in running_on for line in earlier] + group)
            running_on = []
        else:
            running_on.append(group)
    return sentences + running_on


def hard_wrapped(lines: list[str]) -> bool:
    """Few lines past the wrap width, and enough lines near it: text wrapped at a width, not one paragraph a
    line."""
    lengths = [len(line) for line in lines if line]
    over = sum(n > WRAP_WIDTH for n in lengths)
    return over <= MAX_SHARE_OVER_WIDTH * len(lengths) and \
        sum(WRAPPED_LINE_CHARS <= n <= WRAP_WIDTH for n in lengths) >= MIN_WRAPPED_LINES


def fenced_blocks(text: str) -> list[tuple[bool, str]]:
    """The text as (is fenced code, lines) blocks in order: a Markdown ``` or ~~~ fence and its lines, through the
    closing fence (an unclosed fence runs to the end, as Markdown renders it), and the text between fences."""
    if "```" not in text and "~~~" not in text:
        return [(False, text)]
    blocks: list[tuple[bool, str]] = []
    lines: list[str] = []
    fenced = False
    for line in text.split("\n"):
        fence = line.lstrip().startswith(("```", "~~~"))
        if fence and not fenced and lines:
            blocks.append((False, "\n".join(lines)))
            lines = []
        lines.append(line)
        if fence:
            if fenced:
                blocks.append((True, "\n".join(lines)))
                lines = []
            fenced = not fenced
    if lines:
        blocks.append((fenced, "\n".join(lines)))
    return blocks


# a display equation (TeX, as MathJax pages, Stack Exchange and Markdown books write it): $$...$$ or \[...\] on
# lines of their own or on one line, or a math environment; it holds TeX (a command, a sub- or superscript, an
# equals sign), so "$$$ CASH $$$" is not one, and it closes within MAX_DISPLAY_MATH_LINES lines or is not one
_MATH_ENV = r"(?:equation|align|gather|multline|eqnarray|displaymath)\*?"
_DISPLAY_MATH = [  # (its opening, at a line's start; its closing, at a line's end)
    (re.compile(r"\$\$(?!\$)"), re.compile(r"(?<!\$)\$\$[.,;:]?$")),
    (re.compile(r"\\\["), re.compile(r"\\\][.,;:]?$")),
    (re.compile(r"\\begin\{" + _MATH_ENV + r"\}"), re.compile(r"\\end\{" + _MATH_ENV + r"\}[.,;:]?$")),
]
_TEX_CONTENT = re.compile(r"\\[A-Za-z]+|[_^=]")
MAX_DISPLAY_MATH_LINES = 40


def display_math_blocks(text: str) -> list[tuple[bool, str]]:
    """The text as (is a display equation, lines) blocks in order (`_DISPLAY_MATH_OPEN`)."""
    if "$$" not in text and "\\" not in text:
        return [(False, text)]
    lines = text.split("\n")
    blocks: list[tuple[bool, str]] = []
    start = k = 0
    while k < len(lines):
        end = display_math_end(lines, k)
        if end is None:
            k += 1
            continue
        if start < k:
            blocks.append((False, "\n".join(lines[start:k])))
        blocks.append((True, "\n".join(lines[k:end])))
        start = k = end
    if start < len(lines):
        blocks.append((False, "\n".join(lines[start:])))
    return blocks


def prose_and_set_aside(text: str, code: bool, math: bool, prose_text: str | None = None) -> tuple[str, int]:
    """The prose the prose rules judge and how many blocks they set aside to get it: Markdown fenced code blocks
    (`code`; `without_fenced_code`, or `prose_text` when the caller has it) and then display equations (`math`; an
    equation's `$$` lines would read as duplicated lines, its TeX as words without stop words). The blocks are
    text the rules keep, so the length minima count them (`C4Rule`, `GopherQualityRule`)."""
    n_code = sum(is_code for is_code, _ in fenced_blocks(text)) if code else 0
    prose = (without_fenced_code(text) if prose_text is None else prose_text) if code else text
    if not math:
        return prose, n_code
    blocks = display_math_blocks(prose)
    return "\n".join(block for is_math, block in blocks if not is_math), n_code + sum(m for m, _ in blocks)


def display_math_end(lines: list[str], k: int) -> int | None:
    """The line after the display equation that starts at line k, or None when none starts there."""
    first = lines[k].strip()
    opened = next(((m, close) for opening, close in _DISPLAY_MATH if (m := opening.match(first))), None)
    if opened is None:
        return None
    opening, close = opened
    for end in range(k, min(k + MAX_DISPLAY_MATH_LINES, len(lines))):
        line = first[opening.end():] if end == k else lines[end].strip()
        if close.search(line):
            return end + 1 if _TEX_CONTENT.search("\n".join(lines[k:end + 1])) else None
        if end > k and not line:
            return None  # a blank line: the "equation" did not close, it was a sum of money or a stray mark
    return None


def prose_blocks(text: str) -> list[tuple[str, bool]]:
    """The text between a Markdown page's fenced code blocks, each with whether it leads into the code after it
    (ends in a colon: "Run it with:")."""
    blocks = fenced_blocks(text)
    return [(block, block.endswith(":") and k + 1 < len(blocks)) for k, (is_code, block) in enumerate(blocks)
            if not is_code]


def without_fenced_code(text: str) -> str:
    """The prose of a Markdown page: its fenced code blocks left out, and the line that leads into one ("run it
    with:") ending its sentence, as it does with the code after it."""
    return "\n".join(block[:-1] + "." if lead_in else block for block, lead_in in prose_blocks(text))


def code_lead_ins(text: str) -> set[str]:
    """The lines that lead into a fenced code block, as `without_fenced_code` ends them ("Run it with."): the
    code's captions, which a tutorial repeats as a page repeats its headings."""
    return {block.rsplit("\n", 1)[-1].strip()[:-1] + "." for block, lead_in in prose_blocks(text) if lead_in}


def ends_sentence(line: str) -> bool:
    """C4's terminal punctuation (also inside a closing bracket or emphasis, or before a note's mark), or a smiley."""
    if line.endswith(C4_END_PUNCT):
        return True
    if line[-1:] in _SMILEY_MOUTHS and _SMILEY_END.search(line) is not None:
        return True
    if line[-1:].isdigit() and _NOTE_MARK_END.search(line) is not None:
        return True
    # an aside in brackets is a sentence too: "(I hope so.)"
    return line[-1:] in _CLOSERS and line.rstrip(_CLOSERS).endswith(C4_END_PUNCT)


def continues(previous: str, line: str, wrapped: bool) -> bool:
    if ends_sentence(previous) or _LIST_ITEM.match(line):
        return False
    if line[0] == ">" or previous[0] == ">":
        # a quoted reply continues only at its own depth: "> > the quoted text\n> > wrapped here"
        quote = _QUOTE.match(previous)
        if quote is None or not line.startswith(quote.group()) or _QUOTE.match(line).end() != quote.end():
            return False
        line = line[quote.end():]
        if not line:
            return False
    return line[0].islower() or line[0] in _NO_SENTENCE_OPENS or previous.endswith(CLAUSE_PUNCT) or \
        (wrapped and len(previous) >= WRAPPED_LINE_CHARS)


def find_duplicates(items: list[str]) -> tuple[int, int]:
    """(repeated elements, characters in repeated elements), first occurrences excluded."""
    seen: set[str] = set()
    dup, dup_chars = 0, 0
    for item in items:
        if item in seen:
            dup += 1
            dup_chars += len(item)
        else:
            seen.add(item)
    return dup, dup_chars


def top_char_ngram_chars(text: str, n: int) -> int:
    """top_ngram_chars over the characters of a string: n-grams as 64-bit polynomial hashes in numpy."""
    if len(text) < n:
        return 0
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    grams = np.zeros(len(codes) - n + 1, dtype=np.uint64)
    for k in range(n):  # wraps mod 2^64 on purpose; collisions among a document's n-grams are negligible
        grams = grams * np.uint64(1_000_003) + codes[k:len(codes) - n + 1 + k]
    count = int(np.unique(grams, return_counts=True)[1].max())
    return n * count if count > 1 else 0


def dup_char_ngram_chars(text: str, n: int) -> int:
    """dup_ngram_chars over the characters of a string."""
    seen: set[str] = set()
    repeated, i, last = 0, 0, len(text) - n
    while i <= last:
        gram = text[i:i + n]
        if gram in seen:
            repeated += n
            i += n
        else:
            seen.add(gram)
            i += 1
    return repeated


def dup_sentence_chars(text: str, min_chars: int) -> tuple[int, int]:
    """(characters in sentences of at least min_chars that repeat an earlier one, characters in all sentences),
    whitespace ignored."""
    sentences = ["".join(s.split()) for s in _ZH_SENTENCE.findall(text)]
    long_ones = [s for s in sentences if len(s) >= min_chars]
    return find_duplicates(long_ones)[1], sum(map(len, sentences))


def doubled_span(text: str, min_chars: int, probe: int = 32, step: int = 64) -> tuple[int, int] | None:
    """(start, end) of the second copy where a passage of at least min_chars runs twice in a row (a scraper that
    printed an article's body twice), else None. Probes every `step` characters for a later copy, then measures
    the match around it."""
    n = len(text)
    for i in range(0, n - 2 * min_chars + 1, step):
        key = text[i:i + probe]
        j = text.find(key, i + min_chars)
        while j != -1:
            period, before = j - i, _common_suffix(text, i, j)
            if before + _common_prefix(text, i, j) >= period:
                return i - before + period, i - before + 2 * period
            j = text.find(key, j + 1)
    return None


def _common_prefix(text: str, a: int, b: int) -> int:
    """How many characters from a and from b agree (b > a)."""
    n, limit = 0, len(text) - b
    while n < limit:
        step = min(64, limit - n)
        if text[a + n:a + n + step] != text[b + n:b + n + step]:
            while text[a + n] == text[b + n]:
                n += 1
            return n
        n += step
    return n


def _common_suffix(text: str, a: int, b: int) -> int:
    """How many characters before a and before b agree (b > a)."""
    n = 0
    while n < a and text[a - n - 1] == text[b - n - 1]:
        n += 1
    return n


def top_ngram_chars(units: list[str], n: int, joiner: str = " ") -> int:
    """Characters covered by the most frequent n-gram (its length times its count)."""
    if len(units) < n:
        return 0
    grams = Counter(joiner.join(units[i:i + n]) for i in range(len(units) - n + 1))
    gram, count = grams.most_common(1)[0]
    return len(gram) * count if count > 1 else 0


def dup_ngram_chars(units: list[str], n: int, counts: Callable[[int, tuple], bool] | None = None) -> int:
    """Characters inside n-grams that already occurred (non-overlapping), as in Gopher; with `counts`, only the
    repeated n-grams it accepts (given the n-gram's position and its units)."""
    seen: set[tuple] = set()
    repeated, i = 0, 0
    while i <= len(units) - n:
        gram = tuple(units[i:i + n])
        if gram in seen and (counts is None or counts(i, gram)):
            repeated += sum(len(u) for u in gram)
            i += n
        else:
            seen.add(gram)
            i += 1
    return repeated


# an English sentence ends at a mark followed by a space (a line break ends one too: lines are split first)
_EN_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def is_word(token: str) -> bool:
    """A token that is not pure punctuation: a token is a run of word characters or one mark, and its first
    character decides, unless it is "_"."""
    return token[0].isalnum() or (token[0] == "_" and any(c.isalnum() for c in token))


def copy_marked_words(lines: list[str]) -> tuple[list[str], list[bool]]:
    """The words of the lines (as DocFeatures.words counts them) and, for each, whether it lies in a sentence that
    copies an earlier sentence of the lines."""
    seen_sentences: set[tuple[str, ...]] = set()
    words: list[str] = []
    in_copy: list[bool] = []
    for line in lines:
        for sentence in _EN_SENTENCE_END.split(line):
            sentence_words = tuple(t for t in _TOKEN.findall(sentence) if is_word(t))
            words.extend(sentence_words)
            in_copy.extend([sentence_words in seen_sentences] * len(sentence_words))
            if sentence_words:
                seen_sentences.add(sentence_words)
    return words, in_copy


def copied_dup_ngram_chars(words: list[str], in_copy: list[bool], n: int, prose_words: set[str]) -> int:
    """dup_ngram_chars where a repeated n-gram of prose (holding one of `prose_words` as written, in lower case, as
    inside a sentence) counts only when its words all lie in sentences that copy an earlier sentence
    (`copy_marked_words`): a clause that legal or technical text repeats across sentences that differ ("where the
    rail on the wall adjacent to the WC is set ...", item after item) is formula, while boilerplate and spam copy
    whole sentences. A repeated n-gram without such a word (markup attributes, a list of names or numbers) counts
    wherever it is, as in Gopher."""
    return dup_ngram_chars(words, n, lambda i, gram: all(in_copy[i:i + n]) or not prose_words & set(gram))


class DocFeatures:
    def __init__(self, text: str):
        self.text = text

    @cached_property
    def n_chars(self) -> int:
        return len(self.text)

    @cached_property
    def n_non_space(self) -> int:
        return len(self.text) - sum(self.text.count(c) for c in _WHITESPACE)

    @cached_property
    def compact(self) -> str:
        """The text without whitespace and without layout lines (a Markdown table's rule row, a horizontal
        rule): the unit string of character n-gram rules. A table's `|---|---|` is drawing, not repeated text."""
        text = _LAYOUT_LINE.sub("", self.text) if "--" in self.text or "==" in self.text else self.text
        return "".join(text.split())

    @cached_property
    def prose_text(self) -> str:
        """The text without its Markdown fenced code (`without_fenced_code`): channel tagging and the prose rules
        both read it, once."""
        return without_fenced_code(self.text)

    @cached_property
    def raw_lines(self) -> list[str]:
        return self.text.split("\n")

    @cached_property
    def lines(self) -> list[str]:
        return [line.strip() for line in self.raw_lines if line.strip()]

    @cached_property
    def logical_lines(self) -> list[str]:
        """The lines as a web page would show them (`logical_lines`), each group joined with a space."""
        return [" ".join(group) for group in logical_lines(self.text, True)]

    @cached_property
    def paragraphs(self) -> list[str]:
        return [p for p in re.split(r"\n{2,}", self.text.strip()) if p]

    @cached_property
    def tokens(self) -> list[str]:
        """Words and punctuation marks (each mark its own token), as a word tokenizer would split."""
        return _TOKEN.findall(self.text)

    @cached_property
    def words(self) -> list[str]:
        """Tokens that are not pure punctuation."""
        return [t for t in self.tokens if is_word(t)]

    @cached_property
    def n_cjk(self) -> int:
        return sum(map(len, _CJK_RUN.findall(self.text)))

    @cached_property
    def cjk_ratio(self) -> float:
        return self.n_cjk / max(self.n_non_space, 1)

    @cached_property
    def cjk_unit_share(self) -> float:
        """CJK characters among the text's units (a CJK character, a Latin word or number, a symbol): a Chinese
        technical text that names APIs in English is Chinese by this measure, as it is not by characters."""
        # every CJK character is a unit of its own, so the CJK units are the CJK characters
        return self.n_cjk / max(len(_TEXT_UNIT.findall(self.text)) + len(_SYMBOL.findall(self.text)), 1)

    @cached_property
    def punct_marks(self) -> int:
        return len(_PUNCT_MARK.findall(self.text))

    @cached_property
    def symbol_ratio(self) -> float:
        return len(_SYMBOL.findall(self.text)) / max(self.n_non_space, 1)

    @cached_property
    def replacement_ratio(self) -> float:
        return self.text.count("\ufffd") / max(self.n_chars, 1)

    @cached_property
    def mojibake_ratio(self) -> float:
        return sum(len(m) for m in _MOJIBAKE.findall(self.text)) / max(self.n_chars, 1)

    @cached_property
    def newline_ratio(self) -> float:
        return self.text.count("\n") / max(self.n_chars, 1)

    @cached_property
    def code_line_ratio(self) -> float:
        return len(_CODE_SIGNALS.findall(self.text)) / max(len(self.lines), 1) if self.lines else 0.0

    @cached_property
    def max_line_chars(self) -> int:
        return max((len(line) for line in self.raw_lines), default=0)

    @cached_property
    def alnum_ratio(self) -> float:
        return (self.n_chars - len(_NON_ALNUM.findall(self.text))) / max(self.n_chars, 1)
