"""Monitored training: launch, and on an anomaly roll back and skip ahead, on a crash resume, until done or out of budget."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from model.protocol import EXIT_STOPPED, SPEC_FILE, read_jsonl
from model.spec import Overrides, Spec
from pretrain.config import ModelConfig, TrainConfig
from tasks.train.recovery import Decision, abandon_after, decide, decisions, record
from tasks.train.run import TrainingFailed, run_train


class RecoveryFailed(TrainingFailed):
    """The recovery policy gave up; the message and recovery.jsonl say why."""


def roll_back(decision: Decision, out_dir: Path) -> list[str]:
    """Set aside the checkpoints after the rollback target; `latest` names the target. How many set-aside
    checkpoints stay is the run's train.recovery.keep_abandoned, read from the spec its launch wrote."""
    keep = Spec.load(out_dir / SPEC_FILE).train.keep_abandoned
    return abandon_after(out_dir / "checkpoints", decision.checkpoint, decision.attempt, keep)


def run_monitored(model: ModelConfig, train: TrainConfig, tokenizer_dir: Path, tokens_dir: Path, out_dir: Path,
                  mlflow_env: dict[str, str], log_line: Callable[[str], None] = print,
                  on_decision: Callable[[Decision], None] = lambda d: None,
                  rollback: Callable[[Decision, Path], list[str]] = roll_back,
                  env_for_attempt: Callable[[int], dict[str, str]] | None = None,
                  relaunch_on: Callable[[TrainConfig], TrainConfig] | None = None) -> dict:
    """Train; after each early end act on the recovery decision (rollback: the `rollback` hook, which the
    Prefect flow runs as a sub-flow), record it, and relaunch, until done or the policy gives up. `relaunch_on`
    gives the settings of each relaunch the nodes it may use (the flow leaves out nodes lost since the last
    launch: the checkpoint then resumes on fewer ranks, model/reshape.py)."""
    skip_ranges, lr_scale, attempt_train = [], 1.0, train
    attempt = 0
    while True:
        attempt += 1
        env = {**mlflow_env, **(env_for_attempt(attempt) if env_for_attempt else {})}
        steps_before = len(read_jsonl(out_dir / "metrics.jsonl"))
        try:
            result = run_train(model, attempt_train, tokenizer_dir, tokens_dir, out_dir, env, log_line,
                               Overrides(tuple(skip_ranges), lr_scale))
            return {**result, "attempts": attempt, "skipped_ranges": skip_ranges, "lr_scale": lr_scale,
                    "recoveries": recovery_timings(out_dir)}
        except TrainingFailed as err:
            if err.exit_code == EXIT_STOPPED or not train.recovery.enabled:
                raise
            progressed = len(read_jsonl(out_dir / "metrics.jsonl")) > steps_before
            decision = decide(train.recovery, out_dir, err.exit_code, str(err), attempt, lr_scale, progressed)
            if decision.action == "fail":
                record(out_dir, decision)
                on_decision(decision)
                raise RecoveryFailed(f"monitored training gave up after {attempt} attempt(s): {decision.reason}. "
                                     f"Decisions: {out_dir / 'recovery.jsonl'}", err.exit_code) from None
            if decision.action == "rollback":
                decision.abandoned = rollback(decision, out_dir)
                skip_ranges = sorted([*skip_ranges, decision.skip])
                lr_scale = decision.lr_scale
            attempt_train = attempt_train.changed(resume_tag=None)  # `latest` names where to go on
            if relaunch_on is not None:
                attempt_train = relaunch_on(attempt_train)
            record(out_dir, decision)
            log_line(f"recovery: {decision.action} from {decision.checkpoint or 'the start'}"
                     + (f", skipping positions {decision.skip[0]}..{decision.skip[1]}" if decision.skip else "")
                     + f" ({decision.reason})")
            on_decision(decision)


def recovery_timings(out_dir: Path) -> list[dict]:
    """Per rollback or resume: seconds from detection (or crash) to the next start and the next trained step."""
    events = read_jsonl(out_dir / "events.jsonl")
    metrics = read_jsonl(out_dir / "metrics.jsonl")
    out = []
    for d in decisions(out_dir):
        if d["action"] == "fail":
            continue
        trigger = next((e for e in reversed(events) if e["event"] == "anomaly" and d["anomaly"]
                        and e["step"] == d["anomaly"]["step"]), None) if d["action"] == "rollback" else None
        t0 = trigger["time"] if trigger else d["time"]
        start = next((e for e in events if e["event"] == "start" and e["time"] > t0), None)
        step = next((m for m in metrics if m["time"] > t0), None)
        resumed_at = start["step"] if start else None
        out.append({"action": d["action"], "checkpoint": d["checkpoint"], "skip": d["skip"],
                    "detect_to_start_s": round(start["time"] - t0, 2) if start else None,
                    "detect_to_first_step_s": round(step["time"] - t0, 2) if step else None,
                    "steps_lost": (d["anomaly"]["step"] - resumed_at) if d["anomaly"] and resumed_at is not None else None})
    return out
