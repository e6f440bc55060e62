"""Dirty-token pruning: remove porn / gambling / spam and junk tokens from a trained byte-level BPE.

A token is a candidate when its text contains a term of the dirty lexicons, looks
like a URL fragment, or is a long run of one repeated character. A candidate that
many clean documents use is protected, not removed. Removing a token also removes
the merge that builds it and every merge that consumes it, recursively (the tokens
those merges built could never be produced again). Byte tokens and special tokens
are never removed, so every text stays encodable; ids are renumbered contiguously.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field

from tokenizers import Tokenizer

from pretrain.config import PruneConfig
from tasks.clean.rules.dirty import Lexicon, builtin_paths, parse_terms, read_list
from tasks.tokenizer.report import byte_decoder, token_text, whole_characters

# a piece of a URL: the scheme separator, www., or a domain / page suffix; a bare "http" is a word
# (HTTPConnection, "the HTTP header") and stays
CUT = "\ufffd"  # marks where a token cuts a character
_URL = re.compile(r"://|www\.|\.(com|net|org|cn|html?|php)\b", re.I)


@dataclass
class PruneResult:
    tokenizer: Tokenizer
    removed: dict[str, list[str]] = field(default_factory=dict)   # reason -> token texts
    protected: list[dict] = field(default_factory=list)           # candidates kept because clean documents use them
    remaining_matches: list[str] = field(default_factory=list)     # tokens left that still are a list term

    def summary(self, examples: int = 15) -> dict:
        return {"removed_total": sum(len(v) for v in self.removed.values()),
                "removed_by_reason": {r: len(v) for r, v in self.removed.items()},
                "removed_examples": {r: v[:examples] for r, v in self.removed.items()},
                "protected": self.protected[:examples], "protected_total": len(self.protected),
                "remaining_list_matches": len(self.remaining_matches),
                "remaining_list_match_examples": self.remaining_matches[:examples]}


def pruning_lexicon(cfg: PruneConfig) -> Lexicon:
    """Built-in terms of at least min_builtin_weight (gambling, porn, scams), and every term of the user's lists,
    less the everyday words of the allow-lists; Chinese terms match word-aware.

    The lower-weight built-in terms (discount, sign up, loan) are everyday words
    that only signal an advert in density; they stay in the vocabulary. So do
    everyday words that porn or ad lists happen to name (铃声 ringtone, 自拍 selfie,
    按摩 massage): a vocabulary without them is biased, not clean.
    """
    terms: dict[str, float] = {}
    for path in builtin_paths(".terms.txt"):
        terms.update({t: w for t, w in parse_terms(read_list(path)).items() if w >= cfg.min_builtin_weight})
    for path in cfg.lexicons:
        terms.update(parse_terms(read_list(path)))
    allowed = {t.strip().lower() for path in builtin_paths(".allow.txt") + list(cfg.allow_lists) for t in read_list(path)}
    return Lexicon({t: w for t, w in terms.items() if t not in allowed and not short_latin(t)}, word_aware=True)


def short_latin(term: str) -> bool:
    """Two-letter Latin abbreviations on Chinese lists (SM, LY) are the first pieces of everyday English words
    (' sm' of ' small', ' ly' of ' lying'): as pruning terms they remove English, not dirt."""
    return term.isascii() and len(term) < 3


def candidate_reason(text: str, lexicon: Lexicon, cfg: PruneConfig) -> str | None:
    stripped = text.strip()
    hits = lexicon.hits(stripped)
    # a Latin term counts only in a word-initial token (" shit"), not in a word piece ("ass" of "class")
    if any(not term.isascii() for term, _ in hits) or (hits and text[:1].isspace()):
        return "dirty_lexicon"
    if len(stripped) >= 4 and _URL.search(stripped):
        return "url_fragment"
    if len(stripped) >= cfg.min_repeat_run and len(set(stripped)) == 1 and not stripped.isspace():
        return "repeated_character"
    return None


def document_usage(tok: Tokenizer, texts: list[str]) -> Counter:
    """token id -> number of documents whose encoding uses it."""
    usage: Counter = Counter()
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        usage.update(set(enc.ids))
    return usage


@dataclass
class ChannelUsage:
    """How many clean documents of each channel use each token, and from what count a channel protects one.

    Judged per channel: a share of all documents can never protect a token of a minority channel
    (' small', built from ' sm', was removed while English was a tenth of the sample)."""
    usage: dict[str, Counter]
    protect_at: dict[str, int]

    @classmethod
    def of(cls, tok: Tokenizer, texts: dict[str, list[str]], cfg: PruneConfig) -> "ChannelUsage":
        return cls({c: document_usage(tok, t) for c, t in texts.items()},
                   {c: max(cfg.protect_min_docs, int(cfg.protect_doc_share * len(t))) for c, t in texts.items()})

    def protector(self, token_ids: list[int]) -> tuple[str, int, int] | None:
        """(channel, token id, documents) of the first channel that relies on one of the tokens enough to keep it."""
        for channel, usage in sorted(self.usage.items()):
            idx = max(token_ids, key=lambda i: usage[i])
            if usage[idx] >= self.protect_at[channel]:
                return channel, idx, usage[idx]
        return None


def merge_children(merges: list[tuple[str, str]]) -> dict[str, list[str]]:
    """token -> the tokens built by merges that consume it."""
    children: dict[str, list[str]] = {}
    for a, b in merges:
        children.setdefault(a, []).append(a + b)
        if b != a:
            children.setdefault(b, []).append(a + b)
    return children


def removal_closure(root: str, children: dict[str, list[str]]) -> set[str]:
    """The root and every token that can only be built through it."""
    removed, stack = {root}, [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in removed:
                removed.add(child)
                stack.append(child)
    return removed


def merge_pairs(data: dict) -> list[tuple[str, str]]:
    """The merges of a tokenizer.json dict, written as pairs (current) or "a b" strings (older files)."""
    return [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in data["model"]["merges"]]


def rebuild(data: dict, removed: set[str]) -> Tokenizer:
    """A tokenizer from `data` (a parsed tokenizer.json, edited in place) without the removed tokens."""
    model = data["model"]
    merges = merge_pairs(data)
    ordered = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    model["vocab"] = {t: i for i, (t, _) in enumerate((t, i) for t, i in ordered if t not in removed)}
    model["merges"] = [[a, b] for a, b in merges if a not in removed and b not in removed and a + b not in removed]
    next_id = len(model["vocab"])
    for added in sorted(data["added_tokens"], key=lambda a: a["id"]):
        if added["content"] in model["vocab"]:
            added["id"] = model["vocab"][added["content"]]
        else:
            added["id"], next_id = next_id, next_id + 1
    return Tokenizer.from_str(json.dumps(data))


def prune_tokenizer(tok: Tokenizer, clean_texts: dict[str, list[str]] | list[str], cfg: PruneConfig,
                    special: set[str]) -> PruneResult:
    """clean_texts: clean documents per channel (a plain list is one channel)."""
    lexicon = pruning_lexicon(cfg)
    alphabet = set(byte_decoder())
    vocab = tok.get_vocab(with_added_tokens=False)
    usage = ChannelUsage.of(tok, clean_texts if isinstance(clean_texts, dict) else {"all": clean_texts}, cfg)
    data = json.loads(tok.to_str())
    children = merge_children(merge_pairs(data))
    result, removed = PruneResult(tok), set()
    for token, idx in sorted(vocab.items(), key=lambda kv: kv[1]):
        if token in special or token in alphabet:
            continue
        text = judged_text(token)
        reason = candidate_reason(text.strip(CUT), lexicon, cfg) if text is not None else None
        if reason is None:
            continue
        closure = removal_closure(token, children) - alphabet - special
        kept_by = usage.protector([vocab[t] for t in closure if t in vocab])
        if kept_by:
            channel, busiest, docs = kept_by
            result.protected.append({"token": text, "reason": reason, "documents": docs, "channel": channel,
                                     "because_of": tok.id_to_token(busiest) and judged_text(tok.id_to_token(busiest))})
            continue
        result.removed.setdefault(reason, []).append(text)
        for extra in sorted(closure - {token} - removed, key=lambda t: vocab.get(t, 0)):
            result.removed.setdefault("built_from_removed_token", []).append(judged_text(extra) or extra)
        removed |= closure
    result.tokenizer = rebuild(data, removed) if removed else tok
    result.remaining_matches = remaining_list_matches(result.tokenizer, lexicon, special)
    return result


def remaining_list_matches(tok: Tokenizer, lexicon: Lexicon, special: set[str]) -> list[str]:
    """Tokens left in the vocabulary that still hold a list term as a word (protected ones, or missed)."""
    found = []
    for token in sorted(tok.get_vocab(with_added_tokens=False), key=tok.token_to_id):
        text = (judged_text(token) or "").strip(CUT) if token not in special else ""
        if text.strip() and any(not t.isascii() or text[:1].isspace() for t, _ in lexicon.hits(text.strip())):
            found.append(text)
    return found


def judged_text(token: str) -> str | None:
    """A token's text; for one that starts or ends inside a character, the whole characters it holds, marked with
    U+FFFD where a character is cut ('色情内\ufffd'): a dirty term inside such a piece is still a dirty term."""
    text = token_text(token)
    return text if text is not None else whole_characters(token)


def verify(tok: Tokenizer, texts: list[str]) -> dict:
    """Contiguous ids, every text encodable and round-tripping."""
    ids = sorted(tok.get_vocab(with_added_tokens=True).values())
    failures = sum(tok.decode(tok.encode(t, add_special_tokens=False).ids, skip_special_tokens=False) != t for t in texts)
    return {"ids_contiguous": ids == list(range(len(ids))), "roundtrip_failures_after_pruning": failures}
