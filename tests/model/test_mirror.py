"""The checkpoint mirror: an unreachable or misnamed target is an event, never a crash; no password in events."""
import socket

from model.mirror import Mirror
from tests.conftest import set_train


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once the socket closes


def test_an_unreachable_mirror_is_a_failed_upload_not_a_crash_and_hides_its_password(tmp_path):
    tag = tmp_path / "ckpt" / "step_00000002"
    tag.mkdir(parents=True)
    (tag / "COMPLETE").write_text("{}")
    events = []
    # ftp connects when its filesystem is made: that used to happen in the constructor, at the program's start
    mirror = Mirror(f"ftp://backup:S3cretPw@127.0.0.1:{closed_port()}/runs", events.append)
    mirror.submit(tmp_path / "ckpt", "step_00000002")
    mirror.wait()
    [event] = events
    assert event["event"] == "mirror_failed" and event["tag"] == "step_00000002"
    assert event["url"].startswith("ftp://backup:***@127.0.0.1:")
    assert "S3cretPw" not in repr(events)


def test_a_mirrored_checkpoint_event_carries_the_url_without_its_password(tmp_path):
    tag = tmp_path / "ckpt" / "step_00000004"
    tag.mkdir(parents=True)
    (tag / "weights.pt").write_bytes(b"w")
    (tag / "COMPLETE").write_text("{}")
    events = []
    mirror = Mirror(f"file://{tmp_path / 'copy'}", events.append)
    mirror.submit(tmp_path / "ckpt", "step_00000004")
    mirror.wait()
    assert events[0]["event"] == "checkpoint_mirrored" and (tmp_path / "copy" / "step_00000004" / "COMPLETE").exists()


def test_a_file_url_lands_where_it_says_and_one_with_credentials_is_refused(tmp_path, monkeypatch):
    import subprocess
    import sys

    import yaml

    from pretrain.config import parse_config
    from tests.conftest import ROOT, tiny_dict

    monkeypatch.chdir(tmp_path)  # fsspec used to read file://host/x as a folder "host/x" in the working directory
    data = tiny_dict(tmp_path / "run")
    set_train(data, mirror_url=f"file://localhost{tmp_path / 'backup'}")
    url = parse_config(data).train.checkpoint.mirror_url
    assert url == f"file://{tmp_path / 'backup'}"
    tag = tmp_path / "ckpt" / "step_00000006"
    tag.mkdir(parents=True)
    (tag / "COMPLETE").write_text("{}")
    mirror = Mirror(url, [].append)
    mirror.submit(tmp_path / "ckpt", "step_00000006")
    mirror.wait()
    assert (tmp_path / "backup" / "step_00000006" / "COMPLETE").is_file() and not (tmp_path / "localhost").exists()

    set_train(data, mirror_url=f"file://user:Hunter2pw@localhost{tmp_path / 'backup'}")
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    proc = subprocess.run([sys.executable, "-m", "cli", "check-config", "--config", str(tmp_path / "c.yaml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0 and "a file:// URL takes a local path and no user, password or host" in proc.stderr
    assert "Hunter2pw" not in proc.stdout + proc.stderr
    set_train(data, mirror_url="backups/run")  # relative: it would land wherever the job starts
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(data))
    proc = subprocess.run([sys.executable, "-m", "cli", "check-config", "--config", str(tmp_path / "c.yaml")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode != 0 and "is a relative path" in proc.stderr
