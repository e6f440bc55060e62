"""The checkpoint announcer reads only complete new lines of events.jsonl."""
import json

from flows.events import CheckpointAnnouncer, config_snapshot
from pretrain.config import load_config


def test_only_new_complete_checkpoint_lines_are_announced(tiny_cfg, tmp_path):
    train_dir = tmp_path / "train"
    train_dir.mkdir()
    events = train_dir / "events.jsonl"
    events.write_text(json.dumps({"event": "checkpoint", "step": 3, "tag": "step_00000003", "path": "x"}) + "\n")
    announcer = CheckpointAnnouncer(tiny_cfg, train_dir, "run-id")  # what was there before this attempt is not news
    with open(events, "a") as f:
        f.write(json.dumps({"event": "start", "step": 3}) + "\n")
        f.write(json.dumps({"event": "checkpoint", "step": 6, "tag": "step_00000006", "path": "y"}) + "\n")
        f.write('{"event": "checkpoint", "st')  # rank 0 is still writing this one
    assert [e["tag"] for e in announcer.new_checkpoints()] == ["step_00000006"]
    with open(events, "a") as f:
        f.write('ep": 9, "tag": "step_00000009", "path": "z"}\n')
    assert [e["tag"] for e in announcer.new_checkpoints()] == ["step_00000009"]
    assert announcer.new_checkpoints() == []


def test_config_snapshot_loads_back_as_the_same_config(tiny_cfg):
    assert load_config(str(config_snapshot(tiny_cfg))) == tiny_cfg
