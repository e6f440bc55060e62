"""Preflight's short profiled training run: how much of a step is communication on these ranks."""
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
from tasks.train.run import TrainingFailed, run_train

ADVICE = "above 2/3 of the step, adding nodes will not pay: grow the batch per rank or the model first"


def check_comm_share(cfg: PipelineConfig, run_root: Path, log_line=lambda _: None) -> Check:
    steps = cfg.preflight.comm_profile_steps
    if not (is_complete(run_root / "tokenizer") and is_complete(run_root / "tokens")):
        return Check("comm_share", NOT_AVAILABLE, "no tokens yet", "run after the tokenize stage")
    out = run_root / "preflight" / "profile"
    shutil.rmtree(out, ignore_errors=True)
    train = cfg.train.model_copy(update={"steps": steps + 1, "save_every": 10**9,
                                         "eval_every": 0, "mirror_url": None, "export_hf": False, "resume_tag": None})
    try:
        run_train(cfg.model, train, run_root / "tokenizer", run_root / "tokens", out, {}, log_line,
                  Overrides(profile_steps=steps))
        result = json.loads((out / PROFILE_FILE).read_text())
    except (TrainingFailed, OSError, ValueError) as err:
        return Check("comm_share", FAIL, "profiled run failed", "a profiled run", str(err)[-500:])
    limits = profile(cfg.preflight.profile, cfg.preflight.baselines_file).get("max_comm_share")
    check = graded("comm_share", round(result["comm_share"], 3), "of step time", limits, "max_comm_share",
                   f"{steps} steps on {result['world_size']} ranks ({result['backend']}), per rank "
                   f"{result['per_rank_share']}")
    if check.status in (WARN, FAIL):
        check.detail += f"; {ADVICE}"
    return check
