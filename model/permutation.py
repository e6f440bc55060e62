"""A seeded permutation of [0, n) evaluated one index at a time, in O(1) time and memory.

Materialising a shuffled index costs n integers per pool and epoch on every
rank (2 GB and minutes at 5e8 samples). Here index -> permuted index is a
balanced Feistel network over the smallest even number of bits that covers n;
values that land outside [0, n) are encrypted again ("cycle walking"), which
stays a bijection on [0, n) because every cycle through a value below n comes
back to it. The domain is under 4n, so a lookup walks fewer than 4 times on
average. The round function is splitmix64's finaliser keyed per round, so
consecutive positions share no visible arithmetic (unlike a linear
congruential shuffle, whose constant step shows up as phase structure).
"""
from __future__ import annotations

import hashlib

MASK64 = (1 << 64) - 1
ROUNDS = 6  # 4 make a strong pseudo-random permutation (Luby-Rackoff); 2 more cost little


def _mix64(x: int) -> int:
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def round_keys(*key_parts: int) -> list[int]:
    """Per-round 64-bit keys from integers (seed, pool, epoch): a hash, so nearby seeds give unrelated keys."""
    digest = hashlib.blake2b(repr(tuple(key_parts)).encode(), digest_size=8 * ROUNDS).digest()
    return [int.from_bytes(digest[8 * r:8 * r + 8], "little") for r in range(ROUNDS)]


class FeistelPermutation:
    """perm(i) for i in [0, n): a bijection fixed by n and the key parts."""

    def __init__(self, n: int, *key_parts: int):
        if n < 1:
            raise ValueError(f"a permutation needs n >= 1, got {n}")
        self.n = n
        self.half_bits = max(1, ((n - 1).bit_length() + 1) // 2)
        self.half_mask = (1 << self.half_bits) - 1
        self.keys = round_keys(*key_parts)

    def _encrypt(self, x: int) -> int:
        left, right = x >> self.half_bits, x & self.half_mask
        for key in self.keys:
            left, right = right, left ^ (_mix64(right ^ key) & self.half_mask)
        return (left << self.half_bits) | right

    def __call__(self, i: int) -> int:
        if not 0 <= i < self.n:
            raise IndexError(f"index {i} outside [0, {self.n})")
        x = self._encrypt(i)
        while x >= self.n:
            x = self._encrypt(x)
        return x
