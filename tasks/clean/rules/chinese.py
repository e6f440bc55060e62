"""Chinese prose rules: character-based equivalents of the length, ratio and repetition rules."""
from __future__ import annotations

from tasks.clean.features import doubled_span, dup_char_ngram_chars, dup_sentence_chars, top_char_ngram_chars
from tasks.clean.rules.base import Doc, Outcome, Rule


class ChineseRule(Rule):
    name = "chinese"
    channels = ("zh",)
    edit_repair = "zh_doubled_text_removed"
    emptied_reason = "zh_doubled_text_removed"  # never: one copy always stays

    def edit(self, text: str) -> str:
        """A text printed twice in a row keeps one copy: the article is worth keeping, the scraper's copy is not."""
        if self.mode != "drop" or not self.settings.repair_doubled_min_chars:
            return text
        span = doubled_span(text, self.settings.repair_doubled_min_chars)
        return text[:span[0]] + text[span[1]:] if span else text

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.prose, Outcome(self.name)
        out.check("cjk_chars", f.n_cjk, f.n_cjk >= s.min_cjk_chars, "zh_too_few_cjk_chars")
        out.check("cjk_unit_share", f.cjk_unit_share, f.cjk_unit_share >= s.min_cjk_ratio, "zh_low_cjk_ratio")
        per_k = 1000 * f.punct_marks / max(f.n_chars, 1)
        out.check("punct_per_kchar", per_k, per_k >= s.min_punct_per_kchar, "zh_too_little_punctuation")
        chars = f.compact
        n = max(len(chars), 1)
        for k, limit in sorted(s.top_char_ngram.items()):
            frac = top_char_ngram_chars(chars, k) / n
            out.check(f"top_{k}_char_gram", frac, frac <= limit, "zh_repeated_char_ngram")
        self._repetition(doc, out)
        return out

    def _repetition(self, doc: Doc, out: Outcome) -> None:
        """Copied sentences and long copied spans: what boilerplate and spam repeat. Phrases of 10-30 characters
        that recur inside different sentences are how laws, manuals and liturgy are written, and are not counted
        (benchmarks/genre_keep.py: up to 28% of a law chapter inside repeated 20-character spans)."""
        s, chars = self.settings, doc.prose.compact
        dup_chars, all_chars = dup_sentence_chars(doc.prose.text, s.min_sentence_chars)
        frac = dup_chars / max(all_chars, 1)
        out.check("dup_sentence_frac", frac, frac <= s.dup_sentence_frac, "zh_repeated_text")
        n = max(len(chars), 1)
        frac = 1.0
        for k, limit in sorted(s.dup_char_ngram.items()):
            # a repeated longer n-gram contains a repeated shorter one: none at k means none above
            frac = dup_char_ngram_chars(chars, k) / n if frac > 0 else 0.0
            out.check(f"dup_{k}_char_gram", frac, frac <= limit, "zh_repeated_text")
