"""The tokenizer and tokenize sections: training the BPE, pruning dirty tokens, encoding into shards."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from pretrain.channels import Channel

from pretrain.config.base import MAX_VOCAB, NO_EFFECT, Strict
from pretrain.config.clean import ExecutorConfig


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

