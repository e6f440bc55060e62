"""Two simulated nodes on this machine: one `deepspeed --no_ssh --node_rank k` launcher each, one CPU rank each."""
import threading
import time

import psutil
import pytest

from pretrain.config import HostConfig
from tasks.launch import node_commands, read_hostfile, write_hostfile
from tasks.train import TrainingFailed, run_train

pytestmark = pytest.mark.slow

TWO_NODES = [HostConfig(name="127.0.0.1", slots=1), HostConfig(name="localhost", slots=1)]


def per_node(cfg, **overrides):
    return cfg.train.model_copy(update={"hosts": TWO_NODES, "launch": "per_node", "master_addr": "127.0.0.1",
                                        **overrides})


def processes_of(spec) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if str(spec) in " ".join(p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            pass
    return found


def test_two_node_launchers_train_together(prepared_run, tmp_path):
    cfg, root = prepared_run
    lines = []
    result = run_train(cfg.model, per_node(cfg, steps=4, save_every=4), root / "tokenizer", root / "tokens",
                       tmp_path / "train", {}, log_line=lines.append)
    assert result["exit_code"] == 0 and result["latest_checkpoint"] == "step_00000004"
    assert any(line.startswith("[node 0]") and "world=2" in line for line in lines)  # one job, two nodes
    assert any(line.startswith("[node 1]") for line in lines)
    assert read_hostfile(tmp_path / "train" / "hostfile") == TWO_NODES
    assert not processes_of(tmp_path / "train" / "spec.json")


def test_a_dead_node_fails_the_launch_fast_and_leaves_nothing(prepared_run, tmp_path):
    cfg, root = prepared_run
    spec = tmp_path / "train" / "spec.json"
    outcome = {}

    def train():
        try:
            run_train(cfg.model, per_node(cfg, steps=10**6, save_every=10**6), root / "tokenizer", root / "tokens",
                      tmp_path / "train", {}, log_line=lambda _: None)
        except TrainingFailed as err:
            outcome["error"] = err

    thread = threading.Thread(target=train)
    thread.start()
    deadline = time.time() + 120
    victim = None
    while victim is None and time.time() < deadline:  # node 1's launcher, once its rank is training
        launchers = [p for p in processes_of(spec) if "--node_rank" in p.cmdline() and "1" ==
                     p.cmdline()[p.cmdline().index("--node_rank") + 1]]
        if launchers and (tmp_path / "train" / "metrics.jsonl").exists():
            victim = launchers[0]
        time.sleep(0.5)
    assert victim is not None, "node 1's launcher never started training"
    killed_at = time.time()
    victim.kill()
    thread.join(timeout=120)
    assert not thread.is_alive()
    message = str(outcome["error"])
    assert "node 1 failed" in message and "the other nodes were stopped" in message
    assert time.time() - killed_at < 60
    time.sleep(1)
    assert not processes_of(spec)


def test_node_commands_wrap_each_launcher_with_the_environment(tmp_path):
    hostfile = write_hostfile(TWO_NODES, tmp_path / "hostfile")
    cmds = node_commands("deepspeed", hostfile, TWO_NODES, "10.0.0.1", 29500, ["--module", "model.train"],
                         ["ssh", "{host}"], {"NCCL_IB_HCA": "mlx5", "MLFLOW_RUN_ID": "r1", "HOME": "/root"})
    assert cmds[1][:3] == ["ssh", "localhost", "env"]
    assert "NCCL_IB_HCA=mlx5" in cmds[1] and "MLFLOW_RUN_ID=r1" in cmds[1] and "HOME=/root" not in cmds[1]
    tail = cmds[1][cmds[1].index("deepspeed"):]
    assert tail == ["deepspeed", "--hostfile", str(hostfile), "--no_ssh", "--node_rank", "1", "--master_addr",
                    "10.0.0.1", "--master_port", "29500", "--module", "model.train"]
