"""Decontamination: a document that shares n-gram windows with evaluation data is not training text."""
from __future__ import annotations

from pretrain.channels import CHANNELS
from tasks.clean.eval_sets import load_eval_ngrams, token_hashes, tokens, windows_of
from tasks.clean.rules.base import Doc, Outcome, Rule


class DecontamRule(Rule):
    name = "decontam"
    channels = CHANNELS

    def __init__(self, settings):
        super().__init__(settings)
        bounds = (settings.ngram, settings.min_ngram, settings.min_ngram_cjk)
        self.sets = [load_eval_ngrams(s, *bounds) for s in settings.eval_sets] if self.mode != "off" else []

    def applies(self, doc: Doc) -> bool:
        return bool(self.sets) and super().applies(doc)

    def evaluate(self, doc: Doc) -> Outcome:
        out = Outcome(self.name)
        token_hash = token_hashes(tokens(doc.text))
        windows = {n: windows_of(token_hash, n) for n in {eval_set.n for eval_set in self.sets}}
        for eval_set in self.sets:
            found = eval_set.matches(windows[eval_set.n])
            out.check(f"{eval_set.name}.matches", found, found < self.settings.min_matches,
                      f"eval_overlap_{eval_set.name}")
        return out
