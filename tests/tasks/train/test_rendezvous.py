"""The master port: probed on the master host, kept for every relaunch, waited for while an attempt lets go."""
import socket
import threading

import pytest

from pretrain.config import TrainConfig, nested_train
from tasks.train.rendezvous import PORT_FILE, PortUnavailable, is_local, master_port
from tests.tasks.train.test_launch import fake_ssh


def train_config(**overrides) -> TrainConfig:
    return TrainConfig(**nested_train(dict(seq_len=16, micro_batch_size=1, steps=1, warmup_steps=0, **overrides)))


def test_a_run_keeps_the_port_its_first_launch_chose(tmp_path):
    t = train_config()
    first = master_port(t, "localhost", tmp_path, {})
    assert (tmp_path / PORT_FILE).read_text().strip() == str(first)
    assert master_port(t, "localhost", tmp_path, {}) == first  # a relaunch: the same rendezvous
    assert master_port(train_config(master_port=29123), "localhost", tmp_path, {}) == 29123  # the config wins


def test_the_port_is_probed_on_the_master_host_not_here(tmp_path):
    ssh = fake_ssh(tmp_path)
    t = train_config(node_command=[ssh, "{host}"])
    assert not is_local("gpu-node-17.cluster.invalid")
    port = master_port(t, "gpu-node-17.cluster.invalid", tmp_path / "train", {})
    assert 1024 < port < 65536
    assert (tmp_path / "ssh.hosts").read_text().split() == ["gpu-node-17.cluster.invalid"]
    master_port(t, "gpu-node-17.cluster.invalid", tmp_path / "train", {})  # relaunch: checks the kept port there
    assert (tmp_path / "ssh.hosts").read_text().split() == ["gpu-node-17.cluster.invalid"] * 2


def test_a_relaunch_waits_for_the_kept_port_and_names_it_when_it_stays_taken(tmp_path):
    t = train_config()
    port = master_port(t, "localhost", tmp_path, {})
    holder = socket.socket()
    holder.bind(("", port))
    holder.listen()  # an earlier attempt's rendezvous, still up
    with pytest.raises(PortUnavailable, match=rf"master port {port} on localhost is still in use .*{PORT_FILE}"):
        master_port(t, "localhost", tmp_path, {}, wait_s=1.0, poll_s=0.2)
    threading.Timer(0.5, holder.close).start()  # it lets go while the relaunch waits
    assert master_port(t, "localhost", tmp_path, {}, wait_s=20.0, poll_s=0.2) == port
