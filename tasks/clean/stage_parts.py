"""Pieces shared by the shard workers and the final step: output schemas, the per-document judge, the tally."""
from __future__ import annotations

from dataclasses import asdict

from collections import Counter, defaultdict

import pyarrow as pa

from pretrain.channels import CHANNELS
from pretrain.config import CleanConfig
from tasks.clean.channel import detect_channel
from tasks.clean.features import DocFeatures
from tasks.clean.normalize import normalize_text, to_simplified
from tasks.clean.readers import RawDoc
from tasks.clean.rules import Doc, Failure, build_rules, judge_rules

SCORES = pa.map_(pa.string(), pa.float32())
KEPT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                         ("text", pa.string()), ("repairs", pa.list_(pa.string())),
                         ("flags", pa.list_(pa.string())), ("scores", SCORES)])
REJECT_SCHEMA = pa.schema([("id", pa.string()), ("source", pa.string()), ("channel", pa.string()),
                           ("text", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                           ("score", pa.float64()), ("flags", pa.list_(pa.string())), ("scores", SCORES)])
STATS_SCHEMA = pa.schema([("outcome", pa.string()), ("rule", pa.string()), ("reason", pa.string()),
                          ("channel", pa.string()), ("docs", pa.int64()), ("chars", pa.int64())])


class Verdict:
    def __init__(self, text: str, channel: str, failure: Failure | None, flags: list[str],
                 scores: dict[str, float], repairs: list[str]):
        self.text, self.channel, self.failure = text, channel, failure
        self.flags, self.scores, self.repairs = flags, scores, repairs


class Cleaner:
    def __init__(self, cfg: CleanConfig):
        self.cfg = cfg
        self.rules = build_rules(cfg.rules)
        self.editors = {channel: [r for r in self.rules if r.edit_repair and channel in r.channels]
                        for channel in CHANNELS}

    def classifier_report(self) -> dict:
        """Per channel, what the dirty rule's classifier learned from and the threshold its cross-validation chose."""
        dirty = next(r for r in self.rules if r.name == "dirty")
        return {channel: {**asdict(model.cv), "judges_up_to_chars": model.judges_up_to_chars}
                for channel, model in sorted(dirty.classifiers.items())}

    def eval_set_report(self) -> dict:
        """Per eval set of the decontamination rule: the items it read and the windows it holds."""
        decontam = next(r for r in self.rules if r.name == "decontam")
        return {eval_set.name: eval_set.summary() for eval_set in decontam.sets}

    def prepare(self, raw: RawDoc) -> tuple[str, str, list[str], DocFeatures]:
        """Normalize, tag the channel, apply the text-editing steps (t2s, the rules' edits); features of the result."""
        text, repairs = normalize_text(raw.text, self.cfg.normalize, keep_indentation=raw.channel_hint == "code")
        feats = DocFeatures(text)
        channel = detect_channel(feats, raw.channel_hint) if text.strip() else "other"
        if channel == "zh" and self.cfg.normalize.traditional_to_simplified:
            simplified = to_simplified(text)
            if simplified != text:
                text, repairs = simplified, repairs + ["traditional_to_simplified"]
        for rule in self.editors.get(channel, ()):
            edited = rule.edit(text)
            if edited != text:
                text, repairs = edited, repairs + [rule.edit_repair]
        # the features computed for channel detection serve the rules too, unless an edit changed the text
        return text, channel, repairs, feats if feats.text == text else DocFeatures(text)

    def judge(self, raw: RawDoc) -> Verdict:
        if raw.problem:
            return Verdict(raw.text, "other", Failure("input", raw.problem, float(raw.size_bytes or 0)), [], {}, [])
        length = self.cfg.rules.length
        if length.mode == "drop" and len(raw.text) > length.max_chars:
            # judged on the raw text: normalizing a 50 MB line first would cost seconds for nothing
            return Verdict(raw.text, "other", Failure("length", "too_long", float(len(raw.text))), [], {}, [])
        text, channel, repairs, feats = self.prepare(raw)
        repairs = ([raw.repaired] if raw.repaired else []) + repairs
        if not text.strip():
            return Verdict(text, channel, self.emptied(channel, repairs), [], {}, repairs)
        result = judge_rules(self.rules, Doc(text, channel, feats))
        failure = result.failure
        if failure is None and channel not in self.cfg.keep_channels:
            failure = Failure("channel", "unsupported_language", 0.0)
        return Verdict(text, channel, failure, result.flags, result.scores, repairs)


    def emptied(self, channel: str, repairs: list[str]) -> Failure:
        """Why a document has no text left: the last edit that removed some, else normalization."""
        editor = next((r for r in reversed(self.editors.get(channel, ())) if r.edit_repair in repairs), None)
        return Failure(editor.name, editor.emptied_reason, 0.0) if editor else \
            Failure("length", "empty_after_normalization", 0.0)


class Tally:
    """Documents and characters per (outcome, rule, reason, channel), plus review samples."""

    def __init__(self, samples_per_reason: int):
        self.counts: Counter = Counter()
        self.chars: Counter = Counter()
        self.samples: dict[str, list[dict]] = defaultdict(list)
        self.samples_per_reason = samples_per_reason

    def add(self, outcome: str, rule: str, reason: str, channel: str, text: str, row: dict | None = None) -> None:
        key = (outcome, rule, reason, channel)
        self.counts[key] += 1
        self.chars[key] += len(text)
        if row is not None and len(self.samples[reason]) < self.samples_per_reason:
            self.samples[reason].append(row)

    def rows(self) -> list[dict]:
        return [{"outcome": o, "rule": r, "reason": why, "channel": c, "docs": n, "chars": self.chars[(o, r, why, c)]}
                for (o, r, why, c), n in sorted(self.counts.items())]

    def to_json(self) -> dict:
        return {"rows": self.rows(), "samples": {k: v for k, v in self.samples.items()}}

    def merge(self, data: dict) -> None:
        for r in data["rows"]:
            key = (r["outcome"], r["rule"], r["reason"], r["channel"])
            self.counts[key] += r["docs"]
            self.chars[key] += r["chars"]
        for reason, rows in data["samples"].items():
            room = self.samples_per_reason - len(self.samples[reason])
            self.samples[reason].extend(rows[:max(room, 0)])

    def total(self, outcome: str) -> int:
        return sum(n for (o, *_), n in self.counts.items() if o == outcome)

    def by(self, outcome: str, field: int) -> dict[str, int]:
        out: Counter = Counter()
        for key, n in self.counts.items():
            if key[0] == outcome:
                out[key[field]] += n
        return dict(out)
