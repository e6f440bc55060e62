"""Shared fixtures: small real configs and a prepared run root (clean -> tokenizer -> tokenize)."""
from __future__ import annotations

import os
import shutil
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from pretrain.config import merged_train, parse_config

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PRETRAIN_SHARED", ROOT.parent / "shared"))
CORPORA = SHARED / "corpora"
FIXTURES = SHARED / "fixtures"

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")


def pytest_collection_finish(session):
    """The GPU-image simulation takes minutes of one core: started now, beside the rest of the suite."""
    from tests.infra import background_gpu_sim

    if any(item.nodeid.startswith(background_gpu_sim.TESTS) and item.get_closest_marker("slow")
           for item in session.items):
        background_gpu_sim.start()


def pytest_sessionfinish(session, exitstatus):
    from tests.infra import background_gpu_sim

    background_gpu_sim.stop()


def need_shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent: the shared corpora/fixtures sit beside the checkout only on the project's machines")
    return path


def set_train(data: dict, **settings) -> dict:
    """Train settings given by field name (`lr`, `hosts`) written where the nested train section keeps them."""
    data["train"] = merged_train(data["train"], settings)
    return data


def tiny_dict(run_root: Path, **overrides) -> dict:
    data = yaml.safe_load((ROOT / "configs" / "tiny.yaml").read_text())
    data["run_root"] = str(run_root)
    data["clean"]["sources"] = [
        {"path": str(ROOT / "demo/corpus/paragraphs.jsonl"), "name": "demo-paragraphs", "id_field": "id"},
        {"path": "{stdlib}/json/*.py", "name": "stdlib-json", "channel_hint": "code"},
    ]
    set_train(data, steps=6, save_every=3)
    for section, values in overrides.items():
        if section == "train":
            set_train(data, **values)
        elif isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    return data


@pytest.fixture
def tiny_cfg(tmp_path):
    return parse_config(tiny_dict(tmp_path / "run"))


@pytest.fixture(scope="session")
def prepared_run(tmp_path_factory):
    """A run root holding complete clean, tokenizer and tokens outputs from the demo corpus."""
    from tasks.clean.stage import run_clean
    from tasks.tokenize import run_tokenize
    from tasks.tokenizer.train import run_tokenizer

    root = tmp_path_factory.mktemp("prepared")
    cfg = parse_config(tiny_dict(root))
    run_clean(cfg.clean, root / "clean")
    run_tokenizer(cfg.tokenizer, root / "clean", root / "tokenizer")
    run_tokenize(cfg.tokenize, root / "clean", root / "tokenizer", root / "tokens")
    return cfg, root


@contextmanager
def running_server(home: Path) -> Iterator[str]:
    """A Prefect server with its database in `home` (as PREFECT_HOME while it starts), until the block ends."""
    from cli.local_server import start_server, stop_server

    with pytest.MonkeyPatch.context() as env:
        env.setenv("PREFECT_HOME", str(home))
        proc, url, log = start_server()
    try:
        yield url
    finally:
        stop_server(proc)
        log.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def migrated_prefect_db(tmp_path_factory) -> Path:
    """A Prefect database that a real server created and migrated once. A server on an empty PREFECT_HOME spends
    13 s of its 18 s start here on migrations, 5 s in all on a migrated database: prefect_home() copies this one in."""
    home = tmp_path_factory.mktemp("prefect-template")
    with running_server(home):
        pass
    conn = sqlite3.connect(home / "prefect.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the write-ahead log into the file, so the file alone is whole
    conn.close()
    return home / "prefect.db"


def prefect_home(path: Path, database: Path) -> Path:
    """A new PREFECT_HOME at path, holding a copy of a migrated database (the server still starts for real on it)."""
    path.mkdir(parents=True, exist_ok=True)
    shutil.copy2(database, path / "prefect.db")
    return path


@pytest.fixture(scope="session")
def shared_prefect(tmp_path_factory, migrated_prefect_db):
    """One Prefect server for the tests that only need a server to run on, as a team's long-running one (a CLI
    given PREFECT_API_URL uses it): a temporary server of each run's own costs 10-30 s here to start. That path
    runs in tests/cli/test_main.py's clean-stage, Ctrl-C and killed-CLI tests and in test_secrets.py."""
    home = prefect_home(tmp_path_factory.mktemp("shared-prefect-home"), migrated_prefect_db)
    with running_server(home) as url:
        yield url
