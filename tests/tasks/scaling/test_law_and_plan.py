"""Scaling-law fitting and the planner against known laws and published allocations."""
import math

import numpy as np
import pytest
import torch

from model.llama import ModelArgs, Transformer
from pretrain.presets import PRESETS
from tasks.scaling.fit import fit_law, isoflop_minimum, power_law
from tasks.scaling.law import CHINCHILLA, CHINCHILLA_REFIT, Law, llama3_tokens, non_embedding_params
from tasks.scaling.plan import budget_from_cluster, closest_preset, plan, wall_days


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_non_embedding_count_matches_the_model(preset):
    p = PRESETS[preset]
    with torch.device("meta"):
        model = Transformer(ModelArgs(**{**p, "vocab_size": 1000}))
    embeddings = sum(m.weight.numel() for m in (model.tok_embeddings, model.output) if m is not None)
    if p["tie_embeddings"]:
        embeddings = model.tok_embeddings.weight.numel()
    total = sum(t.numel() for t in model.parameters())
    keys = ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden")
    assert non_embedding_params(*(p[k] for k in keys)) == total - embeddings


def test_fit_recovers_a_known_law_from_noisy_runs():
    truth = Law(2.0, 300.0, 900.0, 0.32, 0.30)
    rng = np.random.default_rng(0)
    n, d, loss = [], [], []
    for flops in (1e17, 3e17, 1e18, 3e18, 1e19):
        opt_n, _ = truth.optimal(flops)
        for factor in (0.25, 0.5, 1.0, 2.0, 4.0):
            size = opt_n * factor
            n.append(size), d.append(flops / (6 * size))
            loss.append(truth.loss(n[-1], d[-1]) * math.exp(rng.normal(0, 0.003)))
    fit = fit_law(n, d, loss)
    assert fit.law.E == pytest.approx(truth.E, rel=0.05)
    assert fit.law.alpha == pytest.approx(truth.alpha, abs=0.05) and fit.law.beta == pytest.approx(truth.beta, abs=0.05)
    assert max(abs(r) for r in fit.residuals) < 0.015
    # what a team uses the fit for: the allocation two orders of magnitude beyond the runs
    assert fit.law.optimal(1e21)[0] == pytest.approx(truth.optimal(1e21)[0], rel=0.25)
    assert fit.law.params_exponent == pytest.approx(truth.params_exponent, abs=0.03)


def test_isoflop_minima_trace_the_compute_optimal_frontier():
    minima = []
    for flops in (1e18, 1e19, 1e20):
        opt_n, _ = CHINCHILLA_REFIT.optimal(flops)
        sizes = [opt_n * f for f in (0.2, 0.45, 1.0, 2.2, 5.0)]
        n_min, _ = isoflop_minimum(sizes, [CHINCHILLA_REFIT.loss(s, flops / (6 * s)) for s in sizes])
        assert n_min == pytest.approx(opt_n, rel=0.15)
        minima.append(n_min)
    _, exponent = power_law([1e18, 1e19, 1e20], minima)
    assert exponent == pytest.approx(CHINCHILLA_REFIT.params_exponent, abs=0.03)


@pytest.mark.parametrize("flops,params,tokens", [
    (1.92e19, 400e6, 8.0e9), (1.21e20, 1e9, 20.2e9), (1.23e22, 10e9, 205.1e9),
    (5.76e23, 67e9, 1.5e12), (3.85e24, 175e9, 3.7e12)])
def test_planner_reproduces_chinchilla_compute_optimal_allocations(flops, params, tokens):
    """Hoffmann et al. 2022, Table 3 (approach 1): parameters and tokens for each budget."""
    p = plan(CHINCHILLA_REFIT, flops)
    assert p["params"] == pytest.approx(params, rel=0.15) and p["tokens"] == pytest.approx(tokens, rel=0.15)
    assert 15 < p["tokens_per_param"] < 25


def test_published_exponents_and_the_llama3_rule():
    assert CHINCHILLA.params_exponent == pytest.approx(0.46, abs=0.01)  # approach 3: N_opt ∝ C^0.46
    p = plan(CHINCHILLA_REFIT, 3.8e25)  # Llama 3 405B: 3.8e25 FLOPs -> 402B parameters, 16.55T tokens
    assert p["llama3_tokens"] == pytest.approx(16.55e12, rel=0.03)
    assert p["llama3_params"] == pytest.approx(402e9, rel=0.05)  # the report's 402B is its own fit, not C / 6D
    assert llama3_tokens(1e22) == pytest.approx(0.299 * 1e22 ** 0.537)


def test_data_limited_plan_spends_the_rest_on_parameters_and_cluster_budgets():
    free = plan(CHINCHILLA_REFIT, 1e21)
    capped = plan(CHINCHILLA_REFIT, 1e21, tokens_available=free["tokens"] / 4)
    assert capped["data_limited"] and capped["tokens"] == pytest.approx(free["tokens"] / 4)
    assert capped["params"] == pytest.approx(4 * free["params"]) and capped["loss"] > free["loss"]
    flops = budget_from_cluster(gpus=64, days=10, peak_tflops=989, mfu=0.4)
    assert flops == pytest.approx(64 * 10 * 86400 * 989e12 * 0.4)
    assert wall_days(flops, 64, 989, 0.4) == pytest.approx(10)
    assert closest_preset(4.5e8)[0] == "500m" and closest_preset(9e7)[0] == "125m"


def test_an_isoflop_minimum_outside_the_sizes_tried_is_flagged():
    from tasks.scaling.report import fit_results

    flops = 1e19
    opt_n, _ = CHINCHILLA_REFIT.optimal(flops)
    points = [{"point_id": f"p{f}", "budget": flops, "flops": flops, "params": opt_n * f, "tokens": flops / (6 * opt_n * f),
               "loss": CHINCHILLA_REFIT.loss(opt_n * f, flops / (6 * opt_n * f))} for f in (0.5, 1.0, 2.0, 4.0, 8.0)]
    inside = fit_results(points, 1e-3)["isoflop"][0]
    assert not inside["at_edge"] and inside["params_opt"] == pytest.approx(opt_n, rel=0.2)
    assert fit_results(points[2:], 1e-3)["isoflop"][0]["at_edge"]  # all larger than the optimum


def test_a_nearly_straight_isoflop_curve_gives_the_best_size_tried():
    # final losses of a real tiny CPU sweep (3e10 FLOPs): the parabola's vertex fell at N = e^-1235
    sizes, losses = [24736, 55536, 98624], [6.30813197294871, 6.629649202028911, 6.858075102170308]
    assert isoflop_minimum(sizes, losses) == (24736.0, 6.30813197294871)
