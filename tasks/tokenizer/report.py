"""Vocabulary diagnostics for the tokenizer report.

Byte-level BPE stores each token as a string over a 256-character alphabet that
stands for bytes (GPT-2's bytes_to_unicode); decoding that map gives the token's
bytes, from which reachability and UTF-8 completeness follow.
"""
from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache

from tokenizers import Tokenizer

_CJK = re.compile(r"[\u4e00-\u9fff]")
DIGIT_PROBE = "0123456789 3.14159 2024年11月30日 v1.2.3 +86-138-0000-0000"


@lru_cache(maxsize=1)
def byte_decoder() -> dict[str, int]:
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = printable[:], 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def token_bytes(token: str) -> bytes | None:
    table = byte_decoder()
    if any(ch not in table for ch in token):
        return None  # a special or added token, not a byte-level piece
    return bytes(table[ch] for ch in token)


def token_text(token: str) -> str | None:
    """The text a byte-level token stands for, or None for a fragment of a multi-byte character."""
    raw = token_bytes(token)
    if raw is None:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def whole_characters(token: str) -> str | None:
    """The complete characters inside a byte-level token that starts or ends inside a multi-byte character
    ('\x9b色情内' + half of the next character holds 色情), shown with U+FFFD for the cut pieces; None for a token
    that is no byte-level piece, or bytes that are no UTF-8 even after the cut pieces are set aside."""
    raw = token_bytes(token)
    if raw is None:
        return None
    head = 0
    while head < min(len(raw), 3) and 0x80 <= raw[head] <= 0xBF:  # continuation bytes of a character begun before
        head += 1
    for tail in range(min(4, len(raw) - head + 1)):  # the first bytes of a character finished after
        try:
            text = raw[head:len(raw) - tail].decode("utf-8")
        except UnicodeDecodeError:
            continue
        return "\ufffd" * bool(head) + text + "\ufffd" * bool(tail)
    return None


def vocabulary_diagnostics(tok: Tokenizer, special: set[str], longest: int = 10) -> dict:
    unreachable, partial, decoded = [], 0, []
    for token, idx in tok.get_vocab(with_added_tokens=False).items():
        if token in special:
            continue
        raw = token_bytes(token)
        if raw is None:
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            partial += 1  # a fragment of a multi-byte character: normal in byte-level BPE
            continue
        decoded.append((text, idx))
        if tok.encode(text, add_special_tokens=False).ids != [idx]:
            unreachable.append(text)
    decoded.sort(key=lambda t: (-len(t[0]), t[1]))
    return {"unreachable_tokens": len(unreachable), "unreachable_examples": unreachable[:20],
            "partial_utf8_tokens": partial, "longest_tokens": [t for t, _ in decoded[:longest]]}


def cjk_coverage(tok: Tokenizer, texts: list[str], top: int = 500) -> dict:
    """Share of the corpus's most frequent CJK characters that are one token each."""
    counts = Counter(ch for t in texts for ch in _CJK.findall(t))
    common = [ch for ch, _ in counts.most_common(top)]
    single = sum(len(tok.encode(ch, add_special_tokens=False).ids) == 1 for ch in common)
    return {"cjk_chars_checked": len(common), "cjk_single_token_share": round(single / len(common), 4) if common else None}


def digits_split(tok: Tokenizer) -> bool:
    tokens = tok.encode(DIGIT_PROBE, add_special_tokens=False).tokens
    return all(sum(c.isdigit() for c in t) <= 1 for t in tokens)


def report_markdown(report: dict) -> str:
    ref = report.get("reference_chars_per_token", {})
    refs = [n for n in REFERENCE_ENCODINGS if ref.get("available")]
    lines = [f"**vocabulary** {report['vocab_size']} learned + {report['reserved_tokens']} reserved = "
             f"{report['total_tokens']} tokens -> {report['embedding_rows']} embedding rows", "",
             "| channel | docs | chars/token | bytes/token | round-trip failures |" + "".join(f" {n} chars/token |" for n in refs),
             "|---|---|---|---|---|" + "---|" * len(refs)]
    lines += [f"| {c} | {r['docs']} | {r['chars_per_token']} | {r['bytes_per_token']} | {r['roundtrip_failures']} |"
              + "".join(f" {ref[n].get(c, '')} |" for n in refs) for c, r in report["held_out"].items()]
    if not ref.get("available", True) or ref.get("note"):
        lines += ["", f"_{ref.get('note', '')}_"]
    lines += ["", f"- digits split one by one: {report['digits_split_one_by_one']}",
              f"- unreachable tokens: {report['unreachable_tokens']}; partial-UTF-8 tokens: {report['partial_utf8_tokens']}",
              f"- most frequent CJK characters that are one token: {report['cjk_single_token_share']} "
              f"(of {report['cjk_chars_checked']})",
              f"- longest tokens: {', '.join(repr(t) for t in report['longest_tokens'][:5])}"]
    pruning = report.get("pruning", {})
    if pruning.get("enabled"):
        lines += ["", f"**pruned** {pruning['removed_total']} tokens: {pruning['removed_by_reason']}; "
                  f"protected (used by many clean documents): {pruning['protected_total']}"]
        for reason, examples in pruning["removed_examples"].items():
            lines.append(f"- {reason}: {', '.join(repr(t) for t in examples[:10])}")
    return "\n".join(lines) + "\n"


REFERENCE_ENCODINGS = ("cl100k_base", "o200k_base")


def reference_compression(held: dict[str, list[str]]) -> dict:
    """Characters per token of OpenAI's cl100k_base / o200k_base on the same held-out text.

    They ship inside the optional bpe-openai package (no download); without it the
    report says so instead of leaving the columns out silently.
    """
    try:
        import bpe_openai
    except ImportError:
        return {"available": False, "note": "pip install bpe-openai to compare with cl100k_base / o200k_base"}
    out: dict = {"available": True}
    for name in REFERENCE_ENCODINGS:
        enc = bpe_openai.get_encoding(name)
        out[name] = {c: round(sum(map(len, texts)) / max(sum(len(enc.encode(t)) for t in texts), 1), 3)
                     for c, texts in sorted(held.items())}
    return out
