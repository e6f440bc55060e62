"""The pipeline configuration: strict, frozen pydantic models loaded from YAML.

Every stage reads only its own section. The same models are the Prefect flow
parameters, so the UI renders them as forms. An unknown key, a wrong type or a
bad value is an error that names the key; all problems are reported at once.
"""
from __future__ import annotations

import os
import re
import sysconfig
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, ValidationError, field_validator,
                      model_validator)

from pretrain.channels import KNOWN_CHANNELS, Channel, KnownChannel

MAX_VOCAB = 1_000_000  # beyond any tokenizer trained in practice (256k is large); far beyond, the trainer aborts
SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"
# A setting that never changes what its stage produces (where or how fast it runs, how it is watched, what it
# logs): left out of the stage's version (tasks/versions.py), so changing it reruns nothing. Every other
# field counts. tests/tasks/test_versions.py lists the fields so marked; a new one is a deliberate choice.
NO_EFFECT = {"changes_result": False}


def embedding_rows(n_tokens: int, multiple: int) -> int:
    """The model's embedding rows for a vocabulary of n_tokens (learned + reserved), rounded up to `multiple`."""
    return -(-n_tokens // multiple) * multiple


def changes_result(field_info) -> bool:
    """Whether a config field (a pydantic FieldInfo) counts for its stage's version: all but those marked NO_EFFECT."""
    extra = field_info.json_schema_extra
    return not (isinstance(extra, dict) and extra.get("changes_result") is False)


class ConfigError(ValueError):
    """A configuration file that cannot be used; the message says what to fix."""


class Strict(BaseModel):
    # inf / nan are refused in every float field (a learning rate of .inf validated before)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_for_numbers(cls, data):
        """YAML's `true` is not a number: `steps: true` would otherwise train 1 step."""
        if isinstance(data, dict):
            bad = [k for k, v in data.items() if isinstance(v, bool) and k in cls.model_fields
                   and _is_number(cls.model_fields[k].annotation)]
            if bad:
                raise ValueError(f"{', '.join(bad)}: a number is required, got true/false")
        return data


def _is_number(annotation) -> bool:
    args = getattr(annotation, "__args__", None)
    if args and type(None) in args:  # int | None, float | None
        return any(_is_number(a) for a in args if a is not type(None))
    return annotation in (int, float)


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
    min_doc_words: int = 50
    max_doc_words: int = 100_000
    min_avg_word_length: float = 3
    max_avg_word_length: float = 10
    max_symbol_word_ratio: float = Field(0.1, description="'#' or ellipses per word")
    max_bullet_lines_ratio: float = 0.9
    max_ellipsis_lines_ratio: float = 0.3
    min_alpha_words_ratio: float = Field(0.8, description="share of words with an alphabetic character")
    min_stop_words: int = 2


class GopherRepetitionSettings(Strict):
    """Gopher repetition rules, English (the chinese rule has the character n-gram equivalents)."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    dup_line_frac: float = 0.3
    dup_para_frac: float = 0.3
    dup_line_char_frac: float = 0.2
    dup_para_char_frac: float = 0.2
    top_n_grams: dict[int, float] = Field(default_factory=lambda: {2: 0.2, 3: 0.18, 4: 0.16})
    dup_n_grams: dict[int, float] = Field(default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10})


class C4Settings(Strict):
    """C4 rules (Raffel et al. 2020), English: line filters that edit the text, then document checks."""
    mode: RuleMode = Field("drop", description=MODE_DOC + " (in tag mode lines are not removed)")
    remove_citations: bool = True
    drop_lines_without_terminal_punct: bool = True
    min_words_per_line: int = 3
    max_word_length: int = 1000
    drop_javascript_lines: bool = True
    drop_policy_lines: bool = True
    min_num_sentences: int = 5
    reject_lorem_ipsum: bool = True
    reject_curly_bracket: bool = True


class FineWebSettings(Strict):
    """FineWeb's own rules (Penedo et al. 2024), English."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    line_punct_thr: float = Field(0.12, description="min share of lines ending in terminal punctuation")
    short_line_thr: float = Field(0.67, description="max share of lines of at most short_line_length chars")
    short_line_length: int = 30
    char_duplicates_ratio: float = Field(0.01, description="max share of characters in duplicated lines")
    new_line_ratio: float = Field(0.3, description="max newlines per word")


class ChineseSettings(Strict):
    """Character-based equivalents for Chinese."""
    mode: RuleMode = Field("drop", description=MODE_DOC)
    min_cjk_chars: int = Field(20, ge=0, description="minimum number of CJK characters")
    min_cjk_ratio: float = Field(0.3, ge=0, le=1, description="minimum share of CJK among non-space characters")
    min_punct_per_kchar: float = Field(5.0, ge=0, description="minimum CJK/ASCII punctuation marks per 1000 characters (run-on or keyword-stuffed text has none)")
    top_char_ngram: dict[int, float] = Field(default_factory=lambda: {2: 0.2, 4: 0.16},
                                             description="max share of text covered by the most frequent character n-gram")
    dup_char_ngram: dict[int, float] = Field(default_factory=lambda: {10: 0.15, 20: 0.10},
                                             description="max share of text inside repeated character n-grams")


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


class PruneConfig(Strict):
    """Dirty-token pruning after training (tasks/tokenizer/prune.py)."""
    enabled: bool = True
    lexicons: list[str] = Field(default_factory=list, description="term lists whose every term marks a dirty token (e.g. porn word lists)")
    min_builtin_weight: float = Field(3.0, ge=0, description="built-in terms used: those of at least this weight (gambling, porn, scams); "
                                      "lighter ones are everyday words that only signal adverts in density")
    min_repeat_run: int = Field(8, ge=2, description="a token of one character repeated at least this often is junk")
    protect_min_docs: int = Field(5, ge=1, description="never prune a token used by at least this many clean documents ...")
    protect_doc_share: float = Field(0.01, ge=0, le=1, description="... or by this share of them, whichever is larger; "
                                     "judged per channel, so a minority channel's words are protected too")
    allow_lists: list[str] = Field(default_factory=list, description="everyday words that term lists happen to name "
                                   "(one a line), never pruning terms; added to the built-in *.allow.txt")


class TokenizerConfig(Strict):
    vocab_size: int = Field(8000, le=MAX_VOCAB, description="learned vocabulary incl. the 256 byte tokens and "
                            f"bos/eos/pad, excl. the reserved block (at most {MAX_VOCAB:,})")
    reserved_tokens: int = Field(64, ge=0, le=MAX_VOCAB, description="reserved special tokens kept free for later work")
    min_frequency: int = Field(2, ge=1)
    max_training_chars: int = Field(200_000_000, gt=0, description="cap on characters fed to the trainer (bounds its memory)")
    channel_mix: dict[Channel, float] = Field(
        default_factory=lambda: {"zh": 0.4, "en": 0.4, "code": 0.2},
        description="share of max_training_chars per channel; a channel with less text contributes all it has")
    held_out_docs: int = Field(200, ge=1, description="documents per channel kept aside for the report")
    max_cjk_run: int = Field(
        32, ge=0, description="CJK runs longer than this are cut into pieces of this length for training: "
        "unpunctuated Chinese would otherwise reach the trainer as page-long words (0: no cutting)")
    pad_to_multiple: int = Field(128, ge=1, description="model embedding rows = vocab + reserved, rounded up to this")
    prune: PruneConfig = PruneConfig()


    @model_validator(mode="after")
    def _room_for_merges(self) -> "TokenizerConfig":
        minimum = 256 + 3 + 1  # every byte, bos/eos/pad, and at least one merge
        if self.vocab_size < minimum:
            raise ValueError(f"tokenizer.vocab_size={self.vocab_size} leaves no room for merges: the 256 byte tokens "
                             f"and 3 special tokens come first; set tokenizer.vocab_size to at least {minimum}")
        return self


class TokenizeConfig(Strict):
    shard_max_tokens: int = Field(50_000_000, gt=0, description="start a new shard past this many tokens")
    batch_docs: int = Field(1000, gt=0, description="documents per encode_batch call")
    count_rejected_tokens: bool = Field(True, description="also encode the rejected documents, so the per-rule "
                                        "table counts tokens (costs a pass over the rejects)")
    encoder: Literal["auto", "tokenizers"] = Field(
        "auto", json_schema_extra=NO_EFFECT, description="auto: tiktoken where the tokenizer stage proved it gives "
        "the same ids as HF tokenizers (its report's fast_encoding), else tokenizers; tokenizers: always HF")
    executor: ExecutorConfig = Field(ExecutorConfig(), json_schema_extra=NO_EFFECT)


class PreflightConfig(Strict):
    profile: str = Field("cpu-ci", description="hardware profile whose expected values grade the checks "
                         "(tasks/preflight/baselines/profiles.yaml: cpu-ci, h100-sxm-8x-nvlink, a100-sxm-8x-nvlink, "
                         "pcie-gen4-no-nvlink, ib-hdr-200g, ib-ndr-400g, roce-100g, h200-1x)")
    baselines_file: str | None = Field(None, description="your own profiles file (same format); None: the shipped one")
    nics_per_node: int = Field(1, ge=1, description="network cards per node: per-NIC expectations are multiplied by it")
    min_free_gb: float = Field(5.0, ge=0, description="fail when the run root has less free disk")
    storage_test_mb: float = Field(64.0, gt=0, description="size of the shared-storage write/read check")
    allreduce_ranks: int = Field(2, ge=1, description="ranks of the all-reduce probe (gloo on CPU, nccl on GPU)")
    allreduce_mb: float = Field(8.0, gt=0, description="all-reduce probe message size in MiB")
    nccl_tests_dir: str | None = Field(None, description="directory of nccl-tests binaries; None: search PATH")
    nccl_tests_launcher: list[str] = Field(default_factory=list, description="prefix for nccl-tests across nodes, "
                                           "e.g. [mpirun, -np, '16', --hostfile, hosts]; empty: one process, all local GPUs")
    nvbandwidth_path: str | None = Field(None, description="nvbandwidth binary; None: search PATH")
    tool_json: bool = Field(False, description="read nccl-tests (-J, v2.16+) and nvbandwidth (-j) JSON output "
                            "instead of their text (older builds reject the flag)")
    drop_failing_nodes: bool = Field(False, description="train on the nodes that passed: a node failing its checks "
                                     "is left out of the hostfile the train stage uses (recorded in the report)")
    comm_profile_steps: int = Field(3, ge=0, description="profile this many training steps on the configured ranks "
                                    "and report the communication share (0: skip)")
    ignore_failures: bool = Field(False, description="train even when a check fails (recorded in the report)")
    report_only: list[str] = Field(default_factory=list, description="checks measured and reported but never "
                                   "failing the gate (a fail is reported as a warning), e.g. [shared_storage] on a "
                                   "VM's local disk that is not the cluster's storage")


class ModelConfig(Strict):
    preset: Literal["debug", "125m", "500m", "1.5b"] | None = Field(
        None, description="fill the architecture from a preset (pretrain/presets.py); fields given here override it", json_schema_extra=NO_EFFECT)
    dim: int = Field(gt=0)
    n_layers: int = Field(gt=0)
    n_heads: int = Field(gt=0)
    n_kv_heads: int = Field(gt=0, description="grouped-query attention: key/value heads (divides n_heads)")
    ffn_hidden: int = Field(gt=0, description="SwiGLU hidden size")
    max_seq_len: int = Field(gt=0)
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False

    @model_validator(mode="before")
    @classmethod
    def _from_preset(cls, data):
        if isinstance(data, dict) and data.get("preset") is not None:
            from pretrain.presets import PRESETS

            if data["preset"] not in PRESETS:
                raise ValueError(f"model.preset={data['preset']!r} is not one of {sorted(PRESETS)}")
            data = {**PRESETS[data["preset"]], **data}
        return data

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelConfig":
        if self.dim % self.n_heads:
            raise ValueError(f"model.dim={self.dim} must be divisible by model.n_heads={self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"model.n_heads={self.n_heads} must be divisible by model.n_kv_heads={self.n_kv_heads}")
        if (self.dim // self.n_heads) % 2:
            raise ValueError("model.dim / model.n_heads must be even for RoPE")
        return self


HOST_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"


def check_host(name: str, where: str) -> str:
    """A host name or IPv4 address, nothing a shell or ssh would read as an option or a command."""
    if not re.fullmatch(HOST_NAME, name):
        raise ValueError(f"{where}={name!r} is not a host name (letters, digits, '.', '-' and '_', starting with a "
                         f"letter or digit): ssh would read it as an option or the shell as a command; fix the name")
    return name


class HostConfig(Strict):
    name: str = Field(description="hostname or address the launcher reaches the node by")
    slots: int = Field(gt=0, description="ranks (GPUs) on the node")

    @field_validator("name")
    @classmethod
    def _host_name(cls, name: str) -> str:
        return check_host(name, "train.hosts[].name")


class MixtureConfig(Strict):
    """Sampling proportions of the training data by channel, source or quality (upsampling repeats a pool)."""
    by: Literal["channel", "source", "quality"] = Field("channel", description="what the weights name: channels "
                                                         "(zh/en/code/other), source names, or qualities: clean (no "
                                                         "rule in tag mode flagged the document) or the family of "
                                                         "the first rule that did (e.g. chinese, c4, dirty)")
    weights: dict[str, float] = Field(min_length=1, description="share of samples drawn per channel or source; "
                                      "unnamed ones are not drawn; normalized to sum 1")
    decay_weights: dict[str, float] | None = Field(None, description="the shares from the first step of the "
                                                   "schedule's decay (schedule: wsd) to the end, for annealing on "
                                                   "higher-quality or domain data; None: weights throughout")

    @model_validator(mode="after")
    def _positive(self) -> "MixtureConfig":
        for key, weights in (("weights", self.weights), ("decay_weights", self.decay_weights)):
            if weights is not None and (any(v < 0 for v in weights.values()) or sum(weights.values()) <= 0):
                raise ValueError(f"train.mixture.{key} {weights} must be non-negative with a positive sum")
        return self


class AnomalyConfig(Strict):
    """Loss-anomaly detection in the training program (model/anomaly.py); on a hit it writes an event and exits 42."""
    enabled: bool = True
    window: int = Field(50, ge=2, description="steps of history the rules compare against")
    warmup: int = Field(20, ge=1, description="steps of history before the spike rules apply")
    loss_ratio: float = Field(2.0, gt=1, description="loss above this x the rolling median is a spike")
    loss_zscore: float = Field(6.0, gt=0, description="loss this many robust standard deviations (1.4826 x MAD) "
                               "above the window median is a spike")
    grad_ratio: float = Field(10.0, gt=1, description="grad norm above this x its rolling median is an explosion")
    channel_ratio: float = Field(2.5, gt=1, description="a channel's loss above this x its own median is a spike")
    patience: int = Field(1, ge=1, description="consecutive offending steps before acting (non-finite acts at once)")
    divergence_window: int = Field(0, ge=0, description="train and eval loss both rising over this many steps (0: off)")
    onset_grad_ratio: float = Field(2.0, gt=1, description="grad norm above this x median marks the onset of trouble")


class RecoveryConfig(Strict):
    """What the monitored training does when an attempt ends early (tasks/train/recovery.py)."""
    enabled: bool = Field(True, description="relaunch after anomalies and crashes; off: the first failure fails the stage")
    rollback_gap_steps: int = Field(100, ge=0, description="roll back to a checkpoint at least this many steps before the onset")
    skip_margin_steps: int = Field(200, ge=0, description="skip the data up to this many steps' worth past the anomaly")
    widen_factor: int = Field(2, ge=1, description="the same region again: the margin grows by this factor each time")
    lr_factor: float = Field(0.5, gt=0, le=1, description="a third spike in one region: the learning rate is multiplied by this")
    max_rollbacks: int = Field(5, ge=0, description="then the flow fails with a report for a person")
    max_crash_retries: int = Field(3, ge=0, description="resumes after crashes that are not anomalies (a killed rank, a lost node)")
    drop_lost_nodes: bool = Field(True, description="before each relaunch, probe the nodes (as preflight does) and "
                                  "leave out those that fail: training goes on from the last complete checkpoint on "
                                  "the ranks left (with grad_accum: auto, at the same global batch)")
    keep_abandoned: int = Field(1, ge=0, description="checkpoints set aside by rollbacks (<tag>.abandoned-<n>) that are "
                                "kept, newest first; older ones are deleted (each is as large as a live checkpoint)")


def mirror_target(url: str) -> str:
    """The mirror URL as fsspec will read it, or an error naming the problem: a file URL takes a local absolute
    path and no user, password or host (fsspec would read file://user:pw@host/x as a folder named
    "user:pw@host/x" in the working directory); a path without a scheme must be absolute."""

    parts = urlsplit(url)
    if not parts.scheme:
        if not url.startswith("/"):
            raise ValueError(f"{url!r} is a relative path, which would land under whatever folder "
                             f"the job starts in; give an absolute path or a URL (file:///backup/run, s3://bucket/run)")
        return url
    if parts.scheme != "file":
        return url
    if parts.username or parts.password or parts.netloc not in ("", "localhost"):
        raise ValueError(f"{_redacted(url)!r}: a file:// URL takes a local path and no user, "
                         f"password or host; write file:///<absolute path>; for another machine use its protocol "
                         f"(sftp://user:password@host/path: the password reaches the ranks by the secrets file)")
    if not parts.path.startswith("/") or parts.path == "/":
        raise ValueError(f"{url!r} needs an absolute folder: file:///backup/run")
    return f"file://{parts.path}"


def _redacted(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//***@", url)


class TrainConfig(Strict):
    seq_len: int = Field(gt=0)
    micro_batch_size: int = Field(gt=0, description="samples per rank per micro step")
    grad_accum: PositiveInt | Literal["auto"] = Field(1, description="micro steps per optimizer step; auto: "
                                                       "train.global_batch_size / (micro_batch_size x ranks), so the "
                                                       "batch stays when the number of ranks changes")
    global_batch_size: PositiveInt | None = Field(None, description="samples per optimizer step, with grad_accum: "
                                                  "auto; a multiple of micro_batch_size x ranks")
    steps: int = Field(gt=0, description="optimizer steps")
    lr: float = Field(3e-4, gt=0)
    min_lr: float = Field(3e-5, ge=0)
    warmup_steps: int = Field(10, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    zero_stage: Literal[0, 1, 2, 3, "auto"] = Field(1, description="ZeRO stage; auto: the fastest that fits, "
                                                   "predicted from preflight's measured bandwidth and step time "
                                                   "(tasks/train/comm_plan.py; `pretrain plan --cluster` prints it)")
    bucket_size: PositiveInt | Literal["auto"] = Field("auto", description="elements per gradient-reduce and "
                                                       "all-gather bucket; auto: the predicted best cut of the model "
                                                       "(DeepSpeed's own 5e8 holds all gradients of a 0.1-1B model, "
                                                       "so none is reduced during the backward pass)")
    overlap_comm: bool = Field(True, description="reduce gradient buckets during the backward pass (on GPUs "
                               "beside it; gloo runs collectives inline, so CPU ranks only show the schedule)")
    precision: Literal["fp32", "bf16"] = "bf16"
    activation_checkpointing: bool = False
    compile: bool = Field(False, description="torch.compile each transformer block (in place: checkpoints and the "
                          "HF export are unchanged); the first steps pay for the compilation", json_schema_extra=NO_EFFECT)
    compile_backend: Literal["inductor", "aot_eager", "eager"] = Field(
        "inductor", description="train.compile's torch.compile backend: inductor generates fused kernels; aot_eager "
        "and eager only capture the graphs (graph breaks and errors show without the compile time)",
        json_schema_extra=NO_EFFECT)
    sdpa_backend: Literal["auto", "flash", "efficient", "math"] = Field(
        "auto", description="attention kernel on GPUs: auto = PyTorch's choice (flash for bf16 on Ampere and "
        "newer); flash / efficient / math = only that one, so a shape it cannot run is an error instead of a "
        "silent fallback", json_schema_extra=NO_EFFECT)
    optimizer: Literal["auto", "torch_fused", "deepspeed_fused"] = Field(
        "auto", description="AdamW on GPUs: torch_fused = torch's fused CUDA AdamW (no compiler needed); "
        "deepspeed_fused = DeepSpeed's FusedAdam (compiled with nvcc on first use unless DeepSpeed was installed "
        "with DS_BUILD_FUSED_ADAM=1); auto = DeepSpeed's when prebuilt, else torch's. CPU: torch's AdamW")
    accelerator: Literal["cpu", "cuda"] = Field("cuda", description="cpu: DS_ACCELERATOR=cpu with gloo")
    num_gpus: int = Field(1, gt=0, description="ranks per node (CPU processes when accelerator=cpu)")
    hostfile: str | None = Field(None, description="DeepSpeed hostfile for multi-node runs; None: this node only "
                                 "(or train.hosts)")
    hosts: list[HostConfig] = Field(default_factory=list, description="the nodes, written to <run_root>/train/hostfile "
                                    "(instead of train.hostfile)")
    launch: Literal["ssh", "per_node"] = Field("ssh", description="multi-node: ssh = DeepSpeed's launcher reaches every "
                                               "node over ssh/pdsh from this one; per_node = one `deepspeed --no_ssh "
                                               "--node_rank k` per node, started through train.node_command", json_schema_extra=NO_EFFECT)
    ssh_launcher: Literal["pdsh", "openmpi", "mvapich", "slurm", "mpich", "impi"] = Field(
        "pdsh", description="launch: ssh: how DeepSpeed's launcher reaches the nodes (its --launcher)", json_schema_extra=NO_EFFECT)
    node_command: list[str] = Field(default_factory=list, description="per_node: prefix that runs a command on node "
                                    "{host} (e.g. [ssh, '{host}'] or [srun, -N1, -w, '{host}']); empty: start it here", json_schema_extra=NO_EFFECT)
    node_command_shell: bool | None = Field(None, description="per_node: whether node_command hands the command to a "
                                            "remote shell as one line, so every argument is quoted (ssh, pdsh) or runs "
                                            "it as given (srun, kubectl exec); None: yes when it starts with ssh, "
                                            "autossh, rsh or pdsh", json_schema_extra=NO_EFFECT)
    master_addr: str | None = Field(None, description="rendezvous address; None: the first node's name", json_schema_extra=NO_EFFECT)
    master_port: int | None = Field(None, gt=1024, lt=65536, description="rendezvous port; None: a free port on the "
                                    "master host, chosen at the run's first launch and kept in <run_root>/train/master_port "
                                    "for every relaunch", json_schema_extra=NO_EFFECT)
    save_every: int = Field(100, gt=0, description="checkpoint every N steps (and at the end)")
    save_final: bool = Field(True, description="save a checkpoint at the last step; off only for throughput "
                             "runs whose model is thrown away (a 500M checkpoint is about 7.6 GB)")
    stop_grace_s: float = Field(300.0, gt=0, description="on SIGTERM (a Prefect cancel), how long the ranks get to "
                                "save a checkpoint and stop before they are killed", json_schema_extra=NO_EFFECT)
    log_every: int = Field(1, gt=0, json_schema_extra=NO_EFFECT)
    comm_profile_every: int = Field(200, ge=0, description="profile one step in this many and log its measured "
                                    "communication time and share (comm_s, comm_share) next to the communication "
                                    "plan's prediction; 0: never", json_schema_extra=NO_EFFECT)
    seed: int = 1234
    data_order: Literal["feistel", "numpy_shuffle"] = Field(
        "feistel", description="position -> sample: a Feistel permutation per pool and epoch, computed per position "
        "(constant memory); numpy_shuffle only to finish a run whose checkpoints were written in that order "
        "(by earlier versions, whose checkpoints record no order)")
    timeout_minutes: float = Field(30.0, gt=0, description="collective timeout of the process group", json_schema_extra=NO_EFFECT)
    hang_timeout_s: float | None = Field(None, gt=0, description="a rank that makes no progress for this long is "
                                         "hung: every rank writes its stacks to <train_dir>/hangs, the job ends and "
                                         "is relaunched from the newest checkpoint as a crash; None: max(60 s, 10 x "
                                         "the median step time)", json_schema_extra=NO_EFFECT)
    slow_phase_timeout_s: float = Field(1800.0, gt=0, description="the hang timeout while saving a checkpoint or "
                                        "running eval", json_schema_extra=NO_EFFECT)
    first_step_timeout_s: float = Field(1800.0, gt=0, description="the hang timeout from the process group's start "
                                        "to the end of the first step (loading data, building the model, resuming "
                                        "a checkpoint, compiling kernels)", json_schema_extra=NO_EFFECT)
    straggler_ratio: float = Field(1.5, gt=1, description="a rank whose own time per step (reading data, forward) "
                                   "is above this multiple of the median rank's ...", json_schema_extra=NO_EFFECT)
    straggler_reports: int = Field(20, ge=1, description="... for this many logged steps in a row is named in a "
                                   "straggler event and an MLflow tag", json_schema_extra=NO_EFFECT)
    schedule: Literal["cosine", "wsd"] = Field("cosine", description="cosine decay, or warmup-stable-decay (constant, then a final decay)")
    decay_frac: float = Field(0.2, gt=0, le=1, description="wsd: share of the steps spent decaying at the end")
    decay_steps: int | None = Field(None, gt=0, description="wsd: decay over exactly this many final steps "
                                    "instead of decay_frac (anneal branches set it); None: decay_frac")
    z_loss: float = Field(1e-4, ge=0, le=1, description="weight of z-loss, log(Z)^2 per token, in the trained loss: "
                          "keeps the output logits from drifting (logged as log_z, z_loss; `loss` stays the "
                          "cross-entropy); 0: off. Default from benchmarks/z_loss.py")
    resume_tag: str | None = Field(None, description="resume from this checkpoint tag (e.g. step_00001000); None: the newest complete one")
    keep_last: int = Field(3, ge=1, description="complete checkpoints kept (the newest); older ones are deleted", json_schema_extra=NO_EFFECT)
    keep_every: int = Field(0, ge=0, description="also keep every checkpoint whose step is a multiple of this (0: none)", json_schema_extra=NO_EFFECT)
    anomaly: AnomalyConfig = AnomalyConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    export_hf: bool = Field(True, description="export the final checkpoint to the Hugging Face Llama format "
                            "(<run_root>/train/hf/<tag>) when training finishes")
    mirror_url: str | None = Field(None, description="copy every complete checkpoint here in the background "
                                   "(an fsspec URL: s3://bucket/run, file:///backup/run); None: no mirror", json_schema_extra=NO_EFFECT)
    eval_every: int = Field(0, ge=0, description="held-out perplexity per channel every N steps (0: off)")
    eval_samples_per_channel: int = Field(200, ge=0, description="held-out samples per channel, taken from the end "
                                          "of each channel's data and never trained on (at most 10% of a channel); "
                                          "scored every eval_every steps and by the eval flow. 0: train on everything")
    peak_tflops_per_gpu: float | None = Field(None, gt=0, description="for MFU; None: looked up from the GPU name", json_schema_extra=NO_EFFECT)
    mixture: MixtureConfig | None = Field(None, description="sampling weights per channel or source; None: natural proportions")
    stage_data_dir: str | None = Field(None, description="copy the token shards here on every node before training "
                                       "(a local disk or /dev/shm); None: read them where the tokenize stage wrote them", json_schema_extra=NO_EFFECT)

    @field_validator("master_addr")
    @classmethod
    def _master_host(cls, name: str | None) -> str | None:
        return None if name is None else check_host(name, "train.master_addr")

    @field_validator("mirror_url")
    @classmethod
    def _mirror_where_it_says(cls, url: str | None) -> str | None:
        return None if url is None else mirror_target(url)

    @model_validator(mode="after")
    def _decay_mix_needs_a_decay(self) -> "TrainConfig":
        if self.mixture and self.mixture.decay_weights is not None and self.schedule != "wsd":
            raise ValueError("train.mixture.decay_weights starts at the schedule's decay, which only "
                             "schedule: wsd has; set train.schedule: wsd (and train.decay_frac) or drop decay_weights")
        return self

    @model_validator(mode="after")
    def _one_host_list(self) -> "TrainConfig":
        if self.hostfile and self.hosts:
            raise ValueError("set train.hostfile or train.hosts, not both")
        names = [h.name for h in self.hosts]
        if len(set(names)) != len(names):
            raise ValueError(f"train.hosts names a node twice: {names}")
        return self

    @model_validator(mode="after")
    def _one_batch_rule(self) -> "TrainConfig":
        if self.grad_accum == "auto" and self.global_batch_size is None:
            raise ValueError("train.grad_accum: auto needs train.global_batch_size (samples per optimizer step)")
        if self.grad_accum != "auto" and self.global_batch_size is not None:
            raise ValueError(f"train.global_batch_size={self.global_batch_size} with train.grad_accum="
                             f"{self.grad_accum}: set train.grad_accum: auto to derive it, or drop global_batch_size")
        if self.global_batch_size is not None and self.global_batch_size % self.micro_batch_size:
            raise ValueError(f"train.global_batch_size={self.global_batch_size} is not a multiple of "
                             f"train.micro_batch_size={self.micro_batch_size}")
        return self

    @model_validator(mode="after")
    def _lr_order(self) -> "TrainConfig":
        if self.min_lr > self.lr:
            raise ValueError(f"train.min_lr={self.min_lr} is above train.lr={self.lr}; lower train.min_lr")
        if self.warmup_steps >= self.steps:
            raise ValueError(f"train.warmup_steps={self.warmup_steps} is not below train.steps={self.steps}: the "
                             f"learning rate would never leave its warm-up; lower train.warmup_steps")
        return self


class LmEvalConfig(Strict):
    """lm-evaluation-harness tasks run on the checkpoint's Hugging Face export, offline, from local data."""
    tasks: list[str] = Field(default_factory=list, description="task names (your YAML tasks under include_path, "
                             "or harness tasks whose data is in the local Hugging Face cache); empty: none")
    include_path: str | None = Field(None, description="a folder of task YAML files (dataset_path: json + data_files)")
    limit: int | None = Field(None, gt=0, description="at most this many examples per task")
    batch_size: int = Field(8, gt=0)


class EvalConfig(Strict):
    """The eval flow: a saved checkpoint -> held-out perplexity per channel (+ lm-eval tasks), logged at its step."""
    device: Literal["cpu", "cuda"] = Field("cpu", description="where the eval flow runs the model")
    batch_size: int = Field(8, gt=0, description="held-out samples per forward pass")
    max_samples_per_channel: int | None = Field(None, gt=0, description="score at most this many of the held-out "
                                                "samples per channel; None: all of them")
    regression_pct: float = Field(2.0, ge=0, description="flag a channel whose perplexity rose more than this "
                                  "(percent) against the previous evaluated checkpoint")
    task_files: list[str] = Field(default_factory=list, description="local JSONL task files (multiple choice: "
                                  "context, choices, answer index; QA: context, answer text), scored per checkpoint "
                                  "as cloze accuracy and bits per byte with their standard errors (model/task_eval.py)")
    noise_sigmas: float = Field(2.0, gt=0, description="a task figure regresses only when it got worse by more than "
                                "this many standard errors (both checkpoints' combined)")
    lm_eval: LmEvalConfig = LmEvalConfig()


class ScalingConfig(Strict):
    """The scaling flow: a grid of small runs (budgets x widths) on this run's data, and the law fitted to them."""
    budgets: list[PositiveFloat] = Field(default_factory=list, description="training FLOPs (6 N D, N non-embedding) of each "
                                 "grid column, e.g. [1e17, 3e17, 1e18]; a model of each width trains for C / 6N tokens")
    dims: list[PositiveInt] = Field(default_factory=lambda: [256, 384, 512, 768, 1024], description="model widths tried at "
                            "each budget; depth, heads and SwiGLU size follow from the width (tasks/scaling/grid.py)")
    min_steps: int = Field(20, gt=0, description="grid points with fewer steps are skipped (too short to mean much)")
    max_steps: int = Field(20000, gt=0, description="... and with more (the budget wants a smaller width)")
    eval_samples_per_channel: int = Field(50, gt=0, description="held-out samples per channel scoring each point")
    huber_delta: float = Field(1e-3, gt=0, description="Huber threshold of the fit on log-loss (Hoffmann et al.)")


class TrackingConfig(Strict):
    mlflow_uri: str | None = Field(None, description="MLflow tracking URI; None: $MLFLOW_TRACKING_URI, else sqlite:///<run_root>/mlflow.db")
    experiment: str = "pretrain"


class PipelineConfig(Strict):
    name: str = Field(description="run name, shown in Prefect and MLflow and used in their queries and in file "
                      "names: letters, digits, '.', '_' and '-', starting with a letter or digit, at most 100")
    run_root: str = Field(description="directory every stage writes under; relative paths are taken from the working directory")
    clean: CleanConfig | None = Field(None, description="needed by the clean stage (and `run`)")
    tokenizer: TokenizerConfig = TokenizerConfig()
    tokenize: TokenizeConfig = TokenizeConfig()
    preflight: PreflightConfig = PreflightConfig()
    model: ModelConfig | None = Field(None, description="needed by the preflight, train and scaling stages")
    train: TrainConfig | None = Field(None, description="needed by the preflight, train and scaling stages")
    eval: EvalConfig = EvalConfig()
    scaling: ScalingConfig = ScalingConfig()
    tracking: TrackingConfig = TrackingConfig()

    @field_validator("name")
    @classmethod
    def _safe_name(cls, name: str) -> str:
        if not re.fullmatch(SAFE_NAME, name):
            raise ValueError(f"{name!r} is not a safe run name (it goes into MLflow queries, Prefect keys and file "
                             f"names); use letters, digits, '.', '_' and '-', starting with a letter or digit")
        return name

    @model_validator(mode="after")
    def _seq_fits_model(self) -> "PipelineConfig":
        if self.train and self.model and self.train.seq_len > self.model.max_seq_len:
            raise ValueError(f"train.seq_len={self.train.seq_len} exceeds model.max_seq_len="
                             f"{self.model.max_seq_len}; raise model.max_seq_len or lower train.seq_len")
        return self

    def run_root_path(self) -> Path:
        return Path(os.path.expanduser(self.run_root)).resolve()

    def require(self, command: str) -> "PipelineConfig":
        """This config, if it has every section the command reads; a ConfigError naming the missing ones otherwise."""
        missing = [s for s in SECTIONS_NEEDED.get(command, ()) if getattr(self, s) is None]
        if missing:
            raise ConfigError(f"`{command}` needs the config section(s) {', '.join(missing)}, which this config "
                              f"does not have; add them (configs/tiny.yaml shows each)")
        return self


# The sections a command cannot run without; the others have defaults. Stages that need none of these
# (tokenizer, tokenize, eval) run from a config with name, run_root and their own section alone.
SECTIONS_NEEDED = {"clean": ("clean",), "run": ("clean", "model", "train"), "preflight": ("model", "train"),
                   "anneal": ("model", "train"), "average": ("model", "train"),
                   "train": ("model", "train"), "scaling": ("model", "train")}


def _describe(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        if e["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key; remove it or check its spelling")
        elif e["type"] == "missing":
            lines.append(f"  {where}: required key is missing")
        else:
            lines.append(f"  {where}: {e['msg'].removeprefix('Value error, ')}")
    return "\n".join(lines)


def parse_config(data: object, origin: str = "<config>") -> PipelineConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: the top level must be a mapping of sections, got {type(data).__name__}")
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{origin}: {err.error_count()} problem(s):\n{_describe(err)}") from None


class UniqueKeyLoader(yaml.SafeLoader):
    """yaml.safe_load, except that a key given twice in one mapping is an error (PyYAML keeps the last silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor` merges; explicit keys may override it
                continue
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} appears twice in one mapping (first on line {seen[key] + 1}); "
                    f"remove one of them", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep)


# YAML 1.2 booleans: only true/false. YAML 1.1 (PyYAML's default) also reads on/off/yes/no as booleans,
# so `mode: off` would arrive as False and be refused.
UniqueKeyLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}
UniqueKeyLoader.add_implicit_resolver("tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
                                      list("tTfF"))


def load_config(path: str | os.PathLike) -> PipelineConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist; pass --config with a YAML file such as configs/tiny.yaml")
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"{path}: invalid YAML{where}: {getattr(err, 'problem', err)}") from None
    return parse_config(data, str(path))


def resolve_config(config: PipelineConfig | str | dict, command: str | None = None) -> PipelineConfig:
    """Flow parameters may be a config, a dict from the UI form, or a YAML path; checked for what `command` needs."""
    if isinstance(config, PipelineConfig):
        cfg = config
    elif isinstance(config, dict):
        cfg = parse_config(config)
    else:
        cfg = load_config(config)
    return cfg.require(command) if command else cfg
