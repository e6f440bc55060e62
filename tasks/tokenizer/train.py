"""Tokenizer stage: byte-level BPE trained on the cleaned corpus, and its report."""
from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from pretrain.config import TokenizerConfig, embedding_rows
from tasks.common.outputs import require_complete, staged_output, write_json
from tasks.tokenizer.fast_bpe import equivalence
from tasks.tokenizer.prune import prune_tokenizer, verify
from tasks.tokenizer.report import (DIGIT_PROBE, cjk_coverage, digits_split, reference_compression, report_markdown,
                                    vocabulary_diagnostics)

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
SPECIAL_TOKENS = [BOS, EOS, PAD]


def reserved_names(n: int) -> list[str]:
    return [f"<|reserved_{i}|>" for i in range(n)]


def new_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    # Digits are split one by one before the byte-level split, so numbers are
    # compared digit by digit ("9.11" vs "9.9") and never merged into tokens.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    return tok


def _unit_hash(doc_id: str, salt: str) -> float:
    """A stable number in [0, 1) per document: sampling decisions survive reruns and reordering."""
    return int.from_bytes(hashlib.blake2b(f"{salt}:{doc_id}".encode(), digest_size=8).digest(), "big") / 2**64


def kept_chars_by_channel(clean_dir: Path) -> dict[str, int]:
    totals: dict[str, int] = defaultdict(int)
    for row in pq.read_table(Path(clean_dir) / "stats.parquet").to_pylist():
        if row["outcome"] == "kept":
            totals[row["channel"]] += row["chars"]
    return dict(totals)


def sampling_rates(clean_dir: Path, cfg: TokenizerConfig) -> dict[str, float]:
    """Per channel, the share of its documents to sample so it contributes its part of max_training_chars."""
    totals = kept_chars_by_channel(clean_dir)
    weights = {c: w for c, w in cfg.channel_mix.items() if totals.get(c)}
    norm = sum(weights.values()) or 1.0
    return {c: min(1.0, cfg.max_training_chars * w / norm / totals[c]) for c, w in weights.items()}


@dataclass
class Sample:
    train: list[str]
    held: dict[str, list[str]]
    ids: list[tuple[str, str]]  # (id, channel) of every training document, for the record


def sample_corpus(clean_dir: Path, cfg: TokenizerConfig) -> Sample:
    """Held-out documents per channel, then a channel-mixed training sample, streamed batch by batch."""
    rates = sampling_rates(clean_dir, cfg)
    held: dict[str, list[str]] = defaultdict(list)
    train, ids = [], []
    dataset = ds.dataset(clean_dir / "kept", format="parquet")
    for batch in dataset.to_batches(columns=["id", "channel", "text"], batch_size=4096):
        for doc_id, channel, text in zip(*(batch.column(c).to_pylist() for c in ("id", "channel", "text"))):
            if len(held[channel]) < cfg.held_out_docs and _unit_hash(doc_id, "held") < 0.25:
                held[channel].append(text)
            elif _unit_hash(doc_id, "train") < rates.get(channel, 0.0):
                train.append(text)
                ids.append((doc_id, channel))
    return Sample(train, {c: t for c, t in held.items() if t}, ids)


_CJK = "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"


def training_pieces(texts: list[str], max_cjk_run: int) -> Iterator[str]:
    """The texts, cut inside CJK runs longer than max_cjk_run.

    Byte-level pre-tokenization splits Chinese only at punctuation, so an
    unpunctuated page reaches the trainer as one word: every merge rescans it
    and it never repeats. Each piece is pre-tokenized on its own, so a cut is a
    word boundary; no character is added or lost.
    """
    long_run = re.compile(f"{_CJK}{{{max_cjk_run + 1},}}") if max_cjk_run else None
    for text in texts:
        start = 0
        for match in long_run.finditer(text) if long_run else ():
            for cut in range(match.start() + max_cjk_run, match.end(), max_cjk_run):
                yield text[start:cut]
                start = cut
        yield text[start:]


def train_tokenizer(texts: list[str], cfg: TokenizerConfig) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(training_pieces(texts, cfg.max_cjk_run), trainer=trainer, length=len(texts))
    tok.add_special_tokens(reserved_names(cfg.reserved_tokens))
    return tok


PRUNE_USAGE_DOCS = 20_000  # documents encoded to find which candidates clean text relies on


def prune(tok: Tokenizer, cfg: TokenizerConfig, sample: Sample) -> dict:
    held_texts = [t for texts in sample.held.values() for t in texts]
    by_channel: dict[str, list[str]] = {c: list(texts) for c, texts in sample.held.items()}
    for text, (_, channel) in zip(sample.train[:PRUNE_USAGE_DOCS], sample.ids):
        by_channel.setdefault(channel, []).append(text)
    result = prune_tokenizer(tok, by_channel, cfg.prune, set(SPECIAL_TOKENS) | set(reserved_names(cfg.reserved_tokens)))
    checks = verify(result.tokenizer, held_texts + [DIGIT_PROBE])
    if not checks["ids_contiguous"] or checks["roundtrip_failures_after_pruning"]:
        raise RuntimeError(f"pruning left an inconsistent tokenizer ({checks}); set tokenizer.prune.enabled: false "
                           f"and report this as a bug")
    return {"enabled": True, **result.summary(), **checks, "tokenizer": result.tokenizer}


def channel_report(tok: Tokenizer, held: dict[str, list[str]]) -> dict:
    report = {}
    for channel, texts in sorted(held.items()):
        encs = tok.encode_batch(texts, add_special_tokens=False)
        n_tokens = sum(len(e.ids) for e in encs) or 1
        failures = sum(tok.decode(e.ids, skip_special_tokens=False) != t for e, t in zip(encs, texts))
        report[channel] = {
            "docs": len(texts),
            "tokens": n_tokens,
            "chars_per_token": round(sum(map(len, texts)) / n_tokens, 3),
            "bytes_per_token": round(sum(len(t.encode()) for t in texts) / n_tokens, 3),
            "roundtrip_failures": failures,
        }
    return report


def hf_tokenizer_config(max_len: int | None) -> dict:
    """transformers' tokenizer_config.json; without a model section there is no length to state."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
              "pad_token": PAD, "clean_up_tokenization_spaces": False}
    return {**config, "model_max_length": max_len} if max_len else config


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_tokenizer(cfg: TokenizerConfig, clean_dir: Path, out_dir: Path, max_seq_len: int | None = 4096) -> dict:
    require_complete(clean_dir, "clean")
    sample = sample_corpus(clean_dir, cfg)
    train_texts, held = sample.train, sample.held
    if not any(t.strip() for t in train_texts):
        raise ValueError(f"{clean_dir}/kept has no documents to train a tokenizer on (the clean stage kept "
                         f"nothing outside the held-out set); check clean.sources and clean/stats.parquet")
    tok = train_tokenizer(train_texts, cfg)
    pruning = prune(tok, cfg, sample) if cfg.prune.enabled else {"enabled": False}
    tok = pruning.pop("tokenizer", tok)
    with staged_output(out_dir) as tmp:
        tok.save(str(tmp / "tokenizer.json"))
        write_json(tmp / "tokenizer_config.json", hf_tokenizer_config(max_seq_len))
        write_json(tmp / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})
        pq.write_table(pa.table({"id": [i for i, _ in sample.ids], "channel": [c for _, c in sample.ids]}),
                       tmp / "training_sample.parquet")
        learned = tok.get_vocab_size(with_added_tokens=True) - cfg.reserved_tokens
        report = {
            "vocab_size": learned,
            "reserved_tokens": cfg.reserved_tokens,
            "total_tokens": tok.get_vocab_size(with_added_tokens=True),
            "embedding_rows": embedding_rows(tok.get_vocab_size(with_added_tokens=True), cfg.pad_to_multiple),
            "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
            "training_docs": len(train_texts),
            "training_chars_by_channel": {c: sum(len(t) for t, (_, ch) in zip(train_texts, sample.ids) if ch == c)
                                          for c in sorted({ch for _, ch in sample.ids})},
            "held_out": channel_report(tok, held),
            "reference_chars_per_token": reference_compression(held),
            "pruning": pruning,
            "digits_split_one_by_one": digits_split(tok),
            **vocabulary_diagnostics(tok, set(SPECIAL_TOKENS) | set(reserved_names(cfg.reserved_tokens))),
            **cjk_coverage(tok, train_texts),
            "tokenizer_sha256": file_sha256(tmp / "tokenizer.json"),
            # the tokenize stage encodes with tiktoken only on this proof
            "fast_encoding": equivalence(tmp / "tokenizer.json", [t for texts in held.values() for t in texts]),
        }
        write_json(tmp / "report.json", report)
        (tmp / "report.md").write_text(report_markdown(report), encoding="utf-8")
    return report


def load_tokenizer(tokenizer_dir: Path) -> Tokenizer:
    require_complete(tokenizer_dir, "tokenizer")
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
