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
