"""The eval flow: a saved checkpoint -> held-out perplexity per channel (+ lm-eval tasks), on the training run's timeline.

Deployed on a cron schedule and triggered by the `pretrain.checkpoint.saved`
events that the train flow emits (deployments/prefect.yaml).
"""
from __future__ import annotations

import math

from prefect import flow, task
from prefect.artifacts import create_markdown_artifact

from flows import tracking
from flows.common import DEFAULT_CONFIG, StageRun, artifact_key, tracking_target
from pretrain.config import PipelineConfig, resolve_config
from tasks.eval.evaluate import evaluate, pick_checkpoint


@task(name="score-checkpoint")
def score_task(cfg: PipelineConfig, tag: str) -> dict:
    return evaluate(cfg, tag)


@task(name="lm-eval")
def lm_eval_task(cfg: PipelineConfig, tag: str) -> dict[str, float]:
    from tasks.train.export import export_run_checkpoint
    from tasks.eval.lm_eval_tasks import run_lm_eval

    root = cfg.run_root_path()
    hf_dir = root / "eval" / "hf" / tag
    if not (hf_dir / "model.safetensors").is_file():
        export_run_checkpoint(root / "train", root / "tokenizer", hf_dir, tag, dtype="fp32")
    return run_lm_eval(hf_dir, cfg.eval.lm_eval, cfg.eval.device)


def eval_metrics(scores: dict) -> dict[str, float]:
    """Held-out (and task) scores under one set of names: the run's checkpoints, its decay branches and averages
    compare side by side in MLflow."""
    metrics = {f"ckpt_eval_ppl_{c}": v for c, v in scores["ppl"].items()}
    metrics.update({f"ckpt_task/{task}/{k}": v for task, figures in scores.get("tasks", {}).items()
                    for k, v in figures.items() if isinstance(v, float) and math.isfinite(v)})
    return metrics


def training_run(cfg: PipelineConfig, run_id: str | None) -> StageRun | None:
    """The MLflow run of the training that wrote the checkpoints: the one named, else the newest `<name>/train`."""
    root, uri, exp = tracking_target(cfg)
    run_id = run_id or tracking.newest_run(uri, exp, f"{cfg.name}/train")
    return StageRun(cfg, root, uri, run_id, exp) if run_id else None


def report(result: dict, lm: dict[str, float], run: StageRun | None, threshold: float) -> str:
    lines = [f"Checkpoint `{result['tag']}` (step {result['step']})" + (" — scored before, not recomputed" if result["reused"] else ""),
             "", "| channel | perplexity | previous | change % | |", "|---|---|---|---|---|"]
    for r in result["comparison"]:
        flag = f"REGRESSION (> {threshold}%)" if r["regressed"] else ""
        lines.append(f"| {r['channel']} | {r['ppl']} | {r['previous_ppl'] or '-'} | {r['change_pct'] if r['change_pct'] is not None else '-'} | {flag} |")
    if result.get("task_comparison"):
        lines += ["", "| task | figure | value | ± s.e. | previous | change | noise | |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['task']} | {r['figure']} | {r['value']} | {r['se']:.4f} | {r['previous'] if r['previous'] is not None else '-'} "
                  f"| {r['change'] if r['change'] is not None else '-'} | {r['noise'] if r['noise'] is not None else '-'} "
                  f"| {'REGRESSION' if r['regressed'] else ''} |" for r in result["task_comparison"]]
    if lm:
        lines += ["", "| lm-eval task/metric | value |", "|---|---|"] + [f"| {k} | {v:.4f} |" for k, v in sorted(lm.items())]
    if run:
        lines += ["", f"MLflow training run: {run.mlflow_link}"]
    return "\n".join(lines)


@flow(name="eval", log_prints=True)
def eval_flow(config: PipelineConfig | str = DEFAULT_CONFIG, checkpoint: str | None = None,
              mlflow_train_run_id: str | None = None) -> dict:
    """Score the named (or newest complete) checkpoint on held-out data and flag a regression against the previous one."""
    cfg = resolve_config(config, "eval")
    tag = pick_checkpoint(cfg, checkpoint or None)  # an event template renders a missing value as ''
    mlflow_train_run_id = mlflow_train_run_id or None
    if tag is None:
        print(f"no complete checkpoint under {cfg.run_root_path() / 'train' / 'checkpoints'} yet; nothing to evaluate")
        return {"tag": None}
    result = score_task(cfg, tag)
    lm = lm_eval_task(cfg, tag) if cfg.eval.lm_eval.tasks else {}
    run = training_run(cfg, mlflow_train_run_id)
    if run and not result["reused"]:
        metrics = eval_metrics(result)
        metrics.update({f"ckpt_eval_{k.replace('/', '_')}": v for k, v in lm.items()})
        run.log_metrics(metrics, step=result["step"])
    markdown = report(result, lm, run, cfg.eval.regression_pct)
    key = artifact_key(cfg, "eval")
    create_markdown_artifact(key=key, markdown=markdown, description=f"Eval of {tag}")
    if result["regressed"]:
        create_markdown_artifact(key=f"{key}-regression", markdown=markdown,
                                 description=f"REGRESSION at {tag}: {result['regressed']} got worse beyond the "
                                             f"threshold ({cfg.eval.regression_pct}% perplexity; "
                                             f"{cfg.eval.noise_sigmas} standard errors for task figures)")
        print(f"regression at {tag}: {result['regressed']}")
    return {**result, "lm_eval": lm, "mlflow_train_run_id": run.run_id if run else None}
