"""Rules for every channel: length and garbage."""
from __future__ import annotations

from pretrain.channels import CHANNELS
from tasks.clean.rules.base import Doc, Outcome, Rule




class LengthRule(Rule):
    name = "length"
    channels = CHANNELS

    def evaluate(self, doc: Doc) -> Outcome:
        s, out = self.settings, Outcome(self.name)
        out.check("chars", doc.feats.n_chars, doc.feats.n_chars >= s.min_chars, "too_short")
        out.check("chars", doc.feats.n_chars, doc.feats.n_chars <= s.max_chars, "too_long")
        return out


class GarbageRule(Rule):
    """Mojibake, replacement characters, symbol soup, newline runs; documents of only punctuation."""

    name = "garbage"
    channels = CHANNELS

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.feats, Outcome(self.name)
        out.check("alnum_chars", f.alnum_ratio, f.alnum_ratio > 0 or f.n_cjk > 0, "only_punctuation")
        out.check("replacement_ratio", f.replacement_ratio, f.replacement_ratio <= s.max_replacement_ratio)
        out.check("mojibake_ratio", f.mojibake_ratio, f.mojibake_ratio <= s.max_mojibake_ratio)
        if doc.channel != "code":  # code is legitimately full of symbols and short lines
            out.check("symbol_ratio", f.symbol_ratio, f.symbol_ratio <= s.max_symbol_ratio)
            out.check("newline_ratio", f.newline_ratio, f.newline_ratio <= s.max_newline_ratio)
        return out
