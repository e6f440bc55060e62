"""Preflight's short profiled training run: how much of a step is communication on these ranks. With
train.cluster.zero_stage auto on more than one rank, a second short run times ZeRO-3 steps for the communication
plan."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

from model.comm_profile import PROFILE_FILE
from model.spec import Overrides
from pretrain.config import PipelineConfig
from tasks.common.outputs import is_complete
from tasks.preflight.baselines import profile
from tasks.preflight.checks import FAIL, NOT_AVAILABLE, WARN, Check, graded
from tasks.train.comm_model import DEEPSPEED_BUCKET
from tasks.train.comm_plan import ZERO3_PROFILE_DIR, step_seconds
from tasks.train.run import TrainingFailed, run_train

ADVICE = "above 2/3 of the step, adding nodes will not pay: grow the batch per rank or the model first"


def check_comm_share(cfg: PipelineConfig, run_root: Path, log_line=lambda _: None) -> Check:
    steps = cfg.preflight.comm_profile_steps
    if not (is_complete(run_root / "tokenizer") and is_complete(run_root / "tokens")):
        return Check("comm_share", NOT_AVAILABLE, "no tokens yet", "run after the tokenize stage")
    shutil.rmtree(run_root / "preflight" / ZERO3_PROFILE_DIR, ignore_errors=True)
    try:
        result = profiled(cfg, run_root, "profile", {}, log_line)
    except (TrainingFailed, OSError, ValueError) as err:
        return Check("comm_share", FAIL, "profiled run failed", "a profiled run", str(err)[-500:])
    timed_zero3 = cfg.train.cluster.zero_stage == "auto" and result["world_size"] > 1
    zero3 = zero3_steps(cfg, run_root, log_line) if timed_zero3 else ""
    limits = profile(cfg.preflight.profile, cfg.preflight.baselines_file).get("max_comm_share")
    check = graded("comm_share", round(result["comm_share"], 3), "of step time", limits, "max_comm_share",
                   f"{steps} steps on {result['world_size']} ranks ({result['backend']}), per rank "
                   f"{result['per_rank_share']}{zero3}")
    if check.status in (WARN, FAIL):
        check.detail += f"; {ADVICE}"
    return check


def profiled(cfg: PipelineConfig, run_root: Path, name: str, train_update: dict, log_line) -> dict:
    """A few profiled training steps into preflight/<name>; their profile."""
    out = run_root / "preflight" / name
    shutil.rmtree(out, ignore_errors=True)
    train = cfg.train.changed(**{"steps": 2 * cfg.preflight.comm_profile_steps + 1, "save_every": 10**9,
                                 "eval_every": 0, "mirror_url": None, "export_hf": False, "resume_tag": None,
                                 **train_update})
    run_train(cfg.model, train, run_root / "tokenizer", run_root / "tokens", out, {}, log_line,
              Overrides(profile_steps=cfg.preflight.comm_profile_steps))
    return json.loads((out / PROFILE_FILE).read_text())


def zero3_steps(cfg: PipelineConfig, run_root: Path, log_line) -> str:
    """ZeRO-3 steps timed for the plan, in DeepSpeed's default buckets (below 5e8 parameters the whole model in
    one: nothing the model credits as prefetched, so what the steps take beyond their traffic is ZeRO-3's own cost).
    A failure leaves ZeRO-3 predicted from its traffic alone and is said in the check's detail."""
    try:
        result = profiled(cfg, run_root, ZERO3_PROFILE_DIR, {"zero_stage": 3, "bucket_size": DEEPSPEED_BUCKET}, log_line)
    except (TrainingFailed, OSError, ValueError) as err:
        return f"; ZeRO-3 steps failed ({str(err)[-200:]}): the plan predicts ZeRO-3 from its traffic alone"
    return f"; ZeRO-3 steps {step_seconds(result):.3g} s each"
