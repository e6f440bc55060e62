"""What became of the checkpoint mirror, from the ranks' events: a failed upload does not stop training (the
mirror runs in a background thread of rank 0), so the stage's result, the Prefect artifact and the MLflow run
say it instead of leaving it in events.jsonl alone."""
from __future__ import annotations

from pathlib import Path

from model.protocol import EVENTS_FILE, read_jsonl


def mirror_status(train_dir: Path) -> dict | None:
    """None without a mirror event; else the tags mirrored and failed, and the last failure's URL and error."""
    events = [e for e in read_jsonl(Path(train_dir) / EVENTS_FILE)
              if e.get("event") in ("checkpoint_mirrored", "mirror_failed")]
    if not events:
        return None
    mirrored = sorted({e["tag"] for e in events if e["event"] == "checkpoint_mirrored"})
    failed = sorted({e["tag"] for e in events if e["event"] == "mirror_failed"} - set(mirrored))
    last = next((e for e in reversed(events) if e["event"] == "mirror_failed"), None)
    return {"mirrored": mirrored, "failed": failed, "ok": not failed,
            "last_error": last and last.get("error"), "url": last and last.get("url")}


def mirror_warning(status: dict | None) -> str | None:
    """The line a user must see when a checkpoint is not where the mirror URL says; None when all arrived."""
    if not status or status["ok"]:
        return None
    return (f"checkpoint mirror FAILED for {len(status['failed'])} of {len(status['failed']) + len(status['mirrored'])}"
            f" checkpoint(s) ({', '.join(status['failed'][-3:])}) to {status['url']}: {status['last_error']}. "
            f"They are only on the run root; check train.checkpoint.mirror_url, its server and its protocol's library")
