"""Per-node launch: a node's launcher killed mid-run (two `deepspeed --no_ssh --node_rank k` launchers on this
machine), and the commands that carry the environment to a node. Training across real hosts over ssh is in
test_two_hosts.py."""
import json
import os
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from pretrain.config import HostConfig
from tasks.common.hosts import on_node, read_hostfile, write_hostfile
from tasks.train.launch import check_deepspeed_exports, node_commands
from tasks.train.run import TrainingFailed, run_train
from tests.conftest import set_train

TWO_NODES = [HostConfig(name="127.0.0.1", slots=1), HostConfig(name="localhost", slots=1)]


def per_node(cfg, **overrides):
    return cfg.train.changed(**{"hosts": TWO_NODES, "launch": "per_node", "master_addr": "127.0.0.1",
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


@pytest.mark.slow
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


def fake_ssh(folder) -> str:
    """A stand-in for `ssh HOST ARGS...` on this machine, with ssh's own semantics: the arguments after the host are
    joined with spaces into one line, which the (here: local) shell parses again."""
    path = folder / "ssh"
    path.write_text('#!/bin/sh\nhost="$1"; shift\necho "$host" >> "$0.hosts"\necho "$*" >> "$0.lines"\nexec sh -c "$*"\n')
    path.chmod(0o755)
    return str(path)


SHOWS_ENV = [sys.executable, "-c", "import json, os; print(json.dumps({k: os.environ.get(k) for k in "
             "('MLFLOW_TRACKING_URI', 'NCCL_SOCKET_IFNAME', 'PYTHONUNBUFFERED')}))"]
AWKWARD = {"MLFLOW_TRACKING_URI": "postgresql://db:5432/mlflow?sslmode=require&connect_timeout=10&application_name=p &ss?",
           "NCCL_SOCKET_IFNAME": "^lo,docker0", "PYTHONUNBUFFERED": "1", "HOME": "/nowhere"}


def test_environment_values_reach_an_ssh_node_intact(tmp_path):
    ssh = fake_ssh(tmp_path)
    cmd = on_node([ssh, "{host}"], "node-7", SHOWS_ENV, AWKWARD)  # ssh: quoted, whatever the value holds
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == {k: AWKWARD[k] for k in ("MLFLOW_TRACKING_URI", "NCCL_SOCKET_IFNAME", "PYTHONUNBUFFERED")}
    assert (tmp_path / "ssh.hosts").read_text() == "node-7\n"
    # the line unquoted, as before: the shell cuts the URI at '&' and the node gets another value
    printenv = ["printenv", "MLFLOW_TRACKING_URI"]
    quoted = subprocess.run(on_node([ssh, "{host}"], "n", printenv, AWKWARD), capture_output=True, text=True)
    raw = subprocess.run(on_node([ssh, "{host}"], "n", printenv, AWKWARD, shell=False), capture_output=True, text=True)
    assert quoted.stdout == AWKWARD["MLFLOW_TRACKING_URI"] + "\n"
    assert raw.stdout != quoted.stdout


def test_a_command_runner_without_a_shell_gets_the_values_as_they_are(tmp_path):
    runner = tmp_path / "run-on"  # like srun -w HOST: runs its arguments as given, no shell in between
    runner.write_text('#!/bin/sh\nshift\nexec "$@"\n')
    runner.chmod(0o755)
    cmd = on_node([str(runner), "{host}"], "node-3", SHOWS_ENV, AWKWARD)
    assert json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)["MLFLOW_TRACKING_URI"] \
        == AWKWARD["MLFLOW_TRACKING_URI"]


def test_values_deepspeeds_ssh_launcher_would_change_are_refused():
    check_deepspeed_exports({"MLFLOW_TRACKING_URI": AWKWARD["MLFLOW_TRACKING_URI"], "HOME": "$HOME"})  # fine
    with pytest.raises(ValueError, match=r"\['NCCL_DEBUG_FILE'\].*per_node"):
        check_deepspeed_exports({"NCCL_DEBUG_FILE": "/tmp/nccl.$HOST.log"})


HOSTILE = "-oProxyCommand=touch${IFS}pwned"


def test_a_host_name_ssh_would_read_as_an_option_is_refused(tmp_path):
    from pretrain.config import ConfigError, parse_config
    from tests.conftest import tiny_dict

    data = tiny_dict(tmp_path)
    set_train(data, hosts=[{"name": "node-01", "slots": 1}, {"name": HOSTILE, "slots": 1}])
    with pytest.raises(ConfigError, match=r"train.cluster.hosts.1.name: .*is not a host name"):
        parse_config(data)
    set_train(data, hosts=[])
    set_train(data, master_addr="node-01;reboot")
    with pytest.raises(ConfigError, match="train.cluster.master_addr='node-01;reboot' is not a host name"):
        parse_config(data)
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"node-01 slots=8\n{HOSTILE} slots=8\n")
    with pytest.raises(ValueError, match=rf"{hostfile}: host='-oProxyCommand.*is not a host name"):
        read_hostfile(hostfile)


def test_the_train_stage_refuses_a_hostile_hostfile_before_any_ssh(prepared_run, tmp_path):
    cfg, root = prepared_run
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(f"{HOSTILE} slots=1\n")
    ssh = fake_ssh(tmp_path)
    train = cfg.train.changed(**{"hostfile": str(hostfile), "launch": "per_node", "node_command": [ssh, "{host}"]})
    with pytest.raises(TrainingFailed, match="is not a host name") as err:
        run_train(cfg.model, train, root / "tokenizer", root / "tokens", tmp_path / "train", {}, log_line=lambda _: None)
    assert err.value.exit_code == 44
    assert not (tmp_path / "ssh.hosts").exists() and not (tmp_path / "pwned").exists()


def test_the_ranks_secrets_travel_in_a_private_file_not_in_the_environment_or_command_line(tmp_path):
    import stat

    from model.protocol import SECRETS_ENV, load_secrets
    from tasks.train.launch import secrets_for_ranks

    env = {"MLFLOW_TRACKING_PASSWORD": "hunter2-planted", "AWS_SECRET_ACCESS_KEY": "aws-planted-key",
           "MLFLOW_TRACKING_URI": "postgresql://mlflow:db-planted-pw@db:5432/mlflow", "MLFLOW_RUN_ID": "r1",
           "NCCL_IB_HCA": "mlx5", "GITHUB_TOKEN": "not-the-ranks-business"}
    with secrets_for_ranks(env, "s3://key:mirror-planted@bucket/run", tmp_path) as (public, clean):
        path = tmp_path / ".secrets.json"
        assert public[SECRETS_ENV] == str(path) and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert {"MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MLFLOW_TRACKING_URI"}.isdisjoint(public)
        assert public["MLFLOW_RUN_ID"] == "r1" and public["NCCL_IB_HCA"] == "mlx5"
        line = " ".join(on_node(["ssh", "{host}"], "node-1", ["deepspeed", "--no_ssh"], public))
        assert "planted" not in line and SECRETS_ENV in line  # only the file's path crosses
        assert clean("mlflow said: auth failed for hunter2-planted at postgresql://mlflow:db-planted-pw@db") \
            == "mlflow said: auth failed for *** at postgresql://mlflow:***@db"
        os.environ.pop("PRETRAIN_MIRROR_URL", None)
        saved = {k: os.environ.get(k) for k in ("MLFLOW_TRACKING_PASSWORD", "AWS_SECRET_ACCESS_KEY",
                                                "MLFLOW_TRACKING_URI", "PRETRAIN_MIRROR_URL", SECRETS_ENV)}
        try:
            os.environ[SECRETS_ENV] = str(path)
            load_secrets()  # what a rank does first
            assert os.environ["MLFLOW_TRACKING_PASSWORD"] == "hunter2-planted"
            assert os.environ["PRETRAIN_MIRROR_URL"] == "s3://key:mirror-planted@bucket/run"
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert not path.exists()  # gone when the launch ends


def test_nothing_started_on_a_node_carries_a_secret_on_its_command_line(tmp_path):
    """The master-port probe and the preflight node probes go through on_node with the orchestrator's whole
    environment: a password there would show in `ps` on both hosts. The fake ssh records every line it gets."""
    from tasks.train.rendezvous import probe_port

    ssh = fake_ssh(tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_PASSWORD": "probe-planted-pw", "NCCL_SOCKET_IFNAME": "lo",
           "MLFLOW_TRACKING_URI": "postgresql://mlflow:uri-planted-pw@db:5432/mlflow"}
    train = SimpleNamespace(cluster=SimpleNamespace(node_command=[ssh, "{host}"], node_command_shell=None))
    assert probe_port("node-7", 0, train, env)  # a free port, found through the "ssh" node command
    lines = (tmp_path / "ssh.lines").read_text()
    assert "NCCL_SOCKET_IFNAME=lo" in lines and "planted" not in lines


def test_a_secrets_file_an_earlier_launch_left_is_removed(tmp_path):
    from tasks.train.launch import secrets_for_ranks

    stale = tmp_path / ".secrets.json"
    stale.write_text('{"MLFLOW_TRACKING_PASSWORD": "left-by-a-killed-orchestrator"}')
    with secrets_for_ranks({"NCCL_IB_HCA": "mlx5"}, None, tmp_path) as (public, _):
        assert not stale.exists() and "PRETRAIN_SECRETS_FILE" not in public
