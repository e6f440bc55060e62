"""Prefect events the pipeline emits: `pretrain.checkpoint.saved` for every complete checkpoint.

The ranks never import Prefect; rank 0 appends a `checkpoint` line to events.jsonl
once a checkpoint is complete, and the train flow, which watches the file while
the launcher runs, turns each one into a Prefect event. Automations (the eval
deployment's trigger) react to it.
"""
from __future__ import annotations

import json
import threading
from pathlib import Path

import yaml

from model.protocol import EVENTS_FILE
from model.redact import redact
from pretrain.config import PipelineConfig

CHECKPOINT_SAVED = "pretrain.checkpoint.saved"


def run_resource(cfg: PipelineConfig) -> dict[str, str]:
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in cfg.name)
    return {"prefect.resource.id": f"pretrain.run.{safe}", "prefect.resource.name": cfg.name}


def config_snapshot(cfg: PipelineConfig) -> Path:
    """The resolved config as YAML in the run root: what an event hands to the flows it triggers."""
    path = cfg.run_root_path() / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".yaml.tmp")
    # URL passwords are left out: the flows it triggers take credentials from their workers' environment
    tmp.write_text(yaml.safe_dump(redact(cfg.model_dump(mode="json")), allow_unicode=True, sort_keys=False),
                   encoding="utf-8")
    tmp.replace(path)
    return path


class CheckpointAnnouncer:
    """Polls events.jsonl from where it stood at start; emits one Prefect event per new complete checkpoint."""

    def __init__(self, cfg: PipelineConfig, train_dir: Path, mlflow_run_id: str, poll_s: float = 2.0):
        self.cfg, self.path, self.run_id, self.poll_s = cfg, Path(train_dir) / EVENTS_FILE, mlflow_run_id, poll_s
        self.offset = self.path.stat().st_size if self.path.is_file() else 0
        self.config_path = str(config_snapshot(cfg))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="checkpoint-announcer", daemon=True)

    def __enter__(self) -> "CheckpointAnnouncer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        self.poll()  # the last checkpoint, written just before the launcher ended

    def _loop(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()

    def new_checkpoints(self) -> list[dict]:
        if not self.path.is_file():
            return []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        complete = data[:data.rfind(b"\n") + 1]  # a line still being written waits for the next poll
        self.offset += len(complete)
        events = [json.loads(line) for line in complete.decode("utf-8").splitlines() if line.strip()]
        return [e for e in events if e.get("event") == "checkpoint"]

    def poll(self) -> None:
        from prefect.events import emit_event

        for e in self.new_checkpoints():
            emit_event(event=CHECKPOINT_SAVED, resource=run_resource(self.cfg), payload={
                "tag": e["tag"], "step": e["step"], "path": e["path"], "config": self.config_path,
                "mlflow_run_id": self.run_id, "run_root": str(self.cfg.run_root_path())})
