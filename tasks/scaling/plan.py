"""The compute-optimal plan for a budget: model size, tokens, predicted loss, nearest preset, wall time."""
from __future__ import annotations

import json
import math
from pathlib import Path

from pretrain.presets import PRESETS
from tasks.scaling.law import PRIORS, Law, llama3_tokens, non_embedding_params

SECONDS_PER_DAY = 86_400


def budget_from_cluster(gpus: int, days: float, peak_tflops: float, mfu: float) -> float:
    return gpus * days * SECONDS_PER_DAY * peak_tflops * 1e12 * mfu


def wall_days(flops: float, gpus: int, peak_tflops: float, mfu: float) -> float:
    return flops / (gpus * peak_tflops * 1e12 * mfu) / SECONDS_PER_DAY


def preset_sizes() -> dict[str, int]:
    keys = ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden")
    return {name: non_embedding_params(*(p[k] for k in keys)) for name, p in PRESETS.items()}


def closest_preset(n: float) -> tuple[str, int]:
    """The preset whose non-embedding size is nearest to n on a log scale."""

    sizes = preset_sizes()
    name = min(sizes, key=lambda k: abs(math.log(sizes[k] / n)))
    return name, sizes[name]


def plan(law: Law, flops: float, tokens_available: float | None = None, max_epochs: float = 1.0) -> dict:
    """Compute-optimal N and D for `flops`; with `tokens_available`, D is capped at max_epochs passes over them
    and the rest of the budget goes into parameters."""
    n, d = law.optimal(flops)
    limited = False
    if tokens_available is not None and d > tokens_available * max_epochs:
        d, limited = tokens_available * max_epochs, True
        n = flops / (6 * d)
    preset, preset_n = closest_preset(n)
    llama_d = llama3_tokens(flops)
    return {"flops": flops, "law": law.name, "law_source": law.source, "params": n, "tokens": d,
            "tokens_per_param": d / n, "loss": law.loss(n, d), "data_limited": limited,
            "closest_preset": preset, "preset_params": preset_n,
            "llama3_tokens": llama_d, "llama3_params": flops / (6 * llama_d)}


def load_law(fit_path: Path | None, prior: str) -> Law:
    """The fitted law when a fit file exists, else the named prior."""
    if fit_path is not None and Path(fit_path).is_file():

        data = json.loads(Path(fit_path).read_text())["law"]
        return Law(**data)
    if prior not in PRIORS:
        raise ValueError(f"unknown law {prior!r}; one of {sorted(PRIORS)}")
    return PRIORS[prior]


def human(x: float, unit: str = "") -> str:
    for factor, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= factor:
            return f"{x / factor:.3g}{suffix}{unit}"
    return f"{x:.3g}{unit}"
