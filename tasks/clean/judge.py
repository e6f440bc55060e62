"""The per-document judge: normalize, tag the channel, apply the rules' edits, then the rules; one verdict each."""
from __future__ import annotations

from dataclasses import dataclass, field

from pretrain.channels import CHANNELS
from pretrain.config import CleanConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures, prose_and_set_aside
from tasks.clean.normalize import normalize_text, to_simplified
from tasks.clean.readers import RawDoc
from tasks.clean.rules import Doc, Failure, build_rules, judge_rules


@dataclass
class Verdict:
    text: str
    channel: str
    failure: Failure | None
    flags: list[str] = field(default_factory=list)
    scores: dict[str, float] = field(default_factory=dict)
    repairs: list[str] = field(default_factory=list)
    lines_removed: dict[str, int] = field(default_factory=dict)  # 'rule/filter' -> lines its edit removed


@dataclass
class Prepared:
    text: str
    channel: str
    repairs: list[str]
    feats: DocFeatures
    lines_removed: dict[str, int]


class Cleaner:
    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.rules = build_rules(cfg.rules)
        self.editors = {channel: [r for r in self.rules if r.edit_repair and channel in r.channels]
                        for channel in CHANNELS}

    def classifier_report(self) -> dict:
        """Per channel, what the dirty rule's classifier learned from and the threshold its cross-validation chose."""
        dirty = next(r for r in self.rules if r.name == "dirty")
        return {channel: model.report() for channel, model in sorted(dirty.classifiers.items())}

    def eval_set_report(self) -> dict:
        """Per eval set of the decontamination rule: the items it read and the windows it holds."""
        decontam = next(r for r in self.rules if r.name == "decontam")
        return {eval_set.name: eval_set.summary() for eval_set in decontam.sets}

    def prepare(self, raw: RawDoc) -> Prepared:
        """Normalize, tag the channel, apply the text-editing steps (t2s, the rules' edits); features of the result."""
        text, repairs = normalize_text(raw.text, self.cfg.normalize, keep_indentation=raw.channel_hint == "code")
        feats = DocFeatures(text)
        channel = detect_channel(feats, raw.channel_hint) if text.strip() else "other"
        if channel == "zh" and self.cfg.normalize.traditional_to_simplified:
            simplified = to_simplified(text)
            if simplified != text:
                text, repairs = simplified, repairs + ["traditional_to_simplified"]
        lines_removed: dict[str, int] = {}
        for rule in self.editors.get(channel, ()):
            edited, removed = rule.edit_counted(text)
            lines_removed.update({f"{rule.name}/{why}": n for why, n in removed.items() if n})
            if edited != text:
                text, repairs = edited, repairs + [rule.edit_repair]
        # the features computed for channel detection serve the rules too, unless an edit changed the text
        return Prepared(text, channel, repairs, feats if feats.text == text else DocFeatures(text), lines_removed)

    def judge(self, raw: RawDoc) -> Verdict:
        if raw.problem:
            return Verdict(raw.text, "other", Failure("input", raw.problem, float(raw.size_bytes or 0)))
        length = self.cfg.rules.length
        if length.mode == "drop" and len(raw.text) > length.max_chars:
            # judged on the raw text: normalizing a 50 MB line first would cost seconds for nothing
            return Verdict(raw.text, "other", Failure("length", "too_long", float(len(raw.text))))
        p = self.prepare(raw)
        repairs = ([raw.repaired] if raw.repaired else []) + p.repairs
        if not p.text.strip():
            return Verdict(p.text, p.channel, self.emptied(p.channel, repairs), repairs=repairs,
                           lines_removed=p.lines_removed)
        result = judge_rules(self.rules, Doc(p.text, p.channel, p.feats, *self.prose(p)))
        failure = result.failure
        if failure is None and p.channel not in self.cfg.keep_channels:
            failure = Failure("channel", "unsupported_language", 0.0)
        return Verdict(p.text, p.channel, failure, result.flags, result.scores, repairs, p.lines_removed)

    def prose(self, p: Prepared) -> tuple[DocFeatures, int]:
        """The features the prose rules judge, and how many blocks they leave out (the length minima count them):
        a Markdown page's fenced code is code, which C4 would reject for a curly bracket and Gopher would count as
        words without stop words; so is a display equation's TeX."""
        c4 = self.cfg.rules.c4
        prose, set_aside = prose_and_set_aside(p.text, c4.keep_fenced_code, c4.keep_tex_math,
                                               p.feats.prose_text if c4.keep_fenced_code else None)
        return (p.feats if prose == p.text else DocFeatures(prose)), set_aside

    def emptied(self, channel: str, repairs: list[str]) -> Failure:
        """Why a document has no text left: the last edit that removed some, else normalization."""
        editor = next((r for r in reversed(self.editors.get(channel, ())) if r.edit_repair in repairs), None)
        return Failure(editor.name, editor.emptied_reason, 0.0) if editor else \
            Failure("length", "empty_after_normalization", 0.0)
