"""The anneal flow: a decay branch from a stable-phase checkpoint of a run (tasks/train/anneal.py), trained,
exported, scored on the run's held-out samples, and registered as a version of the run's model whose tags name the
branch point. The run's own files are not touched; several branches can start from one run.
"""
from __future__ import annotations

from prefect import flow, task

from flows.common import DEFAULT_CONFIG, markdown_artifact, mlflow_run
from flows.evaluation import eval_metrics
from flows.versions import register_export
from pretrain.config import PipelineConfig, resolve_config
from tasks.common.lease import lease
from tasks.train.anneal import parse_mix, run_anneal


@task(name="anneal-branch")
def branch_task(cfg: PipelineConfig, name: str, tag: str | None, tokens: int, mix: dict | None, min_lr: float,
                env: dict[str, str]) -> dict:
    return run_anneal(cfg, name, tag, tokens, mix, min_lr, env)


@flow(name="anneal", log_prints=True)
def anneal_flow(config: PipelineConfig | str = DEFAULT_CONFIG, from_checkpoint: str | None = None,
                tokens: int = 1_000_000, mix: str | None = None, name: str | None = None, min_lr: float = 0.0) -> dict:
    """Branch a linear decay of `tokens` tokens (drawing `mix`, e.g. `zh=0.3,en=0.7`, from its first step) from the
    named (or newest complete) checkpoint of the run."""
    cfg = resolve_config(config, "train")
    shares = parse_mix(mix)
    name = name or f"{from_checkpoint or 'newest'}-{tokens}"
    with lease(cfg.run_root_path(), f"anneal-{name}"):
        run = mlflow_run(cfg, f"{cfg.name}/anneal/{name}", None, {"stage": "anneal", "branch": name})
        ok = False
        try:
            result = branch_task(cfg, name, from_checkpoint, tokens, shares, min_lr, run.rank_env())
            run.set_tags({"branch_point": result["source"]["checkpoint"], "hf_export": result["hf_export"]})
            if result["eval"]:
                run.log_metrics(eval_metrics(result["eval"]), step=result["final_step"])
            source = result["source"]
            result["model_version"] = register_export(run, result["hf_export"], f"anneal-{name}", {
                "branch": name, "branch_point": source["checkpoint"], "branch_step": str(source["step"]),
                "checkpoint": result["final_checkpoint"], "anneal_tokens": str(source["tokens"]),
                "anneal_mix": str(source["mix"])})
            ok = True
        finally:
            run.end(ok)
    source = result["source"]
    mix_text = source["mix"] or "the run's own"
    markdown_artifact(run, f"anneal-{name}", f"Branch `{name}` from `{source['checkpoint']}` (step {source['step']}): "
                      f"{source['steps']} steps, {source['tokens']:,} tokens, lr {source['lr']:.3g} -> "
                      f"{source['min_lr']:.3g}, mix {mix_text}.\n\nHeld-out perplexity: "
                      f"{(result['eval'] or {}).get('ppl')}\n\nExport: `{result['hf_export']}`, model version "
                      f"{result['model_version']} (alias `anneal-{name}`)", f"Anneal {name}")
    return result
