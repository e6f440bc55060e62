"""Tokenizer stage: byte-level BPE trained on the cleaned corpus, and its report."""
from __future__ import annotations

import hashlib
from collections import defaultdict
from pathlib import Path
from typing import Iterator

import pyarrow.dataset as ds
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from pretrain.config import TokenizerConfig
from tasks.common.outputs import require_complete, staged_output, write_json
from tasks.tokenizer_report import cjk_coverage, digits_split, vocabulary_diagnostics

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


def is_held_out(doc_id: str, channel: str, quota: dict[str, int], limit: int) -> bool:
    # A stable hash picks the held-out set, so a rerun holds out the same documents.
    if quota[channel] >= limit:
        return False
    if hashlib.blake2b(doc_id.encode(), digest_size=2).digest()[0] % 4 == 0:
        quota[channel] += 1
        return True
    return False


def split_corpus(kept_dir: Path, held_out_docs: int) -> tuple[list[str], dict[str, list[str]]]:
    """(training texts, held-out texts per channel)."""
    table = ds.dataset(kept_dir, format="parquet").to_table(columns=["id", "channel", "text"])
    quota: dict[str, int] = defaultdict(int)
    train, held = [], defaultdict(list)
    for doc_id, channel, text in zip(*(table.column(c).to_pylist() for c in ("id", "channel", "text"))):
        if is_held_out(doc_id, channel, quota, held_out_docs):
            held[channel].append(text)
        else:
            train.append(text)
    return train, dict(held)


def capped(texts: list[str], max_chars: int) -> Iterator[str]:
    total = 0
    for text in texts:
        if total >= max_chars:
            return
        total += len(text)
        yield text


def train_tokenizer(texts: list[str], cfg: TokenizerConfig) -> Tokenizer:
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(
        vocab_size=cfg.vocab_size, min_frequency=cfg.min_frequency, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(capped(texts, cfg.max_training_chars), trainer=trainer, length=len(texts))
    tok.add_special_tokens(reserved_names(cfg.reserved_tokens))
    return tok


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


def embedding_rows(n_tokens: int, multiple: int) -> int:
    return -(-n_tokens // multiple) * multiple


def hf_tokenizer_config(max_len: int) -> dict:
    return {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": BOS, "eos_token": EOS,
            "pad_token": PAD, "model_max_length": max_len, "clean_up_tokenization_spaces": False}


def file_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_tokenizer(cfg: TokenizerConfig, clean_dir: Path, out_dir: Path, max_seq_len: int = 4096) -> dict:
    require_complete(clean_dir, "clean")
    train_texts, held = split_corpus(clean_dir / "kept", cfg.held_out_docs)
    if not any(t.strip() for t in train_texts):
        raise ValueError(f"{clean_dir}/kept has no documents to train a tokenizer on (the clean stage kept "
                         f"nothing outside the held-out set); check clean.sources and clean/stats.parquet")
    tok = train_tokenizer(train_texts, cfg)
    with staged_output(out_dir) as tmp:
        tok.save(str(tmp / "tokenizer.json"))
        write_json(tmp / "tokenizer_config.json", hf_tokenizer_config(max_seq_len))
        write_json(tmp / "special_tokens_map.json", {"bos_token": BOS, "eos_token": EOS, "pad_token": PAD})
        learned = tok.get_vocab_size(with_added_tokens=True) - cfg.reserved_tokens
        report = {
            "vocab_size": learned,
            "reserved_tokens": cfg.reserved_tokens,
            "total_tokens": tok.get_vocab_size(with_added_tokens=True),
            "embedding_rows": embedding_rows(tok.get_vocab_size(with_added_tokens=True), cfg.pad_to_multiple),
            "special_tokens": {t: tok.token_to_id(t) for t in SPECIAL_TOKENS},
            "training_docs": len(train_texts),
            "held_out": channel_report(tok, held),
            "digits_split_one_by_one": digits_split(tok),
            **vocabulary_diagnostics(tok, set(SPECIAL_TOKENS) | set(reserved_names(cfg.reserved_tokens))),
            **cjk_coverage(tok, train_texts),
            "tokenizer_sha256": file_sha256(tmp / "tokenizer.json"),
        }
        write_json(tmp / "report.json", report)
    return report


def load_tokenizer(tokenizer_dir: Path) -> Tokenizer:
    require_complete(tokenizer_dir, "tokenizer")
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
