"""L(N, D) = E + A / N^alpha + B / D^beta, with C = 6 N D training FLOPs, and the published reference laws.

N counts the non-embedding parameters and D the training tokens (Kaplan's convention:
at the 10M-500M sizes a team fits on, embeddings would dominate N and bend the law).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Law:
    E: float
    A: float
    B: float
    alpha: float
    beta: float
    name: str = "fitted"
    source: str = ""

    def loss(self, n: float, d: float) -> float:
        return self.E + self.A / n ** self.alpha + self.B / d ** self.beta

    def optimal(self, flops: float) -> tuple[float, float]:
        """(N, D) minimising loss(N, D) under 6 N D = flops (the closed form of Hoffmann et al. 2022, eq. 4)."""
        g = (self.alpha * self.A / (self.beta * self.B)) ** (1 / (self.alpha + self.beta))
        n = g * (flops / 6) ** (self.beta / (self.alpha + self.beta))
        return n, flops / (6 * n)

    @property
    def params_exponent(self) -> float:
        """a in N_opt ∝ C^a."""
        return self.beta / (self.alpha + self.beta)

    def to_dict(self) -> dict:
        return asdict(self)


# Hoffmann et al. 2022 ("Chinchilla"), approach 3, the constants as published.
CHINCHILLA = Law(1.69, 406.4, 410.7, 0.34, 0.28, "chinchilla",
                 "Hoffmann et al. 2022, approach 3 as published")
# Besiroglu et al. 2024 refit the same data: it matches the paper's own compute-optimal
# allocations (about 20 tokens per parameter), which the published constants do not.
CHINCHILLA_REFIT = Law(1.8172, 482.01, 2085.43, 0.3478, 0.3658, "chinchilla-refit",
                       "Besiroglu et al. 2024, refit of Hoffmann et al. 2022")
PRIORS = {law.name: law for law in (CHINCHILLA_REFIT, CHINCHILLA)}


def llama3_tokens(flops: float) -> float:
    """Compute-optimal training tokens of the Llama 3 report (Dubey et al. 2024): D*(C) = 0.299 C^0.537."""
    return 0.299 * flops ** 0.537


def training_flops(n: float, d: float) -> float:
    return 6 * n * d


def non_embedding_params(dim: int, n_layers: int, n_heads: int, n_kv_heads: int, ffn_hidden: int) -> int:
    """Attention (q, k, v, o), SwiGLU (three matrices) and the two RMSNorms per layer, plus the final norm."""
    head = dim // n_heads
    attention = dim * dim * 2 + 2 * dim * n_kv_heads * head
    return n_layers * (attention + 3 * dim * ffn_hidden + 2 * dim) + dim


def log_space(lo: float, hi: float, count: int) -> list[float]:
    if count == 1:
        return [math.sqrt(lo * hi)]
    return [math.exp(math.log(lo) + i * (math.log(hi) - math.log(lo)) / (count - 1)) for i in range(count)]
