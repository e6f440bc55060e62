"""What to do after a training attempt ends: the decisions of the monitored training, as plain functions.

  anomaly (exit 42)   roll back to the newest complete checkpoint at least
                      `rollback_gap_steps` before the onset, and skip the data from
                      that checkpoint's position to past the anomaly plus a margin;
                      the same region again widens the skip, then lowers the
                      learning rate; past `max_rollbacks` a person decides.
  crash (other codes) resume from the newest complete checkpoint, no skip, within
                      `max_crash_retries`; a hang (46) is a crash whose decision
                      records the hung rank, where it hung and its stack.
  bad settings (44)   stop at once; so does a run that trained to the end but had no room
  no room (45)        to save it (a retry would fill the same disk).
Every decision is appended to <train_dir>/recovery.jsonl.
"""
from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from model import checkpoint as ckpt
from model.protocol import EXIT_ANOMALY, EXIT_CONFIG, EXIT_HUNG, EXIT_UNSAVED, EXIT_UNUSABLE, append_jsonl, read_jsonl
from tasks.common.failures import transient_text

RECOVERY_LOG = "recovery.jsonl"


@dataclass
class Decision:
    action: str                       # rollback | resume | fail
    reason: str
    attempt: int
    checkpoint: str | None = None     # the tag training goes on from (None: from scratch)
    skip: tuple[int, int] | None = None
    lr_scale: float = 1.0
    escalation: int = 0               # 0 first time in a region, 1 widened skip, 2 lowered lr
    anomaly: dict | None = None
    abandoned: list[str] = field(default_factory=list)
    hang: dict | None = None          # the hang event (hung ranks, where, stacks) when the attempt hung

    def record(self) -> dict:
        out = asdict(self)
        if out["anomaly"]:
            out["anomaly"] = {k: v for k, v in out["anomaly"].items() if k != "history"}
        return out


def last_event(train_dir: Path, kind: str) -> dict | None:
    events = [e for e in read_jsonl(Path(train_dir) / "events.jsonl") if e.get("event") == kind]
    return events[-1] if events else None


def last_anomaly(train_dir: Path) -> dict | None:
    return last_event(train_dir, "anomaly")


def rollback_target(ckpt_dir: Path, onset_step: int, gap: int) -> str | None:
    """The newest complete checkpoint at least `gap` steps before the onset (None: start over)."""
    candidates = [t for t in ckpt.complete_tags(ckpt_dir) if ckpt.read_meta(ckpt_dir, t)["step"] <= onset_step - gap]
    return candidates[-1] if candidates else None


def previous_rollbacks(history: list[dict]) -> list[dict]:
    return [d for d in history if d["action"] == "rollback"]


def same_region(skip: tuple[int, int], earlier: list[dict]) -> int:
    """How many earlier rollbacks skipped a range touching this one."""
    a, b = skip
    return sum(1 for d in earlier if d["skip"] and d["skip"][0] <= b and a <= d["skip"][1])


def plan_rollback(policy, ckpt_dir: Path, anomaly: dict, history: list[dict], attempt: int, lr_scale: float) -> Decision:
    earlier = previous_rollbacks(history)
    if len(earlier) >= policy.max_rollbacks:
        return Decision("fail", f"{len(earlier)} rollbacks already (train.recovery.max_rollbacks); a person should look "
                        f"at the anomaly report", attempt, anomaly=anomaly)
    tag = rollback_target(ckpt_dir, anomaly["onset_step"], policy.rollback_gap_steps)
    start = ckpt.read_meta(ckpt_dir, tag)["data_position"]["consumed_samples"] if tag else 0
    last = anomaly["history"][-1] if anomaly.get("history") else None
    per_step = last["position_end"] - last["position_start"] if last else 1
    margin = policy.skip_margin_steps * per_step
    skip = (start, anomaly["position_end"] + margin)
    repeats = same_region(skip, earlier)
    if repeats >= 1:  # the same region again: widen the skip, then also lower the learning rate
        skip = (start, anomaly["position_end"] + margin * policy.widen_factor ** repeats)
    new_lr = lr_scale * policy.lr_factor if repeats >= 2 else lr_scale
    return Decision("rollback", f"{anomaly['kind']} at step {anomaly['step']}: {anomaly.get('detail', '')}", attempt,
                    tag, skip, new_lr, min(repeats, 2), anomaly)


def plan_crash(policy, ckpt_dir: Path, exit_code: int, history: list[dict], attempt: int, lr_scale: float,
               message: str, progressed: bool = True) -> Decision:
    if exit_code == EXIT_CONFIG:
        return Decision("fail", f"bad settings or data, a retry will not help: {message}", attempt)
    if exit_code == EXIT_UNSAVED:
        return Decision("fail", f"no room to save, a retry would train again into the same full disk: {message}",
                        attempt)
    if exit_code == EXIT_UNUSABLE:  # the next launch resumes from an earlier checkpoint: not the same attempt again
        return Decision("resume", f"checkpoint did not load, resuming from the one before it: {message}", attempt,
                        ckpt.latest_complete(ckpt_dir), lr_scale=lr_scale)
    if not progressed and not transient_text(message):
        return Decision("fail", "crashed before finishing a single step (out of memory at step 0, a broken "
                        f"environment or launcher): a retry would do the same: {message}", attempt)
    crashes = [d for d in history if d["action"] == "resume"]
    if len(crashes) >= policy.max_crash_retries:
        return Decision("fail", f"crashed {len(crashes) + 1} times (train.recovery.max_crash_retries): {message}", attempt)
    return Decision("resume", f"exit code {exit_code}: {message}", attempt, ckpt.latest_complete(ckpt_dir),
                    lr_scale=lr_scale)


def abandon_after(ckpt_dir: Path, tag: str | None, attempt: int, keep_abandoned: int = 1) -> list[str]:
    """Checkpoints newer than the rollback target are set aside (renamed, not deleted), so no resume picks them;
    of all set aside so far the newest keep_abandoned stay."""
    keep_step = ckpt.read_meta(ckpt_dir, tag)["step"] if tag else -1
    moved = []
    for t in ckpt.complete_tags(ckpt_dir):
        if ckpt.read_meta(ckpt_dir, t)["step"] > keep_step:
            shutil.move(str(ckpt_dir / t), str(ckpt_dir / f"{t}.abandoned-{attempt}"))
            moved.append(t)
    if tag:
        ckpt.write_atomic(ckpt_dir / ckpt.LATEST, tag)
    else:
        (ckpt_dir / ckpt.LATEST).unlink(missing_ok=True)
    ckpt.prune_abandoned(ckpt_dir, keep_abandoned)
    return moved


def record(train_dir: Path, decision: Decision) -> None:
    append_jsonl(Path(train_dir) / RECOVERY_LOG, decision.record())


def decisions(train_dir: Path) -> list[dict]:
    return read_jsonl(Path(train_dir) / RECOVERY_LOG)


def decide(policy, train_dir: Path, exit_code: int, message: str, attempt: int, lr_scale: float,
           progressed: bool = True) -> Decision:
    """`progressed`: the attempt trained at least one step (a crash before that is deterministic)."""
    history = decisions(train_dir)
    ckpt_dir = Path(train_dir) / "checkpoints"
    anomaly = last_anomaly(train_dir) if exit_code == EXIT_ANOMALY else None
    if anomaly is not None:
        return plan_rollback(policy, ckpt_dir, anomaly, history, attempt, lr_scale)
    # a hang is only watched for after a trained step, even when no metrics line was due yet
    progressed = progressed or exit_code == EXIT_HUNG
    decision = plan_crash(policy, ckpt_dir, exit_code, history, attempt, lr_scale, message, progressed)
    if exit_code == EXIT_HUNG:
        decision.hang = last_event(train_dir, "hang")
    return decision
