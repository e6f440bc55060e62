"""Code rules: line lengths, alphanumeric share, generated-file markers."""
from __future__ import annotations

from tasks.clean.rules.base import Doc, Outcome, Rule


class CodeRule(Rule):
    name = "code"
    channels = ("code",)

    def evaluate(self, doc: Doc) -> Outcome:
        s, f, out = self.settings, doc.feats, Outcome(self.name)
        out.check("max_line_chars", f.max_line_chars, f.max_line_chars <= s.max_line_chars, "code_line_too_long")
        mean = sum(map(len, f.raw_lines)) / max(len(f.raw_lines), 1)
        out.check("mean_line_chars", mean, mean <= s.max_mean_line_chars, "code_lines_too_long_on_average")
        out.check("alnum_ratio", f.alnum_ratio, f.alnum_ratio >= s.min_alnum_ratio, "code_low_alnum_ratio")
        head = "\n".join(f.raw_lines[:10]).lower()
        generated = any(marker in head for marker in s.generated_markers)
        out.check("generated", generated, not generated, "code_generated_file")
        return out
