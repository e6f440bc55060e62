"""The grid of small runs: for each compute budget, models of several widths trained for C / 6N tokens."""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from model.checkpoint_eval import evaluate_checkpoint
from pretrain.config import ModelConfig, PipelineConfig
from tasks.common.outputs import read_json, write_json
from tasks.scaling.law import non_embedding_params
from tasks.train.run import run_train


POINT_FILE = "point.json"


@dataclass(frozen=True)
class GridPoint:
    budget: float      # the FLOPs this column of the grid aims at
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_hidden: int
    params: int        # non-embedding
    steps: int
    tokens: int        # steps x tokens per step
    flops: float       # 6 x params x tokens, what the run really spends

    @property
    def point_id(self) -> str:
        return f"c{self.budget:.0e}-d{self.dim}".replace("+", "")


def shape(dim: int) -> dict:
    """A Llama shape from a width: head size 16 below 128 and 32 from there, GQA 2:1, depth dim/32, SwiGLU 8/3."""
    head = 16 if dim < 128 else 32
    if dim % head:
        raise ValueError(f"scaling.dims: {dim} is not a multiple of {head}; use multiples of 16 (32 from 128)")
    n_heads = dim // head
    return {"dim": dim, "n_layers": max(2, dim // 32), "n_heads": n_heads,
            "n_kv_heads": n_heads // 2 if n_heads % 2 == 0 else n_heads, "ffn_hidden": 32 * math.ceil(8 * dim / 3 / 32)}


def tokens_per_step(cfg: PipelineConfig) -> int:
    from tasks.train.comm_plan import grad_accum_for, ranks_of

    t = cfg.train
    ranks = ranks_of(t)
    return t.batch.seq_len * t.batch.micro_batch_size * grad_accum_for(t, ranks) * ranks


def plan_grid(cfg: PipelineConfig) -> tuple[list[GridPoint], list[dict]]:
    """(points to train, skipped points with the reason) for every budget x width."""
    s, per_step = cfg.scaling, tokens_per_step(cfg)
    points, skipped = [], []
    for budget in s.budgets:
        for dim in s.dims:
            sh = shape(dim)
            params = non_embedding_params(**{k: sh[k] for k in ("dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden")})
            steps = round(budget / (6 * params) / per_step)
            if not s.min_steps <= steps <= s.max_steps:
                skipped.append({"budget": budget, "dim": dim, "params": params, "steps": steps,
                                "reason": f"{steps} steps is outside scaling.min_steps..max_steps "
                                          f"({s.min_steps}..{s.max_steps})"})
                continue
            points.append(GridPoint(budget, params=params, steps=steps, tokens=steps * per_step,
                                    flops=6.0 * params * steps * per_step, **sh))
    return points, skipped


def point_config(cfg: PipelineConfig, point: GridPoint) -> tuple[ModelConfig, object]:
    model = ModelConfig(dim=point.dim, n_layers=point.n_layers, n_heads=point.n_heads, n_kv_heads=point.n_kv_heads,
                        ffn_hidden=point.ffn_hidden, max_seq_len=cfg.train.batch.seq_len)
    train = cfg.train.changed(
        steps=point.steps, save_every=point.steps, warmup_steps=min(cfg.train.optimizer.warmup_steps, point.steps // 10),
        eval_every=0, keep_last=1, keep_every=0, export_hf=False, resume_tag=None,
        eval_samples_per_channel=cfg.scaling.eval_samples_per_channel)
    return model, train


def fingerprint(cfg: PipelineConfig, point: GridPoint) -> str:
    model, train = point_config(cfg, point)
    blob = json.dumps([asdict(point), model.model_dump(), train.model_dump()], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def completed_point(cfg: PipelineConfig, point: GridPoint, out_dir: Path) -> dict | None:
    """The recorded result of this point when it was trained with the same settings, else None."""
    done = Path(out_dir) / POINT_FILE
    if done.is_file() and read_json(done).get("fingerprint") == fingerprint(cfg, point):
        return {**read_json(done), "reused": True}
    return None


def train_point(cfg: PipelineConfig, point: GridPoint, out_dir: Path, mlflow_env: dict[str, str]) -> dict:
    """Train one grid point through the normal training path and score it on the held-out samples; its
    point.json carries a fingerprint, so completed_point() finds it again (a retried sweep goes on)."""
    out_dir = Path(out_dir)
    root = cfg.run_root_path()
    if not (root / "tokens" / "manifest.json").is_file():
        raise FileNotFoundError(f"{root / 'tokens'} holds no token shards; run the clean, tokenizer and tokenize "
                                f"stages first (pretrain tokenize --config ...)")
    model, train = point_config(cfg, point)
    run_train(model, train, root / "tokenizer", root / "tokens", out_dir, mlflow_env, log_line=lambda _: None)
    scored = evaluate_checkpoint(out_dir, None, cfg.eval.device, cfg.eval.batch_size)
    tokens = sum(scored["tokens"].values())
    loss = sum(scored["loss"][c] * scored["tokens"][c] for c in scored["tokens"]) / tokens
    result = {**asdict(point), "point_id": point.point_id, "loss": loss, "loss_by_channel": scored["loss"],
              "eval_tokens": tokens, "fingerprint": fingerprint(cfg, point)}
    write_json(out_dir / POINT_FILE, result)
    return result
