"""The eval and scaling sections: checkpoint evaluation and the scaling grid."""
from __future__ import annotations

from typing import Literal

from pydantic import Field, PositiveFloat, PositiveInt

from pretrain.config.base import Strict


class LmEvalConfig(Strict):
    """lm-evaluation-harness tasks run on the checkpoint's Hugging Face export, offline, from local data."""
    tasks: list[str] = Field(default_factory=list, description="task names (your YAML tasks under include_path, "
                             "or harness tasks whose data is in the local Hugging Face cache); empty: none")
    include_path: str | None = Field(None, description="a folder of task YAML files (dataset_path: json + data_files)")
    limit: int | None = Field(None, gt=0, description="at most this many examples per task")
    batch_size: int = Field(8, gt=0)


class EvalConfig(Strict):
    """The eval flow: a saved checkpoint -> held-out perplexity per channel (+ lm-eval tasks), logged at its step."""
    device: Literal["cpu", "cuda"] = Field("cpu", description="where the eval flow runs the model")
    batch_size: int = Field(8, gt=0, description="held-out samples per forward pass")
    max_samples_per_channel: int | None = Field(None, gt=0, description="score at most this many of the held-out "
                                                "samples per channel; None: all of them")
    regression_pct: float = Field(2.0, ge=0, description="flag a channel whose perplexity rose more than this "
                                  "(percent) against the previous evaluated checkpoint")
    task_files: list[str] = Field(default_factory=list, description="local JSONL task files (multiple choice: "
                                  "context, choices, answer index; QA: context, answer text), scored per checkpoint "
                                  "as cloze accuracy and bits per byte with their standard errors (model/task_eval.py)")
    noise_sigmas: float = Field(2.0, gt=0, description="a task figure regresses only when it got worse by more than "
                                "this many standard errors (both checkpoints' combined)")
    lm_eval: LmEvalConfig = LmEvalConfig()


class ScalingConfig(Strict):
    """The scaling flow: a grid of small runs (budgets x widths) on this run's data, and the law fitted to them."""
    budgets: list[PositiveFloat] = Field(default_factory=list, description="training FLOPs (6 N D, N non-embedding) of each "
                                 "grid column, e.g. [1e17, 3e17, 1e18]; a model of each width trains for C / 6N tokens")
    dims: list[PositiveInt] = Field(default_factory=lambda: [256, 384, 512, 768, 1024], description="model widths tried at "
                            "each budget; depth, heads and SwiGLU size follow from the width (tasks/scaling/grid.py)")
    min_steps: int = Field(20, gt=0, description="grid points with fewer steps are skipped (too short to mean much)")
    max_steps: int = Field(20000, gt=0, description="... and with more (the budget wants a smaller width)")
    eval_samples_per_channel: int = Field(50, gt=0, description="held-out samples per channel scoring each point")
    huber_delta: float = Field(1e-3, gt=0, description="Huber threshold of the fit on log-loss (Hoffmann et al.)")

