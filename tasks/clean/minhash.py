"""MinHash signatures and LSH band hashes for near-duplicate detection.

Shingles are word n-grams for English and character n-grams (spaces removed)
for Chinese and code. Permutations are (a*h + b) mod 2^61-1 over 32-bit shingle
hashes, as in datasketch; each band of `rows` minima is hashed to one uint64, so
two documents are candidates when any band hash matches.
"""
from __future__ import annotations

import re

import numpy as np
import xxhash

from pretrain.config import DedupConfig

MERSENNE = np.uint64((1 << 61) - 1)
MAX32 = np.uint64(0xFFFFFFFF)
_WORD = re.compile(r"\w+")
CHUNK = 4096  # shingles per vectorized step: bounds memory on huge documents


class MinHasher:
    def __init__(self, cfg: DedupConfig):
        self.n, self.bands, self.rows = cfg.ngram, cfg.bands, cfg.rows
        rng = np.random.default_rng(cfg.seed)
        perms = cfg.bands * cfg.rows
        self.a = rng.integers(1, int(MERSENNE), perms, dtype=np.uint64)
        self.b = rng.integers(0, int(MERSENNE), perms, dtype=np.uint64)

    def shingles(self, text: str, channel: str) -> list[str]:
        if channel == "en":
            words = _WORD.findall(text.lower())
            units, sep = words, " "
        else:
            units, sep = [c for c in text if not c.isspace()], ""
        if len(units) <= self.n:
            return [sep.join(units)] if units else []
        return [sep.join(units[i:i + self.n]) for i in range(len(units) - self.n + 1)]

    def signature(self, text: str, channel: str) -> np.ndarray:
        shingles = self.shingles(text, channel)
        sig = np.full(len(self.a), MAX32, dtype=np.uint64)
        for start in range(0, len(shingles), CHUNK):
            hv = np.fromiter((xxhash.xxh32_intdigest(s.encode()) for s in shingles[start:start + CHUNK]),
                             dtype=np.uint64)[:, None]
            # uint64 overflow in a*h is intended (datasketch does the same); the mod keeps a hash family
            phv = ((hv * self.a + self.b) % MERSENNE) & MAX32
            np.minimum(sig, phv.min(axis=0), out=sig)
        return sig

    def band_hashes(self, text: str, channel: str) -> list[int]:
        return self.bands_of(self.signature(text, channel))

    def bands_of(self, signature: np.ndarray) -> list[int]:
        """The LSH band hashes of a signature."""
        sig = signature.astype(np.uint32)
        return [xxhash.xxh64_intdigest(sig[i * self.rows:(i + 1) * self.rows].tobytes()) >> 1  # fits BIGINT
                for i in range(self.bands)]


def jaccard_estimate(sig_a: np.ndarray, sig_b: np.ndarray) -> float:
    return float(np.mean(sig_a == sig_b))


class NearIndex:
    """Signatures held in memory, bucketed by LSH band: `near` gives those sharing a band with a signature whose
    Jaccard estimate reaches a threshold (the in-memory twin of the clean stage's DuckDB band join)."""

    def __init__(self, hasher: MinHasher):
        self.hasher = hasher
        self.signatures: list[np.ndarray] = []
        self.buckets: dict[tuple[int, int], list[int]] = {}

    def add(self, signature: np.ndarray) -> int:
        """The signature's id (ids count up from 0 in the order added)."""
        sig_id = len(self.signatures)
        self.signatures.append(signature)
        for band in enumerate(self.hasher.bands_of(signature)):
            self.buckets.setdefault(band, []).append(sig_id)
        return sig_id

    def near(self, signature: np.ndarray, min_jaccard: float) -> list[int]:
        candidates = dict.fromkeys(i for band in enumerate(self.hasher.bands_of(signature))
                                   for i in self.buckets.get(band, ()))
        return [i for i in candidates if jaccard_estimate(signature, self.signatures[i]) >= min_jaccard]
