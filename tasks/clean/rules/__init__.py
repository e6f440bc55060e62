"""The rule families, in the order they run, and how their outcomes combine."""
from __future__ import annotations

from dataclasses import dataclass, field

from pretrain.config import RulesConfig
from tasks.clean.rules.base import Doc, Failure, Outcome, Rule
from tasks.clean.rules.chinese import ChineseRule
from tasks.clean.rules.code import CodeRule
from tasks.clean.rules.decontam import DecontamRule
from tasks.clean.rules.dirty import DirtyRule
from tasks.clean.rules.english import C4Rule, FineWebRule, GopherQualityRule, GopherRepetitionRule
from tasks.clean.rules.generic import GarbageRule, LengthRule

__all__ = ["Doc", "Failure", "Outcome", "Rule", "Judgement", "RULE_FAMILIES", "build_rules", "judge_rules"]

# the families in the order they run, each configured by the rules section of its name; decontam right after
# length, so that a contaminated document is counted against its eval set
RULE_CLASSES = (LengthRule, DecontamRule, GarbageRule, DirtyRule, GopherRepetitionRule, GopherQualityRule, C4Rule,
                FineWebRule, ChineseRule, CodeRule)
RULE_FAMILIES = tuple(r.name for r in RULE_CLASSES)  # a tag-mode flag is "<family>:<reason>"


def build_rules(cfg: RulesConfig) -> list[Rule]:
    return [rule(getattr(cfg, rule.name)) for rule in RULE_CLASSES]


@dataclass
class Judgement:
    failure: Failure | None = None              # the first failure of a rule in drop mode: reject
    flags: list[str] = field(default_factory=list)  # failures of rules in tag mode: keep, recorded
    scores: dict[str, float] = field(default_factory=dict)  # scores of rules in tag mode


def judge_rules(rules: list[Rule], doc: Doc) -> Judgement:
    """Drop-mode rules stop at the first failure; tag-mode rules always run and leave their scores."""
    result = Judgement()
    for rule in rules:
        if not rule.applies(doc) or (rule.mode == "drop" and result.failure):
            continue
        outcome = rule.evaluate(doc)
        if rule.mode == "tag":
            result.scores.update(outcome.scores)
            if outcome.failure:
                result.flags.append(f"{outcome.failure.rule}:{outcome.failure.reason}")
        elif outcome.failure and result.failure is None:
            result.failure = outcome.failure
    return result
