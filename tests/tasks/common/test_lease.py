"""The run root lease: a second run of a stage is refused; a dead holder's lease is taken over."""
import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import time

import pytest
import yaml

from tasks.common.lease import LeaseHeld, acquire, lease, lease_path
from tests.conftest import ROOT, tiny_dict


def test_a_second_run_of_a_stage_is_refused_while_the_first_holds_it(tmp_path):
    with lease(tmp_path, "tokenize") as held:
        assert json.loads(lease_path(tmp_path, "tokenize").read_text())["pid"] == os.getpid() == held["pid"]
        with pytest.raises(LeaseHeld, match=rf"its tokenize stage is being run by pid {os.getpid()} on "
                                            rf"{socket.gethostname()} .*Wait for that run to finish"):
            acquire(tmp_path, "tokenize")
        with lease(tmp_path, "train"):  # another stage of the same run root, not one that reads tokens, goes on
            pass
    assert not lease_path(tmp_path, "tokenize").exists()
    with lease(tmp_path, "tokenize"):  # released: the next run gets it
        pass


def test_the_heartbeat_keeps_a_long_stage_alive(tmp_path):
    with lease(tmp_path, "train", heartbeat_s=0.2):
        first = json.loads(lease_path(tmp_path, "train").read_text())["heartbeat"]
        time.sleep(1.0)
        assert json.loads(lease_path(tmp_path, "train").read_text())["heartbeat"] > first


def _hold_and_die(root):
    from tasks.common.lease import acquire

    acquire(root, "clean")
    os._exit(0)  # killed: no release


def test_a_lease_whose_holder_is_gone_is_taken_over(tmp_path):
    proc = mp.get_context("spawn").Process(target=_hold_and_die, args=(tmp_path,))
    proc.start()
    proc.join()
    assert json.loads(lease_path(tmp_path, "clean").read_text())["pid"] == proc.pid
    with lease(tmp_path, "clean") as held:  # same host, pid gone: at once
        assert held["pid"] == os.getpid()
    lease_path(tmp_path, "train").write_text(json.dumps({"stage": "train", "host": "node-that-died", "pid": 1,
                                                         "heartbeat": time.time() - 3600}))
    with lease(tmp_path, "train") as held:  # another host, no heartbeat for an hour
        assert held["host"] == socket.gethostname()
    lease_path(tmp_path, "train").write_text(json.dumps({"stage": "train", "host": "node-alive", "pid": 1,
                                                         "heartbeat": time.time()}))
    with pytest.raises(LeaseHeld, match="node-alive"):
        acquire(tmp_path, "train")


@pytest.mark.slow
def test_the_cli_refuses_a_stage_another_run_is_running_on_the_run_root(tmp_path, shared_prefect):
    data = tiny_dict(tmp_path / "run")
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(data))
    with lease(tmp_path / "run", "clean"):  # the other run
        proc = subprocess.run([sys.executable, "-m", "cli", "clean", "--config", str(config)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PREFECT_API_URL": shared_prefect})
    assert proc.returncode == 1 and "its clean stage is being run by pid" in proc.stderr
    assert not (tmp_path / "run" / "clean").exists() and not (tmp_path / "run" / "clean.shards").exists()
    with lease(tmp_path / "run", "train"):  # a training reads the tokens: `pretrain tokenize` must not replace them
        proc = subprocess.run([sys.executable, "-m", "cli", "tokenize", "--config", str(config)], cwd=ROOT,
                              capture_output=True, text=True, timeout=600,
                              env={**os.environ, "PREFECT_API_URL": shared_prefect})
    assert proc.returncode == 1 and "would rewrite what its train stage is reading" in proc.stderr
    assert not (tmp_path / "run" / "tokens").exists()


def test_a_stage_is_refused_while_a_stage_reading_its_output_runs(tmp_path):
    with lease(tmp_path, "train"):
        with pytest.raises(LeaseHeld, match=r"the tokenize stage would rewrite what its train stage is reading"):
            acquire(tmp_path, "tokenize")
        with pytest.raises(LeaseHeld, match=r"the tokenizer stage would rewrite what its train stage"):
            acquire(tmp_path, "tokenizer")
        with lease(tmp_path, "clean"):  # nothing of the clean stage's output is read by training
            pass
    with lease(tmp_path, "tokenize"):  # training over: tokenize may run
        pass
