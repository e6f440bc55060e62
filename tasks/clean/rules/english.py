"""English prose rules: Gopher quality and repetition, C4, FineWeb (the papers' thresholds by default)."""
from __future__ import annotations

import re

from tasks.clean.features import (DocFeatures, TERMINAL_PUNCT, code_lead_ins, copied_dup_ngram_chars, copy_marked_words,
                                  display_math_blocks, dup_ngram_chars, ends_sentence, fenced_blocks, find_duplicates,
                                  logical_lines, top_ngram_chars)
from tasks.clean.rules.base import Doc, Outcome, Rule

STOP_WORDS = {"the", "be", "to", "of", "and", "that", "have", "with"}
_CITATION = re.compile(r"\[\d*]|\[edit]|\[citation needed]")
# Markdown inline code (`${TASK_NAME}`): code, as a fenced block is, for the curly-bracket check
_INLINE_CODE = re.compile(r"`[^`\n]+`")
# TeX math, as MathJax and KaTeX pages, Stack Exchange and arXiv listings write it: display math ($$...$$, \[...\],
# across lines too) and inline math (\(...\); $...$ opening before and closing after a non-space, not before a
# digit, so "$5 or {x} $10" is two sums of money, as pandoc reads dollars). Its braces group symbols ({\cal P},
# x^{2}): math, not code, which C4's bracket check was for and which dropped such pages (Paster et al., 2023)
# (a span stops at the next opening of its kind, so a page of unclosed "\[" is read in linear time)
_TEX_MATH = re.compile(r"\$\$.{1,4000}?\$\$|\\\[(?:(?!\\\[).){1,4000}?\\\]|\\\((?:(?!\\\().){1,1000}?\\\)"
                       r"|\$(?=[^\s$])(?:[^$\n]|\n(?!\n)){0,1000}?(?<=\S)\$(?!\d)", re.DOTALL)
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")
POLICY_SUBSTRINGS = ("terms of use", "privacy policy", "cookie policy", "uses cookies", "use of cookies",
                     "use cookies")


class GopherQualityRule(Rule):
    name = "gopher_quality"
    channels = ("en",)

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.prose, Outcome(self.name)
        words, n_tokens = f.words, max(len(f.tokens), 1)
        # the length counts every word, code and equations too, as Gopher's does; the ratios read the prose
        n_words = len(doc.feats.words)
        out.check("n_words", n_words, n_words >= s.min_doc_words, "gopher_short_doc")
        out.check("n_words", n_words, n_words <= s.max_doc_words, "gopher_long_doc")
        avg = sum(map(len, words)) / max(len(words), 1)
        out.check("avg_word_length", avg, s.min_avg_word_length <= avg <= s.max_avg_word_length, "gopher_avg_word_length")
        out.check("hash_ratio", f.text.count("#") / n_tokens, f.text.count("#") / n_tokens <= s.max_symbol_word_ratio,
                  "gopher_too_many_hashes")
        ellipses = (f.text.count("...") + f.text.count("…")) / n_tokens
        out.check("ellipsis_ratio", ellipses, ellipses <= s.max_symbol_word_ratio, "gopher_too_many_ellipsis")
        n_lines = max(len(f.lines), 1)
        bullets = sum(line.startswith(("•", "-")) for line in f.lines) / n_lines
        out.check("bullet_lines", bullets, bullets <= s.max_bullet_lines_ratio, "gopher_too_many_bullets")
        end_ellipsis = sum(line.endswith(("...", "…")) for line in f.lines) / n_lines
        out.check("ellipsis_lines", end_ellipsis, end_ellipsis <= s.max_ellipsis_lines_ratio, "gopher_too_many_end_ellipsis")
        # over words, not over punctuation marks as datatrove counts: its ratio rejected half of ordinary prose
        alpha = sum(w[0].isalpha() or any(c.isalpha() for c in w) for w in words) / max(len(words), 1)
        out.check("alpha_words", alpha, alpha >= s.min_alpha_words_ratio, "gopher_below_alpha_threshold")
        stops = len(STOP_WORDS & set(f.tokens))
        out.check("stop_words", stops, stops >= s.min_stop_words, "gopher_not_enough_stop_words")
        return out


class GopherRepetitionRule(Rule):
    name = "gopher_repetition"
    channels = ("en",)

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.prose, Outcome(self.name)
        n_chars = max(f.n_chars, 1)
        dup, dup_chars = find_duplicates(f.paragraphs)
        out.check("dup_para_frac", dup / max(len(f.paragraphs), 1), dup / max(len(f.paragraphs), 1) <= s.dup_para_frac)
        out.check("dup_para_char_frac", dup_chars / n_chars, dup_chars / n_chars <= s.dup_para_char_frac)
        lines = f.logical_lines if s.join_wrapped_lines else [line for line in f.raw_lines if line]
        dup, dup_chars = find_duplicates(lines)
        out.check("dup_line_frac", dup / max(len(lines), 1), dup / max(len(lines), 1) <= s.dup_line_frac)
        out.check("dup_line_char_frac", dup_chars / n_chars, dup_chars / n_chars <= s.dup_line_char_frac)
        for n, limit in sorted(s.top_n_grams.items()):
            frac = top_ngram_chars(f.words, n) / n_chars
            out.check(f"top_{n}_gram", frac, frac <= limit)
        frac = 1.0
        marked = None if s.count_formulaic_n_grams else copy_marked_words(f.lines)
        for n, limit in sorted(s.dup_n_grams.items()):
            if frac > 0:  # none at n: none above
                repeated = dup_ngram_chars(f.words, n) if marked is None else \
                    copied_dup_ngram_chars(*marked, n, STOP_WORDS)
                frac = repeated / n_chars
            out.check(f"dup_{n}_gram", frac, frac <= limit)
        return out


def c4_filter_lines(text: str, s) -> tuple[str, dict[str, int]]:
    """C4's line filters: returns the kept text and how many lines each filter removed. A hard-wrapped
    paragraph is judged as the one line it would be on a web page, and kept with its line breaks; a Markdown
    fenced code block is code, not lines of prose, and is kept as it is (`keep_fenced_code`), with the line that
    leads into it ("Run it with:"); so is a display equation (`keep_tex_math`), with the line whose sentence runs
    on into it ("we obtain")."""
    removed = {"no_terminal_punct": 0, "few_words": 0, "long_word": 0, "javascript": 0, "policy": 0}
    blocks = [("code" if is_code else "prose", block)
              for is_code, block in (fenced_blocks(text) if s.keep_fenced_code else [(False, text)])]
    if s.keep_tex_math:
        blocks = [part for kind, block in blocks for part in ([(kind, block)] if kind == "code" else
                  [("math" if is_math else "prose", b) for is_math, b in display_math_blocks(block)])]
    if len(blocks) == 1:
        return prose_lines_kept(text, s, removed) if blocks[0][0] == "prose" else text, removed
    kept = [prose_lines_kept(block, s, removed, leads_into=blocks[k + 1][0] if k + 1 < len(blocks) else None)
            if kind == "prose" else block for k, (kind, block) in enumerate(blocks)]
    return "\n".join(block for block in kept if block), removed


def prose_lines_kept(text: str, s, removed: dict[str, int], leads_into: str | None = None) -> str:
    """The lines of `text` that pass C4's line filters; what each filter removed is added to `removed`.
    `leads_into`: what follows the text ("code", "math"): its last line is judged as the sentence it leads into."""
    kept = []
    groups = logical_lines(text, s.join_wrapped_lines, s.join_verse_lines)
    for k, lines in enumerate(groups):
        if s.remove_citations:
            lines = [_CITATION.sub("", line) for line in lines]
        line = " ".join(lines)
        if k == len(groups) - 1 and leads_into:
            line = as_lead_in(line, leads_into)
        failed = c4_line_failure(line, s)
        if failed:
            removed[failed] += len(lines)
        else:
            kept.extend(lines)
    return "\n".join(kept)


def as_lead_in(line: str, leads_into: str) -> str:
    """The line judged with the block it leads into: a caption ("Run it with:") ends its sentence with the code
    after it, and a sentence that stops before a display equation ("we obtain", "as follows:", "where") ends
    with the equation."""
    if line.endswith(":"):
        return line[:-1] + "."
    if leads_into == "math" and not ends_sentence(line):
        return line.rstrip(",;") + "."
    return line


# an item of a drafted list ("(a)", "b.", "(iii)", "(2)", "- ") that ends its clause, not its sentence:
# "(a) safely; and" is one clause of the sentence the list makes, as regulations, contracts and standards draft
_LIST_CLAUSE = re.compile(r"(?:\(?[a-z]{1,4}\)|[a-z]\.|\(?\d{1,3}[.)]|[-*+•])\s.*(?:;|; and|; or)$")


def c4_line_failure(line: str, s) -> str | None:
    words = line.split()
    if any(len(w) > s.max_word_length for w in words):
        return "long_word"
    ends = ends_sentence(line) or (s.keep_list_clauses and _LIST_CLAUSE.match(line) is not None)
    if s.drop_lines_without_terminal_punct and (not ends or line.endswith("...")):
        return "no_terminal_punct"
    if len(words) < s.min_words_per_line:
        return "few_words"
    if s.drop_javascript_lines and "javascript" in line.lower():
        return "javascript"
    if s.drop_policy_lines and any(p in line.lower() for p in POLICY_SUBSTRINGS):
        return "policy"
    return None


class C4Rule(Rule):
    """C4: line filters that edit the document before it is judged, then document checks."""

    name = "c4"
    channels = ("en",)
    edit_repair = "c4_lines_removed"
    emptied_reason = "c4_all_lines_removed"

    def edit(self, text: str) -> str:
        return self.edit_counted(text)[0]

    def edit_counted(self, text: str) -> tuple[str, dict[str, int]]:
        return c4_filter_lines(text, self.settings) if self.mode == "drop" else (text, {})

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.prose, Outcome(self.name)
        # a code block or display equation set aside counts as one, as a line without a sentence end does
        sentences = sentence_count(f) + doc.set_aside
        out.check("sentences", sentences, sentences >= s.min_num_sentences, "c4_too_few_sentences")
        lower = f.text.lower()
        if s.reject_lorem_ipsum:
            out.check("lorem_ipsum", "lorem ipsum" in lower, "lorem ipsum" not in lower, "c4_lorem_ipsum")
        if s.reject_curly_bracket:
            # C4 rejected a page for one bracket; one in an e-mail's shell line or an article's aside is no code
            braces = share_of_lines_with_braces(f, s)
            ok = braces <= s.max_curly_bracket_lines if s.max_curly_bracket_lines > 0 else "{" not in f.text
            out.check("curly_bracket_lines", braces, ok, "c4_curly_bracket")
        return out


def share_of_lines_with_braces(f: DocFeatures, s) -> float:
    """The share of the lines holding a curly bracket outside Markdown inline code (with `keep_fenced_code`) and
    TeX math (with `keep_tex_math`)."""
    lines = f.lines
    if s.keep_tex_math and ("$" in f.text or "\\" in f.text):
        lines = DocFeatures(_TEX_MATH.sub(_without_braces, f.text)).lines
    if s.keep_fenced_code:
        lines = [_INLINE_CODE.sub("", line) if "`" in line else line for line in lines]
    return sum("{" in line or "}" in line for line in lines) / max(len(lines), 1)


def _without_braces(math: re.Match) -> str:
    return math.group().replace("{", "").replace("}", "")


def sentence_count(f: DocFeatures) -> int:
    """C4's count: the sentence ends of each line, a line without one counting as one."""
    return sum(max(1, len(_SENTENCE_END.findall(line))) for line in f.lines)


class FineWebRule(Rule):
    name = "fineweb"
    channels = ("en",)

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.prose, Outcome(self.name)
        lines = f.logical_lines if s.join_wrapped_lines else [line for line in f.raw_lines if line.strip()]
        n_lines = max(len(lines), 1)
        punct = sum(line.endswith(TERMINAL_PUNCT) or ends_sentence(line) for line in lines) / n_lines
        out.check("line_punct_ratio", punct, punct >= s.line_punct_thr)
        short = sum(len(line) <= s.short_line_length for line in lines) / n_lines
        out.check("short_line_ratio", short, short <= s.short_line_thr)
        captions = code_lead_ins(doc.text) if doc.prose is not doc.feats else set()
        judged = [line for line in lines if line not in captions]
        if not s.count_title_echo and len(judged) > 1 and judged[0] == judged[1]:
            judged = judged[1:]  # a title over the heading or question that repeats it: said once, not boilerplate
        dup_chars = find_duplicates(judged)[1] / max(f.n_chars - f.text.count("\n"), 1)
        out.check("char_dup_ratio", dup_chars, dup_chars <= s.char_duplicates_ratio)
        list_ratio = f.text.count("\n") / max(len(f.words), 1)
        out.check("list_ratio", list_ratio, list_ratio <= s.new_line_ratio)
        return out
