"""Two real hosts on one machine: network namespaces with their own addresses, each with its own sshd.

The run root is on the one filesystem both see (as NFS would be). The train stage
runs here, in the root namespace, and reaches the hosts only over ssh, as on a
cluster: DeepSpeed's pdsh launcher, the per-node `--no_ssh` launchers through
`train.cluster.node_command: [ssh, {host}]`, and the preflight node probes. Needs root,
`ip netns`, sshd and pdsh (`.ci/run` installs them); skips naming what is missing.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from pretrain.config import HostConfig
from tasks.train.run import TrainingFailed, run_train

pytestmark = pytest.mark.slow

from benchmarks._two_hosts import DOWN, HOSTS, hosts_up, missing, sh
from tests.conftest import set_train


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(reason)
    with hosts_up(tmp_path_factory.mktemp("hosts")) as folder:
        yield folder


def namespace_pids(k: int) -> set[int]:
    out = subprocess.run(["ip", "netns", "pids", f"pthost{k}"], capture_output=True, text=True).stdout
    return {int(p) for p in out.split()}


def ranks_in_namespaces(spec: Path) -> list[str]:
    """Processes of this run (their command line names its spec) left in either host's namespace."""
    found = []
    for k in range(len(HOSTS)):
        for pid in namespace_pids(k):
            try:
                cmd = " ".join(psutil.Process(pid).cmdline())
            except psutil.Error:
                continue
            if str(spec) in cmd:
                found.append(f"host {k} pid {pid}: {cmd[:120]}")
    return found


def across(cfg, launch: str, **overrides):
    hosts = [HostConfig(name=a, slots=1) for a in HOSTS]
    node_command = ["ssh", "{host}"] if launch == "per_node" else []
    return cfg.train.changed(**{"hosts": hosts, "launch": launch, "master_addr": HOSTS[0],
                                "node_command": node_command, **overrides})


def hosts_seen_running(spec: Path, stop: threading.Event, seen: set[int]) -> None:
    while not stop.wait(0.5):
        seen.update(int(found.split()[1]) for found in ranks_in_namespaces(spec))


@pytest.mark.parametrize("launch", ["ssh", "per_node"])
def test_two_hosts_train_two_ranks_over_real_ssh(two_hosts, prepared_run, tmp_path, launch):
    cfg, root = prepared_run
    lines: list[str] = []
    out = tmp_path / "train"
    seen: set[int] = set()
    stop = threading.Event()
    watcher = threading.Thread(target=hosts_seen_running, args=(out / "spec.json", stop, seen))
    watcher.start()
    try:
        result = run_train(cfg.model, across(cfg, launch, steps=4, save_every=4), root / "tokenizer",
                           root / "tokens", out, {}, log_line=lines.append)
    finally:
        stop.set()
        watcher.join()
    assert result["exit_code"] == 0 and result["latest_checkpoint"] == "step_00000004"
    assert any("world=2" in line for line in lines)
    assert seen == {0, 1}  # the job's processes ran inside both hosts' namespaces
    assert (out / "master_port").is_file()  # probed on the master host, over ssh
    assert not ranks_in_namespaces(out / "spec.json")


def test_a_host_that_is_down_fails_fast_and_is_named(two_hosts, prepared_run, tmp_path):
    cfg, root = prepared_run
    train = across(cfg, "per_node", steps=4, save_every=4,
                   hosts=[HostConfig(name=HOSTS[0], slots=1), HostConfig(name=DOWN, slots=1)])
    started = time.time()
    with pytest.raises(TrainingFailed, match=r"node 1 failed") as err:
        run_train(cfg.model, train, root / "tokenizer", root / "tokens", tmp_path / "train", {}, log_line=lambda _: None)
    assert time.time() - started < 90
    assert DOWN in str(err.value)
    assert not ranks_in_namespaces(tmp_path / "train" / "spec.json")


@pytest.mark.parametrize("launch", ["ssh", "per_node"])
def test_cancelling_leaves_no_process_in_either_host(two_hosts, prepared_run, tmp_path, launch):
    """SIGTERM to the train stage (a Prefect cancel), as a process of its own: both hosts' ranks go."""
    cfg, root = prepared_run
    out = tmp_path / "train"
    script = (
        "import pickle, sys\nfrom tasks.train.run import run_train\n"
        "model, train, tok, tokens, out = pickle.load(open(sys.argv[1], 'rb'))\n"
        "run_train(model, train, tok, tokens, out, {}, log_line=print)\n")
    import pickle

    args = tmp_path / "args.pkl"
    args.write_bytes(pickle.dumps((cfg.model, across(cfg, launch, steps=10**6, save_every=10**6, stop_grace_s=20),
                                   root / "tokenizer", root / "tokens", out)))
    stage = subprocess.Popen([sys.executable, "-c", script, str(args)], env={**os.environ, "PYTHONPATH": str(
        Path(__file__).resolve().parents[3])}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 180
    while not ((out / "metrics.jsonl").is_file() and (out / "metrics.jsonl").read_text().count("\n") >= 2):
        assert time.time() < deadline and stage.poll() is None, "training never started on the two hosts"
        time.sleep(0.5)
    assert len(ranks_in_namespaces(out / "spec.json")) >= 2
    stage.send_signal(signal.SIGTERM)
    stage.wait(timeout=120)
    deadline = time.time() + 60
    while ranks_in_namespaces(out / "spec.json") and time.time() < deadline:
        time.sleep(1)
    assert ranks_in_namespaces(out / "spec.json") == []


def test_node_probes_run_on_each_host_over_ssh(two_hosts, tmp_path):
    """Each host runs the preflight probe in its own namespace (its address, the shared run root); a host that
    is down is named unreachable."""
    from pretrain.config import parse_config
    from tasks.preflight.checks import FAIL, PASS
    from tasks.preflight.nodes import run_node_checks
    from tests.conftest import tiny_dict

    data = tiny_dict(tmp_path / "run")
    set_train(data, hosts=[{"name": a, "slots": 1} for a in [*HOSTS, DOWN]], launch="per_node",
                         node_command=["ssh", "{host}"])
    (tmp_path / "run").mkdir()
    checks, _ = run_node_checks(parse_config(data), tmp_path / "run", tmp_path / "run" / "preflight", timeout_s=30)
    status = {c.name: c.status for c in checks}
    for host in HOSTS:
        assert status[f"node_reachable[{host}]"] == PASS and status[f"shared_storage[{host}]"] == PASS
    assert status[f"node_reachable[{DOWN}]"] == FAIL


def test_a_node_lost_mid_run_is_left_out_and_training_goes_on_without_a_person(two_hosts, prepared_run, tmp_path):
    """Rank 1 crashes at step 4 and its host goes down with it: the monitored relaunch probes the nodes, leaves
    the lost one out and resumes the step-2 checkpoint of 2 ranks on the 1 left, at the same global batch."""
    from model.protocol import read_jsonl
    from tasks.preflight.nodes import surviving_nodes
    from tasks.train.monitored import run_monitored

    cfg, root = prepared_run
    lines: list[str] = []
    out = tmp_path / "train"
    train = across(cfg, "per_node", steps=6, save_every=2, micro_batch_size=2, grad_accum="auto",
                   global_batch_size=4, lr=1e-3, min_lr=1e-3, warmup_steps=1)

    def node_lost_then_probed(t):
        sh("ip", "-n", "pthost1", "link", "set", "eth0", "down")  # the host is gone by the time of the relaunch
        return surviving_nodes(cfg, t, tmp_path, lines.append, timeout_s=20)

    try:
        result = run_monitored(cfg.model, train, root / "tokenizer", root / "tokens", out,
                               {"PRETRAIN_FAULTS": "crash_at_step_4@1"}, lines.append, relaunch_on=node_lost_then_probed)
    finally:
        sh("ip", "-n", "pthost1", "link", "set", "eth0", "up")
    assert result["latest_step"] == 6 and result["attempts"] == 2
    assert any(f"relaunch without node(s) ['{HOSTS[1]}']" in line for line in lines)
    [reshaped] = [e for e in read_jsonl(out / "events.jsonl") if e["event"] == "reshaped"]
    assert (reshaped["saved"]["world_size"], reshaped["now"]["world_size"], reshaped["step"]) == (2, 1, 2)
    assert reshaped["saved_global_batch"] == reshaped["global_batch"] == 4
    metrics = read_jsonl(out / "metrics.jsonl")
    first, second = metrics[:3], metrics[3:]
    assert [m["step"] for m in first] == [1, 2, 3] and [m["step"] for m in second] == [3, 4, 5, 6]
    assert [m["consumed_samples"] for m in second] == [12, 16, 20, 24]
    assert second[0]["loss"] == pytest.approx(first[2]["loss"], rel=1e-5)  # step 3 again: same weights, same data
