import shutil
from collections import namedtuple

import pytest

from model.data import TokenDataset, read_manifest
from model.staging import StagingError, stage_tokens


def test_stage_copies_verifies_and_reuses(prepared_run, tmp_path):
    _, root = prepared_run
    manifest = read_manifest(root / "tokens")
    dest = stage_tokens(root / "tokens", tmp_path / "shm")
    assert dest.name == f"tokens-{manifest['version']}"
    assert sorted(p.name for p in dest.glob("*.arrow")) == sorted(s["file"] for s in manifest["shards"])
    original, staged = TokenDataset(root / "tokens", 16), TokenDataset(dest, 16)
    assert (original[len(original) - 1]["tokens"] == staged[len(staged) - 1]["tokens"]).all()
    stamp = {p.name: p.stat().st_mtime_ns for p in dest.iterdir()}
    assert stage_tokens(root / "tokens", tmp_path / "shm") == dest
    assert {p.name: p.stat().st_mtime_ns for p in dest.iterdir()} == stamp  # reused, not copied again


def test_interrupted_staging_is_completed_and_old_versions_go(prepared_run, tmp_path):
    _, root = prepared_run
    manifest = read_manifest(root / "tokens")
    stale = tmp_path / "shm" / "tokens-0123456789abcdef"
    stale.mkdir(parents=True)
    dest = tmp_path / "shm" / f"tokens-{manifest['version']}"
    dest.mkdir()
    shutil.copyfile(root / "tokens" / manifest["shards"][0]["file"], dest / manifest["shards"][0]["file"])
    assert stage_tokens(root / "tokens", tmp_path / "shm") == dest
    assert not stale.exists() and len(list(dest.glob("*.arrow"))) == len(manifest["shards"])


def test_too_little_space_is_a_clear_error(prepared_run, tmp_path, monkeypatch):
    _, root = prepared_run
    # a full /dev/shm cannot be made here; disk_usage reports one
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(StagingError, match="stage_data_dir"):
        stage_tokens(root / "tokens", tmp_path / "shm")
    assert not any((tmp_path / "shm").glob("tokens-*/*.arrow"))
