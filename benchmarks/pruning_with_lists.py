"""Dirty-token pruning with the shared Chinese lists, on a tokenizer trained on the real corpora.

    python benchmarks/pruning_with_lists.py [--shared ../shared] [--vocab 32000]

Cleans ../shared/corpora (zh, en) plus the Python standard library (code) with the default
rules, trains one tokenizer (channel mix zh 0.4 / en 0.4 / code 0.2), then prunes it with
the sensitive-lexicon porn/ads lists and LDNOOBW zh, two ways: protection judged over all
sampled documents at once (as before), and per channel (now). For each: tokens removed,
tokens protected, tokens left that still hold a list term as a word (word-aware; tokens that
end inside a character are not text and are not judged), and whether everyday words and a
minority-channel word survive.
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._corpus import benchmark_parser, clean_corpus  # noqa: E402
from pretrain.config import PruneConfig, TokenizerConfig  # noqa: E402
from tasks.tokenizer.train import (PRUNE_USAGE_DOCS, SPECIAL_TOKENS, reserved_names, sample_corpus,  # noqa: E402
                             train_tokenizer)
from tasks.tokenizer.prune import prune_tokenizer  # noqa: E402
from tasks.tokenizer.report import token_text  # noqa: E402

EVERYDAY = ["铃声", "自拍", "按摩", "客服", "网络", " small"]


def main() -> None:
    parser = benchmark_parser(__doc__)
    parser.add_argument("--vocab", type=int, default=32000)
    args = parser.parse_args()
    corpora = args.shared / "corpora"
    work = Path(tempfile.mkdtemp(prefix="prune-bench-"))
    clean_corpus(corpora, work / "clean")
    cfg = TokenizerConfig(vocab_size=args.vocab, reserved_tokens=1000, max_training_chars=20_000_000,
                          channel_mix={"zh": 0.4, "en": 0.4, "code": 0.2})
    sample = sample_corpus(work / "clean", cfg)
    tok = train_tokenizer(sample.train, cfg)
    lex = corpora / "lexicons"
    prune = PruneConfig(lexicons=[str(lex / "sensitive-lexicon" / n) for n in ("porn_words.txt", "porn_types.txt",
                                                                                "ads.txt")] + [str(lex / "ldnoobw" / "zh")])
    by_channel: dict[str, list[str]] = {c: list(t) for c, t in sample.held.items()}
    for text, (_, channel) in zip(sample.train[:PRUNE_USAGE_DOCS], sample.ids):
        by_channel.setdefault(channel, []).append(text)
    special = set(SPECIAL_TOKENS) | set(reserved_names(cfg.reserved_tokens))
    docs = {c: len(t) for c, t in by_channel.items()}
    cut = [t for t in tok.get_vocab(with_added_tokens=False) if t not in special and token_text(t) is None]
    print(f"vocabulary {tok.get_vocab_size()}; usage sample per channel: {docs}; {len(cut)} tokens cut a UTF-8 "
          f"character (judged by the whole characters they hold)\n")
    header = f"{'protection':<22}{'removed':>9}{'protected':>11}{'left holding a term':>21}  everyday words kept"
    print(header)
    print("-" * (len(header) + 30))
    for label, texts in (("over all documents", [t for ts in by_channel.values() for t in ts]),
                         ("per channel", by_channel)):
        result = prune_tokenizer(tok, texts, prune, special)
        s = result.summary()
        vocab = {result.tokenizer.decode([i]) for i in result.tokenizer.get_vocab(with_added_tokens=False).values()}
        kept = [w for w in EVERYDAY if w in vocab]
        print(f"{label:<22}{s['removed_total']:>9}{s['protected_total']:>11}{s['remaining_list_matches']:>21}  "
              f"{', '.join(repr(w) for w in kept)}")
        if s["remaining_list_matches"]:
            print(f"{'':<22}left: {s['remaining_list_match_examples']}")
        protected = [(p["token"], p["channel"], p["documents"]) for p in result.protected]
        print(f"{'':<22}protected (token, channel, documents): {protected[:30]}")


if __name__ == "__main__":
    main()
