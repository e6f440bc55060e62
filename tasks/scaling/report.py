"""From the grid's final losses: the fitted law, iso-FLOP minima, the frontier, and the plots."""
from __future__ import annotations

import math
from pathlib import Path

from tasks.scaling.fit import fit_law, isoflop_minimum, power_law
from tasks.scaling.law import Law, log_space

FIT_FILE = "fit.json"  # <run_root>/scaling/fit.json: written by the scaling flow, read by `pretrain plan`


def fit_results(points: list[dict], huber_delta: float) -> dict:
    """The law (or why it could not be fitted), residuals per point, iso-FLOP minima and their power law."""
    out: dict = {"points": len(points), "law": None, "not_fitted": None, "residuals": {}, "isoflop": [],
                 "isoflop_params_law": None}
    try:
        fit = fit_law([p["params"] for p in points], [p["tokens"] for p in points], [p["loss"] for p in points],
                      huber_delta)
        out["law"] = fit.law.to_dict()
        out["residuals"] = {p["point_id"]: r for p, r in zip(points, fit.residuals)}
        out["rms_residual"] = math.sqrt(sum(r * r for r in fit.residuals) / len(fit.residuals))
    except ValueError as err:
        out["not_fitted"] = str(err)
    for budget in sorted({p["budget"] for p in points}):
        column = sorted((p for p in points if p["budget"] == budget), key=lambda p: p["params"])
        if len(column) < 3:
            continue
        n_opt, loss_min = isoflop_minimum([p["params"] for p in column], [p["loss"] for p in column])
        flops = sum(p["flops"] for p in column) / len(column)
        sizes = [p["params"] for p in column]
        at_edge = not sizes[0] < n_opt < sizes[-1]  # the optimum lies at or beyond the sizes tried: widen the grid
        out["isoflop"].append({"budget": budget, "flops": flops, "params_opt": n_opt, "tokens_opt": flops / (6 * n_opt),
                               "loss_min": loss_min, "at_edge": at_edge})
    inside = [m for m in out["isoflop"] if not m["at_edge"]]  # an edge is a bound on the optimum, not the optimum
    if len(inside) >= 2:
        k, a = power_law([m["flops"] for m in inside], [m["params_opt"] for m in inside])
        out["isoflop_params_law"] = {"k": k, "a": a, "budgets": len(inside)}
    return out


def plot(points: list[dict], fitted: dict, out_dir: Path) -> list[Path]:
    """loss_vs_compute.png (runs and the fitted frontier, extended 100x) and isoflop.png (loss over N per budget)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    sc = ax.scatter([p["flops"] for p in points], [p["loss"] for p in points], c=[math.log10(p["params"]) for p in points],
                    cmap="viridis")
    fig.colorbar(sc, label="log10 non-embedding parameters")
    if fitted["law"]:
        law = Law(**fitted["law"])
        lo, hi = min(p["flops"] for p in points), max(p["flops"] for p in points) * 100
        xs = log_space(lo, hi, 60)
        ax.plot(xs, [law.loss(*law.optimal(c)) for c in xs], "r-", label="fitted compute-optimal frontier")
        ax.legend()
    ax.set(xscale="log", xlabel="training FLOPs (6 N D)", ylabel="held-out loss", title="Loss against compute")
    fig.tight_layout()
    paths = [out_dir / "loss_vs_compute.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for budget in sorted({p["budget"] for p in points}):
        column = sorted((p for p in points if p["budget"] == budget), key=lambda p: p["params"])
        ax.plot([p["params"] for p in column], [p["loss"] for p in column], "o-", label=f"C = {budget:.1e}")
    for m in fitted["isoflop"]:
        ax.plot([m["params_opt"]], [m["loss_min"]], "k*", markersize=12)
    ax.set(xscale="log", xlabel="non-embedding parameters", ylabel="held-out loss", title="Iso-FLOP curves (* minimum)")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "isoflop.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths
