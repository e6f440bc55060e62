"""The mirror's fate, read from the ranks' events into the stage's result and a warning line."""
from model.protocol import EVENTS_FILE, append_jsonl
from tasks.train.mirror_status import mirror_status, mirror_warning


def test_no_mirror_events_means_nothing_to_say(tmp_path):
    append_jsonl(tmp_path / EVENTS_FILE, {"event": "start", "step": 0})
    assert mirror_status(tmp_path) is None and mirror_warning(None) is None


def test_failed_uploads_are_counted_and_said_with_the_error_and_a_later_success_clears_one(tmp_path):
    events = tmp_path / EVENTS_FILE
    append_jsonl(events, {"event": "checkpoint_mirrored", "tag": "step_00000002", "url": "s3://b/run/step_00000002"})
    append_jsonl(events, {"event": "mirror_failed", "tag": "step_00000004", "url": "s3://key:***@b/run",
                          "error": "EndpointConnectionError('Could not connect')"})
    append_jsonl(events, {"event": "mirror_failed", "tag": "step_00000006", "url": "s3://key:***@b/run",
                          "error": "ModuleNotFoundError: No module named 's3fs'"})
    status = mirror_status(tmp_path)
    assert status["mirrored"] == ["step_00000002"] and status["failed"] == ["step_00000004", "step_00000006"]
    assert not status["ok"] and "s3fs" in status["last_error"]
    warning = mirror_warning(status)
    assert "FAILED for 2 of 3" in warning and "s3fs" in warning and "s3://key:***@b/run" in warning
    append_jsonl(events, {"event": "checkpoint_mirrored", "tag": "step_00000004", "url": "s3://b/run/step_00000004"})
    assert mirror_status(tmp_path)["failed"] == ["step_00000006"]
