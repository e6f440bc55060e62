"""Exact fast encoding: the stage's byte-level BPE run by tiktoken, used only where it is proven to give HF
`tokenizers`' ids.

tiktoken merges, at each step, the adjacent pair whose joined bytes have the lowest rank; HF's BPE merges the
pair with the lowest merge rank. Ranked by merge order (a byte 0-255, merge i 256 + i), the two agree unless a
token can be reached by another split than the merge that built it, which the equivalence check measures. The
pre-tokenizer (digits isolated, then GPT-2's byte-level split) is one regular expression here: a digit alone,
GPT-2's alternatives with its number class less the digits, and a whitespace run before a digit kept whole (in HF
it ends a piece). Text is NFC-normalised as HF's normalizer does; a text holding an added token's content (HF
splits those out even without special tokens) is encoded by HF.

The tokenizer stage runs `equivalence` over >= 25,000 random strings across scripts plus its held-out text and
records it in its report; the tokenize stage uses tiktoken only when that says 0 differing ids for the very
tokenizer file (by hash), else HF, and says why.
"""
from __future__ import annotations

import json
import random
import re
import unicodedata
from dataclasses import dataclass
from itertools import chain
from pathlib import Path

import numpy as np

from tasks.tokenizer.report import byte_decoder

PATTERN = (r"""\d|'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?(?:(?!\d)\p{N})+| ?[^\s\p{L}\p{N}]+|\s+(?=\d)|\s+(?!\S)|\s+""")
RANDOM_STRINGS = 25_000
PRE_TOKENIZER = [{"type": "Split", "behavior": "Isolated", "invert": False},
                 {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]


@dataclass
class FastBPE:
    encoding: object            # tiktoken.Encoding
    rank_to_id: np.ndarray      # tiktoken's rank -> the tokenizer's id
    added: re.Pattern | None    # the added tokens' contents: a text holding one is encoded by HF

    def holds_added(self, text: str) -> bool:
        return self.added is not None and self.added.search(text) is not None

    def _ranks(self, text: str) -> list[int]:
        return self.encoding.encode_ordinary(unicodedata.normalize("NFC", text))  # HF's normalizer is NFC

    def ids(self, text: str) -> list[int]:
        """The text's ids (for a text that holds no added token)."""
        return self.rank_to_id[np.array(self._ranks(text), dtype=np.int64)].tolist()

    def flat(self, texts: list[str], eos: int, dtype) -> tuple[np.ndarray, np.ndarray] | None:
        """All texts' ids with EOS after each, as one array, and each text's length (None: see ids)."""
        if any(self.holds_added(t) for t in texts):
            return None
        ranks = [self._ranks(t) for t in texts]
        lengths = np.fromiter((len(r) + 1 for r in ranks), dtype=np.int64, count=len(ranks))
        ends = np.cumsum(lengths)
        out = np.empty(int(ends[-1]) if len(ends) else 0, dtype=dtype)
        body = np.ones(len(out), dtype=bool)
        body[ends - 1] = False
        out[body] = self.rank_to_id[np.fromiter(chain.from_iterable(ranks), dtype=np.int64, count=int(body.sum()))]
        out[ends - 1] = eos
        return out, lengths


def fast_bpe(tokenizer_json: Path) -> FastBPE | str:
    """The tokenizer as a FastBPE, or why it cannot be one (a reason, for the report)."""
    data = json.loads(Path(tokenizer_json).read_text(encoding="utf-8"))
    model, pre = data.get("model") or {}, data.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or model.get("dropout") or model.get("byte_fallback") or \
            model.get("continuing_subword_prefix") or model.get("end_of_word_suffix"):
        return "the model is not a plain byte-level BPE"
    if (data.get("normalizer") or {}).get("type") != "NFC":
        return "the normalizer is not NFC alone"
    steps = pre.get("pretokenizers") if pre.get("type") == "Sequence" else None
    if not steps or len(steps) != 2 or any({k: s.get(k) for k in want} != want for s, want in zip(steps, PRE_TOKENIZER)) \
            or steps[0].get("pattern") != {"Regex": "\\d"}:
        return "the pre-tokenizer is not digits isolated then GPT-2's byte-level split"
    try:
        import tiktoken
    except ImportError:
        return "tiktoken is not installed"
    return _build(model, data.get("added_tokens") or [], tiktoken)


def _build(model: dict, added_tokens: list[dict], tiktoken) -> FastBPE | str:
    vocab = model["vocab"]
    decode = byte_decoder()
    ranks: dict[bytes, int] = {}
    rank_to_id = []
    for byte, char in sorted((b, c) for c, b in decode.items()):
        if char not in vocab:
            return f"byte {byte} has no token: some text could not be encoded"
        ranks[bytes([byte])] = len(rank_to_id)
        rank_to_id.append(vocab[char])
    for merge in model["merges"]:
        left, right = merge.split(" ") if isinstance(merge, str) else merge
        token = left + right
        joined = bytes(decode[c] for c in token)
        if token not in vocab or joined in ranks:
            return f"merge {left!r} + {right!r} builds no new token"
        ranks[joined] = len(rank_to_id)
        rank_to_id.append(vocab[token])
    encoding = tiktoken.Encoding("pretrain-bpe", pat_str=PATTERN, mergeable_ranks=ranks, special_tokens={})
    contents = [t["content"] for t in added_tokens]
    added = re.compile("|".join(map(re.escape, sorted(contents, key=len, reverse=True)))) if contents else None
    return FastBPE(encoding, np.array(rank_to_id, dtype=np.int64), added)


def random_strings(n: int, seed: int = 0) -> list[str]:
    """Strings that probe where two implementations of the pre-tokenizer and BPE could part: scripts, digits of
    every kind, whitespace of every kind, apostrophes, combining marks, emoji."""
    rng = random.Random(seed)
    pools = [
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  \t\n\r\x0b\x0c",
        "'", ".,;:!?-_()[]{}\"/\\@#$%^&*+=<>|~`", "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年",
        "，。！？、；：“”（）《》【】", "０１２３４５６７８９ＡＢＣａｂｃ", "٠١٢٣٤٥٦٧٨٩०१२३", "²³½¼Ⅳⅻ①⑩",
        "\u00a0\u2003\u3000\u0085\u200b\u2028\u180e", "\u0301\u0308\u0327", "éèêñüçåøß", "приветмир", "αβγδε",
        "😀🚀❤️👍🏽", "→←★☆", "ーカタカナひらがな", "한국어",
    ]
    words = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", " the", " 2024", "x86", "1.5e-3", "9.11", "3,000"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.15:
                parts.append(rng.choice(words))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def equivalence(tokenizer_json: Path, texts: list[str], n_random: int = RANDOM_STRINGS) -> dict:
    """Whether tiktoken gives HF's ids on n_random random strings and the given texts: the gate the tokenize
    stage reads (`fast_encoding` in the tokenizer's report)."""
    from tokenizers import Tokenizer

    fast = fast_bpe(tokenizer_json)
    if isinstance(fast, str):
        return {"encoder": "tokenizers", "reason": fast}
    probes = random_strings(n_random) + list(texts)
    held_added = [t for t in probes if fast.holds_added(t)]  # encoded by HF in the stage: nothing to compare
    probes = [t for t in probes if not fast.holds_added(t)]
    hf = Tokenizer.from_file(str(tokenizer_json))
    differing = []
    for start in range(0, len(probes), 2000):
        batch = probes[start:start + 2000]
        want = [e.ids for e in hf.encode_batch_fast(batch, add_special_tokens=False)]
        differing += [text for text, w in zip(batch, want) if fast.ids(text) != w]
    result = {"encoder": "tiktoken" if not differing else "tokenizers", "random_strings": n_random,
              "texts": len(texts), "compared": len(probes), "holding_added_tokens": len(held_added),
              "differing": len(differing), "examples": [t[:80] for t in differing[:5]]}
    if differing:
        result["reason"] = f"{len(differing)} of {len(probes)} strings encode differently"
    return result
