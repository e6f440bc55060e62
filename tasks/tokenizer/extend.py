"""Extending a trained tokenizer with domain terms (medical words, say) as added tokens only.

Added tokens are matched before the BPE model runs, so a term that occurs inside a
longer existing token would cut it and make it unreachable. Such terms are refused
(reported with the tokens they would break); the others are added after every
existing id, so no existing id changes and no existing token is lost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tokenizers import AddedToken, Tokenizer

from tasks.common.outputs import staged_output, write_json
from tasks.tokenizer.report import token_text


@dataclass
class Extension:
    added: list[str] = field(default_factory=list)
    already_single_tokens: list[str] = field(default_factory=list)
    refused: dict[str, list[str]] = field(default_factory=dict)  # term -> existing tokens it would break


def read_terms(path: Path) -> list[str]:
    terms = [t.strip() for t in Path(path).read_text(encoding="utf-8").splitlines()]
    terms = list(dict.fromkeys(t for t in terms if t and not t.startswith("#")))
    if not terms:
        raise ValueError(f"{path} holds no terms (one per line); nothing to add")
    return terms


def existing_texts(tok: Tokenizer) -> dict[str, int]:
    out = {}
    for token, idx in tok.get_vocab(with_added_tokens=False).items():
        text = token_text(token)
        if text:
            out[text] = idx
    return out


def extend_tokenizer(tok: Tokenizer, terms: list[str]) -> tuple[Tokenizer, Extension]:
    result = Extension()
    texts = existing_texts(tok)
    for term in terms:
        if len(tok.encode(term, add_special_tokens=False).ids) == 1:
            result.already_single_tokens.append(term)
            continue
        broken = sorted(t for t in texts if term in t and t.strip() != term)
        if broken:
            result.refused[term] = broken[:10]
        else:
            result.added.append(term)
    tok.add_tokens([AddedToken(t, normalized=True) for t in result.added])
    unreachable = [t for t, idx in texts.items() if tok.encode(t, add_special_tokens=False).ids != [idx]]
    if unreachable:  # the per-term check above should make this impossible
        raise RuntimeError(f"extension made {len(unreachable)} existing tokens unreachable, e.g. {unreachable[:5]}")
    return tok, result


def run_extend(tokenizer_dir: Path, terms_file: Path, out_dir: Path) -> dict:
    tok = Tokenizer.from_file(str(Path(tokenizer_dir) / "tokenizer.json"))
    before = tok.get_vocab_size(with_added_tokens=True)
    tok, ext = extend_tokenizer(tok, read_terms(terms_file))
    with staged_output(Path(out_dir)) as tmp:
        for name in ("tokenizer_config.json", "special_tokens_map.json"):
            src = Path(tokenizer_dir) / name
            if src.is_file():
                (tmp / name).write_bytes(src.read_bytes())
        tok.save(str(tmp / "tokenizer.json"))
        summary = {"tokens_before": before, "tokens_after": tok.get_vocab_size(with_added_tokens=True),
                   "added": ext.added, "already_single_tokens": ext.already_single_tokens, "refused": ext.refused}
        write_json(tmp / "extension.json", summary)
    return summary
