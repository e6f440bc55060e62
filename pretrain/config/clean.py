"""The clean section: sources, normalization, the quality and dirty-content rules, dedup, executor."""
from __future__ import annotations

import sysconfig
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator

from pretrain.channels import KNOWN_CHANNELS, Channel, KnownChannel

from pretrain.config.base import NO_EFFECT, Strict, problem_of


class SourceConfig(Strict):
    """One input of the cleaning stage."""

    path: str = Field(description="fsspec URL or glob (local path, s3://..., memory://...). "
                      "'{stdlib}' expands to this Python's standard library directory.")
    format: Literal["auto", "jsonl", "jsonl.gz", "jsonl.zst", "parquet", "csv", "tsv", "text", "warc"] = Field(
        "auto", description="auto: from the file suffix (.jsonl, .json, .jsonl.gz, .jsonl.zst, .parquet, .csv, .tsv, "
        ".warc(.gz), .wet(.gz), .txt); a file without one of these is read by its content (gzip, zstd, Parquet, "
        "WARC, JSON Lines or a JSON array, else text). JSON files may hold one array of records. "
        "warc needs the 'warc' extra")
    columns: list[str] | None = Field(None, description="csv/tsv without a header row: the column names, in order")
    text_field: str = Field("text", description="column/key holding the document text (jsonl, parquet)")
    id_field: str | None = Field(None, description="column/key holding a document id; None: file:row")
    text_unit: Literal["file", "line"] = Field("file", description="text files: one document per file or per line")
    channel_hint: KnownChannel | None = Field(None, description="force this channel instead of detecting it")
    name: str | None = Field(None, description="source name used in stats and shard source ids; default: the path")
    follow_symlinks: bool = Field(False, description="read local files whose links lead outside the source's folder "
                                  "(off: such a file is listed as unreadable with its target, never read)")
    rules: dict[str, dict[str, Any]] = Field(default_factory=dict, description=(
        "this source's own settings of the quality rules, over clean.rules family by family and key by key, "
        "e.g. {c4: {mode: tag}} for a mail archive the web rules would cut; any family but dirty and decontam, "
        "which hold for the whole corpus"))

    def resolved_path(self) -> str:
        return self.path.replace("{stdlib}", sysconfig.get_paths()["stdlib"])

    @property
    def source_name(self) -> str:
        return self.name or self.path


RuleMode = Literal["drop", "tag", "off"]
MODE_DOC = "drop: reject failing documents; tag: keep them, record the scores and the failure; off: skip"


class NormalizeConfig(Strict):
    unicode_form: Literal["NFC", "NFKC", "none"] = Field("NFC", description="Unicode normalization form")
    fix_mojibake: bool = Field(True, description="repair mojibake (UTF-8 read as Latin-1/cp1252) with ftfy")
    unescape_html_entities: bool = Field(True, description="decode HTML character references (&#8220; &amp; "
                                         "&lt;) that e-mail, RSS and scraped text carry; never in code (a code "
                                         "document, a Markdown fenced block) or in a text that holds HTML tags")
    strip_control: bool = Field(True, description="remove control, zero-width and BOM characters")
    whitespace: bool = Field(True, description="collapse spaces, unify newlines, at most one blank line (code keeps indentation)")
    traditional_to_simplified: bool = Field(False, description="convert Traditional Chinese to Simplified (OpenCC t2s) in zh documents")


class LengthSettings(Strict):
    mode: RuleMode = Field("drop", description=MODE_DOC)
    min_chars: int = Field(40, ge=0, description="drop documents shorter than this after normalization")
    max_chars: int = Field(2_000_000, gt=0, description="drop documents longer than this (a 50 MB single line, say)")


class GarbageSettings(Strict):
    """Text that drives the loss up (mojibake, symbols) or down (runs of newlines)."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    max_replacement_ratio: float = Field(0.01, ge=0, le=1, description="max share of U+FFFD replacement characters")
    max_mojibake_ratio: float = Field(0.01, ge=0, le=1, description="max share of characters typical of unrepaired mojibake")
    max_symbol_ratio: float = Field(0.3, ge=0, le=1, description="max share of non-space characters that are not letters, digits or punctuation (prose only)")
    max_newline_ratio: float = Field(0.25, ge=0, le=1, description="max newlines per character (prose only)")


class GopherQualitySettings(Strict):
    """Gopher quality rules (Rae et al. 2021), English; the paper's thresholds."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    min_doc_words: int = Field(50, description="fewest words; a Markdown page's code and display equations count, "
                               "as Gopher counted every word (the ratios below read the prose)")
    max_doc_words: int = 100_000
    min_avg_word_length: float = 3
    max_avg_word_length: float = 10
    max_symbol_word_ratio: float = Field(0.1, description="'#' or ellipses per word")
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = Field(0.8, description="share of words with an alphabetic character")
    min_stop_words: int = 2


JOIN_WRAPPED_DOC = ("judge the lines a web page would show: a line that has not ended its sentence continues into "
                    "the next when that starts in lower case (a hard wrap in e-mail, Markdown, plain-text books) or "
                    "when it ends in , ; or : (verse, a speaker's name above the speech)")


class GopherRepetitionSettings(Strict):
    """Gopher repetition rules, English (the chinese rule has the character n-gram equivalents)."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    join_wrapped_lines: bool = Field(True, description=JOIN_WRAPPED_DOC + " when duplicate lines are counted; off: "
                                     "each line alone, as Gopher did")
    dup_line_frac: float = 0.3
    dup_para_frac: float = 0.3
    dup_line_char_frac: float = 0.2
    dup_para_char_frac: float = 0.2
    top_n_grams: dict[int, float] = Field(default_factory=lambda: {2: 0.2, 3: 0.18, 4: 0.16})
    dup_n_grams: dict[int, float] = Field(default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})
    count_formulaic_n_grams: bool = Field(False, description="false: a repeated n-gram of prose (one holding a "
                                          "stop word) counts only inside a sentence that copies an earlier one, so "
                                          "a clause that legal or technical text repeats across sentences that "
                                          "differ is not boilerplate (markup and word lists count as before); "
                                          "true: every repeated n-gram counts (Gopher's reading)")


class C4Settings(Strict):
    """C4 rules (Raffel et al. 2020), English: line filters that edit the text, then document checks."""
    mode: RuleMode = Field("drop", description=MODE_DOC + " (in tag mode lines are not removed)")
    remove_citations: bool = True
    join_wrapped_lines: bool = Field(True, description=JOIN_WRAPPED_DOC + "; off: each line alone, as C4 did")
    keep_fenced_code: bool = Field(True, description="a Markdown fenced code block (``` or ~~~) is kept as it is "
                                   "and set aside when the English rules (C4, Gopher, FineWeb) judge the page: code "
                                   "has no sentences and has curly brackets; off: its lines are judged as prose")
    drop_lines_without_terminal_punct: bool = True
    join_verse_lines: bool = Field(True, description="in a stanza (four or more lines, most of them short, "
                                   "starting in upper case and ending in a mark), a line that stops mid-sentence "
                                   "runs on to the line that ends the sentence, as verse is set (a play, a poem, "
                                   "a hymn); off: each such line is dropped for its missing full stop, as C4 did")
    keep_list_clauses: bool = Field(True, description="a list item that ends its clause rather than its sentence "
                                    "(\"(a) safely; and\", \"b. the walls;\") counts as ended, as regulations "
                                    "and contracts draft a sentence as a list; off: dropped, as C4 did")
    min_words_per_line: int = 3
    max_word_length: int = 1000
    drop_javascript_lines: bool = True
    drop_policy_lines: bool = True
    min_num_sentences: int = Field(5, description="fewest sentences of prose; a fenced code block or display "
                                   "equation set aside counts as one, as a line without a sentence end does")
    reject_lorem_ipsum: bool = True
    reject_curly_bracket: bool = True
    keep_tex_math: bool = Field(True, description="TeX math (a MathJax page, a Stack Exchange answer, a Markdown "
                                "book): a display equation ($$...$$, \\[...\\], a math environment) is kept as it is, "
                                "not judged as lines, and a curly bracket inside math ($...$ too) is not counted by the "
                                "bracket check; off: C4's reading, which dropped an equation's lines and rejected "
                                "the page for its brackets")
    max_curly_bracket_lines: float = Field(0.1, ge=0, le=1, description="the share of lines with a curly bracket "
                                           "above which a page is rejected as code or template spill (outside "
                                           "Markdown fences); 0: any bracket rejects it, as C4 did")


class FineWebSettings(Strict):
    """FineWeb's own rules (Penedo et al. 2024), English."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    line_punct_thr: float = Field(0.12, description="min share of lines ending in terminal punctuation")
    short_line_thr: float = Field(0.67, description="max share of lines of at most short_line_length chars")
    short_line_length: int = 30
    char_duplicates_ratio: float = Field(0.01, description="max share of characters in duplicated lines")
    new_line_ratio: float = Field(0.3, description="max newlines per word")
    count_title_echo: bool = Field(False, description="count a first line repeated as the next one (a page's "
                                   "title over a heading or a question that repeats it) as a duplicated line, as "
                                   "FineWeb did; off: the echo is not boilerplate")
    join_wrapped_lines: bool = Field(True, description=JOIN_WRAPPED_DOC + " in the line shares; off: each line "
                                     "alone, as FineWeb did")


class ChineseSettings(Strict):
    """Character-based equivalents for Chinese."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    min_cjk_chars: int = Field(20, ge=0, description="minimum number of CJK characters")
    min_cjk_ratio: float = Field(0.3, ge=0, le=1, description="minimum share of CJK characters among the text's "
                                 "units: a CJK character, a Latin word or number, a symbol")
    min_punct_per_kchar: float = Field(5.0, ge=0, description="minimum CJK/ASCII punctuation marks per 1000 characters (run-on or keyword-stuffed text has none)")
    top_char_ngram: dict[int, float] = Field(default_factory=lambda: {2: 0.2, 4: 0.16},
                                             description="max share of text covered by the most frequent character n-gram")
    repair_doubled_min_chars: int = Field(100, ge=0, description="a text that runs twice in a row (a passage of at "
                                          "least this many characters, then its copy) keeps one copy; 0: off")
    dup_sentence_frac: float = Field(0.3, ge=0, le=1, description="max share of the text's characters in "
                                     "sentences that repeat an earlier sentence of the document")
    min_sentence_chars: int = Field(6, ge=1, description="shorter sentences ('是。', '第一条') may repeat freely")
    dup_char_ngram: dict[int, float] = Field(default_factory=lambda: {50: 0.2},
                                             description="max share of text inside repeated character n-grams "
                                             "(long spans: the formulas of laws and manuals repeat 10-30 "
                                             "characters by design)")


class CodeSettings(Strict):
    mode: RuleMode = Field("drop", description=MODE_DOC)
    max_line_chars: int = Field(1000, gt=0, description="longest line (minified or data files)")
    max_mean_line_chars: float = Field(100, gt=0)
    min_alnum_ratio: float = Field(0.25, ge=0, le=1, description="minimum share of alphanumeric characters")
    generated_markers: list[str] = Field(default_factory=lambda: [
        "auto-generated", "autogenerated", "do not edit", "generated by", "@generated"],
        description="case-insensitive markers in the first 10 lines of generated files")


class DirtySettings(Strict):
    """Porn / gambling / spam lexicons and URL/domain blocklists, with a density threshold."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    lexicons: list[str] = Field(default_factory=list, description="extra term lists (one term per line; 'term<TAB>weight' allowed), added to the built-in ones")
    domain_blocklists: list[str] = Field(default_factory=list, description="extra domain lists (one domain per line), added to the built-in one")
    patterns: list[str] = Field(default_factory=list, description="extra regex lists ('regex<TAB>weight' or 'regex<TAB>weight<TAB>group' per line; a group's matches count as one hit), added to the built-in ones")
    min_score: float = Field(1.5, ge=0, description="reject when the weighted hit count reaches this ...")
    min_score_per_kchar: float = Field(8.0, ge=0, description="... and the weighted hits per 1000 characters reach this "
                                       "(long articles that mention an offer or two are kept; en, code and other "
                                       "documents) ...")
    min_score_per_kchar_zh: float = Field(20.0, ge=0, description="... or this, for zh documents: a Chinese character "
                                          "says about as much as three English letters, so the same run of offers "
                                          "is about three times as dense (an app's description that lists its "
                                          "coupons and members' points is kept; an SMS advert is not) ...")
    min_distinct_hits: int = Field(2, ge=1, description="... and at least this many different terms, patterns or "
                                   "domains hit (one term, however often repeated, never rejects)")
    unmask: bool = Field(True, description="match lists and classifier against the text with spam's disguises "
                         "folded away (full-width, mathematical and circled letters and digits, look-alike letters, "
                         "emoji, separators inside words: tasks/clean/disguise.py); the kept text is unchanged")
    word_aware: bool = Field(True, description="Chinese terms match only where they do not straddle a word of the "
                             "text's segmentation (rjieba): 色情 is not found in 白色情人节")
    classifier_examples: list[str] = Field(default_factory=list, description="labeled spam/ham files ('label<TAB>text', "
                                           "label 1/0 or spam/ham): a character n-gram classifier per channel is "
                                           "learned from them and rejects what it scores above classifier_threshold; "
                                           "add ham (label 0) from your corpus's own genres, news, reviews, web pages: "
                                           "a model that saw only messages flags prose; empty: lexicons only")
    classifier_threshold: float | None = Field(None, ge=0, le=1, description="probability of spam above which a "
                                               "document is rejected; None: per channel, from 5-fold cross-validation "
                                               "over the examples (reported in the clean manifest)")
    classifier_max_ham_rate: float = Field(0.005, gt=0, lt=1, description="the cross-validation picks the lowest "
                                           "threshold whose out-of-fold ham removal stays within this share")
    classifier_scope: Literal["auto", "evidence", "all"] = Field("auto", description="which documents the classifier "
                                                                 "judges (up to its length cap): 'evidence', only those "
                                                                 "with a lexicon, pattern or domain hit; 'all', every "
                                                                 "one; 'auto', per channel, the scope that removes more "
                                                                 "spam out of fold within classifier_max_ham_rate")
    classifier_veto_max_spam_loss: float | None = Field(0.01, ge=0, lt=1, description="the classifier overrules a "
                                                       "rejection by the lists of a text it judges and scores below "
                                                       "a veto threshold (commerce and finance prose like its ham "
                                                       "examples); the cross-validation sets it no higher than where "
                                                       "the overruled spam stays within this share of the spam "
                                                       "examples, and no higher than the ham it overrules needs; "
                                                       "None: the lists are never overruled")
    classifier_reference_docs: int = Field(4000, ge=0, description="the classifier judges only text that resembles "
                                           "its examples more than the corpus: when the stage starts it draws up to "
                                           "this many documents from the sources (spread over sources and files) and "
                                           "learns, per channel, to tell the examples from them; 0: no such gate, the "
                                           "classifier judges every text up to its length cap (a model that learned "
                                           "from SMS then removed 6% of e-mail and 20% of news)")
    classifier_gate_spam_loss: float = Field(0.05, gt=0, lt=1, description="the gate's threshold: the resemblance "
                                             "that all but this share of the spam examples reach out of fold (0.05 "
                                             "was chosen on the genre benchmark's tune halves: 0.02 left 0.9% of news "
                                             "removed)")
    classifier_reference: str | None = Field(None, description="JSONL of {channel, text} the gate learns the corpus "
                                             "from; the stage sets it to the sample it draws; a path set here is used "
                                             "instead")


class EvalSet(Strict):
    """Evaluation data that training text must not contain."""
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="reported as reason eval_overlap_<name>")
    path: str = Field(description="file, directory or glob (fsspec): JSONL / JSON array / Parquet / CSV / TSV "
                      "records, or text files (an lm-eval task's data files, a held-out set)")
    fields: list[str] | None = Field(None, description="record keys whose text counts (question, choices, ...); "
                                     "None: every string value of a record, nested lists included")


class DecontamSettings(Strict):
    """Documents that share a long n-gram with evaluation data (GPT-3: 8 to 13 words by the set's item lengths)."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    eval_sets: list[EvalSet] = Field(default_factory=list, description="evaluation data by path; empty: the rule "
                                     "checks nothing")
    ngram: int = Field(13, ge=5, le=64, description="the longest window, in tokens (a Latin word or one CJK "
                       "character is a token; case, punctuation and width are ignored)")
    min_ngram: int = Field(8, ge=5, le=64, description="the shortest window for a set of words: each eval set's "
                           "window is its 5th-percentile item length, between min_ngram and ngram (GPT-3's rule); "
                           "set both minimums to ngram for one fixed window")
    min_ngram_cjk: int = Field(11, ge=5, le=64, description="the shortest window for a set whose tokens are mostly "
                               "CJK characters (8 characters spell common names: 中华人民共和国成立)")
    min_matches: int = Field(1, ge=1, description="windows shared with one eval set that make a document contaminated")

    @model_validator(mode="after")
    def _window_range(self) -> "DecontamSettings":
        for name in ("min_ngram", "min_ngram_cjk"):
            if getattr(self, name) > self.ngram:
                raise ValueError(f"clean.rules.decontam.{name}={getattr(self, name)} is longer than ngram={self.ngram}:"
                                 f" set {name} to at most ngram (equal for one fixed window)")
        return self


class RulesConfig(Strict):
    length: LengthSettings = LengthSettings()
    decontam: DecontamSettings = DecontamSettings()
    garbage: GarbageSettings = GarbageSettings()
    gopher_quality: GopherQualitySettings = GopherQualitySettings()
    gopher_repetition: GopherRepetitionSettings = GopherRepetitionSettings()
    c4: C4Settings = C4Settings()
    fineweb: FineWebSettings = FineWebSettings()
    chinese: ChineseSettings = ChineseSettings()
    code: CodeSettings = CodeSettings()
    dirty: DirtySettings = DirtySettings()


class DedupConfig(Strict):
    exact: bool = Field(True, description="remove exact duplicates (hash of the normalized text) across all shards, with DuckDB")
    near: bool = Field(True, description="remove near-duplicates with MinHash LSH")
    ngram: int = Field(5, ge=1, description="shingle size: words for en, characters for zh and code")
    bands: int = Field(14, ge=1, description="LSH bands")
    rows: int = Field(8, ge=1, description="hashes per band (bands * rows permutations)")
    seed: int = 1


class ExecutorConfig(Strict):
    kind: Literal["process", "ray"] = Field("process", description="process: a local process pool; ray: Prefect's Ray task runner")
    workers: int | None = Field(None, ge=1, description="processes for kind=process; None: one per CPU")
    ray_address: str | None = Field(None, description="kind=ray: address of a running cluster (ray://host:10001 or host:6379); None: start a local one")


# they read files and learn once for the stage, and a leak or spam is one in any source
CORPUS_WIDE_RULES = ("dirty", "decontam")


def rules_over(rules: RulesConfig, changes: dict[str, dict[str, Any]], where: str) -> RulesConfig:
    """`rules` with `changes` ({family: {key: value}}) applied, each family validated as clean.rules validates it."""
    families = {}
    for family, settings in changes.items():
        if family in CORPUS_WIDE_RULES or family not in RulesConfig.model_fields:
            allowed = ", ".join(f for f in RulesConfig.model_fields if f not in CORPUS_WIDE_RULES)
            raise ValueError(f"{where}.rules.{family}: a source may set {allowed}"
                             + (f"; {family} holds for the whole corpus: set it in clean.rules"
                                if family in CORPUS_WIDE_RULES else ""))
        current = getattr(rules, family)
        try:
            families[family] = type(current).model_validate({**current.model_dump(), **settings})
        except ValidationError as err:
            raise ValueError("; ".join(f"{where}.rules.{'.'.join(map(str, (family, *e['loc'])))}: {problem_of(e)}"
                                       for e in err.errors())) from None
    return rules.model_copy(update=families)


class CleanConfig(Strict):
    sources: list[SourceConfig] = Field(min_length=1)
    normalize: NormalizeConfig = NormalizeConfig()
    rules: RulesConfig = RulesConfig()
    keep_channels: list[Channel] = Field(
        default_factory=lambda: list(KNOWN_CHANNELS), description="channels kept; others are rejected as unsupported_language")
    dedup: DedupConfig = DedupConfig()
    executor: ExecutorConfig = Field(ExecutorConfig(), json_schema_extra=NO_EFFECT)
    shard_max_mb: float = Field(64.0, gt=0, description="consecutive input files of a source are cleaned together up to this size")
    reject_samples_per_reason: int = Field(20, ge=0, description="rejected documents kept per reason in samples.parquet for review")

    @model_validator(mode="after")
    def _source_rules_valid(self):
        for k, source in enumerate(self.sources):
            rules_over(self.rules, source.rules, f"clean.sources[{k}] ({source.source_name})")
        return self

    def for_source(self, index: int) -> "CleanConfig":
        """The config a source's documents are judged with: its own rule settings over clean.rules."""
        source = self.sources[index]
        if not source.rules:
            return self
        return self.model_copy(update={"rules": rules_over(self.rules, source.rules, f"clean.sources[{index}]")})

