"""The scaling flow: train the grid of small models on this run's data, fit L(N, D) and the iso-FLOP minima.

Each grid point trains through the normal training path (DeepSpeed ranks, checkpoints,
a child MLflow run with its curve) and is scored on the held-out samples. The fit
(`<run_root>/scaling/fit.json`) is what `pretrain plan --config` plans with.
"""
from __future__ import annotations

from pathlib import Path

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, NO_MLFLOW_RUN, StageRun, markdown_artifact, stage_run, table_artifact
from pretrain.config import PipelineConfig, resolve_config
from tasks.common.outputs import write_json
from tasks.scaling.grid import GridPoint, completed_point, plan_grid, train_point
from tasks.scaling.report import FIT_FILE, fit_results, plot


@task(name="train-grid-point")
def train_point_task(cfg: PipelineConfig, point: GridPoint, run: StageRun) -> dict:
    out_dir = run.dir("scaling") / point.point_id
    if (finished := completed_point(cfg, point, out_dir)) is not None:
        return finished  # trained by an earlier (interrupted or retried) sweep
    child = run.child(f"{cfg.name}/scaling/{point.point_id}", {"stage": "scaling", "grid_point": point.point_id})
    if child is None:  # the tracking server is down: the point trains, its curve stays in its files
        return train_point(cfg, point, out_dir, NO_MLFLOW_RUN)
    child.log_params({"point": point.__dict__})
    ok = False
    try:
        result = train_point(cfg, point, out_dir, child.rank_env())
        child.log_metrics({"final_eval_loss": result["loss"]}, step=point.steps)
        ok = True
        return result
    finally:
        child.end(ok)


@task(name="fit-scaling-law")
def fit_task(cfg: PipelineConfig, results: list[dict], skipped: list[dict], out_dir: str) -> dict:
    fitted = {**fit_results(results, cfg.scaling.huber_delta), "runs": results, "skipped": skipped}
    out = Path(out_dir)
    write_json(out / FIT_FILE, fitted)
    fitted["plots"] = [str(p) for p in plot(results, fitted, out)]
    return fitted


def summary(fitted: dict) -> str:
    law = fitted["law"]
    lines = ["**Fitted law** L(N, D) = E + A/N^α + B/D^β: " + (
        f"E = {law['E']:.3f}, A = {law['A']:.4g}, B = {law['B']:.4g}, α = {law['alpha']:.3f}, β = {law['beta']:.3f} "
        f"(rms log residual {fitted['rms_residual']:.4f})" if law else f"not fitted: {fitted['not_fitted']}")]
    if fitted["isoflop_params_law"]:
        p = fitted["isoflop_params_law"]
        lines.append(f"**Iso-FLOP minima**: N_opt = {p['k']:.3g} · C^{p['a']:.3f}")
    lines += [f"- C = {m['flops']:.3g}: N_opt = {m['params_opt']:.3g}, D_opt = {m['tokens_opt']:.3g}, "
              f"loss {m['loss_min']:.4f}" + (" (at the edge of the sizes tried: widen scaling.dims)" if m["at_edge"] else "")
              for m in fitted["isoflop"]]
    if fitted["skipped"]:
        lines.append(f"{len(fitted['skipped'])} grid points skipped (outside scaling.min_steps..max_steps)")
    return "\n\n".join(lines)


@flow(name="scaling", log_prints=True, persist_result=True)
def scaling_flow(config: PipelineConfig | str = DEFAULT_CONFIG) -> dict:
    """Train the grid (scaling.budgets x scaling.dims) on the tokenized data and fit the scaling law to it."""
    cfg = resolve_config(config, "scaling")
    if not cfg.scaling.budgets:
        raise ValueError("scaling.budgets is empty; list the training FLOPs of each grid column, e.g. [1e17, 3e17, 1e18]")
    with stage_run(cfg, "scaling", None) as run:
        points, skipped = plan_grid(cfg)
        print(f"grid: {len(points)} runs, {len(skipped)} skipped")
        results = [train_point_task(cfg, p, run) for p in points]  # one after another: each takes every rank
        fitted = fit_task(cfg, results, skipped, str(run.dir("scaling")))
        if fitted["law"]:
            run.log_metrics({f"law_{k}": v for k, v in fitted["law"].items() if isinstance(v, float)})
        if fitted["isoflop_params_law"]:
            run.log_metrics({"isoflop_params_exponent": fitted["isoflop_params_law"]["a"]})
        run.log_files(run.dir("scaling"), (FIT_FILE, *(Path(p).name for p in fitted["plots"])), "scaling")
        table_artifact(run, "scaling-runs", [{k: r[k] for k in ("point_id", "params", "tokens", "flops", "steps", "loss")}
                                             | {"residual": fitted["residuals"].get(r["point_id"])} for r in results],
                       "Scaling grid: final held-out loss per run, and its residual under the fitted law")
        markdown_artifact(run, "scaling", summary(fitted), "Scaling-law fit")
    return {k: fitted[k] for k in ("law", "not_fitted", "isoflop", "isoflop_params_law", "points")}
