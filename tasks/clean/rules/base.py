"""What a rule is: a named check over shared features that yields scores and maybe a failure."""
from __future__ import annotations

from dataclasses import dataclass, field

from pretrain.channels import KNOWN_CHANNELS
from tasks.clean.features import DocFeatures


@dataclass
class Doc:
    text: str
    channel: str
    feats: DocFeatures
    prose: DocFeatures | None = None  # what prose rules judge: the text without Markdown's fenced code
    set_aside: int = 0  # the code blocks and display equations left out of `prose`

    def __post_init__(self):
        if self.prose is None:
            self.prose = self.feats


@dataclass
class Failure:
    rule: str
    reason: str
    score: float


@dataclass
class Outcome:
    """Scores of one rule on one document, and the first threshold it violated."""

    rule: str
    scores: dict[str, float] = field(default_factory=dict)
    failure: Failure | None = None

    def check(self, metric: str, value: float, ok: bool, reason: str | None = None) -> None:
        self.scores[f"{self.rule}.{metric}"] = float(value)
        if not ok and self.failure is None:
            self.failure = Failure(self.rule, reason or f"{self.rule}_{metric}", float(value))


class Rule:
    """A rule family. Subclasses set `name` and `channels` and implement `evaluate`; a family that edits the text
    before anything is judged (C4's line filters) also implements `edit` and names its repair and its failure."""

    name: str = ""
    channels: tuple[str, ...] = KNOWN_CHANNELS
    edit_repair: str = ""      # recorded in `repairs` when edit() changed a document
    emptied_reason: str = ""   # the rejection when edit() left nothing

    def __init__(self, settings):
        self.settings = settings
        self.mode = settings.mode

    def applies(self, doc: Doc) -> bool:
        return self.mode != "off" and doc.channel in self.channels

    def evaluate(self, doc: Doc) -> Outcome:
        raise NotImplementedError

    def edit(self, text: str) -> str:
        """The text as the rules should judge it; unchanged unless the family edits text."""
        return text

    def edit_counted(self, text: str) -> tuple[str, dict[str, int]]:
        """edit(), and how many lines each of the family's line filters removed (a family that filters lines says)."""
        return self.edit(text), {}
