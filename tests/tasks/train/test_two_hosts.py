"""Two real hosts on one machine: network namespaces with their own addresses, each with its own sshd.

The run root is on the one filesystem both see (as NFS would be). The train stage
runs here, in the root namespace, and reaches the hosts only over ssh, as on a
cluster: DeepSpeed's pdsh launcher, the per-node `--no_ssh` launchers through
`train.node_command: [ssh, {host}]`, and the preflight node probes. Needs root,
`ip netns`, sshd and pdsh (`.ci/run` installs them); skips naming what is missing.
"""
import os
import shutil
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

BRIDGE, SUBNET = "ptbr0", "10.77.0"
HOSTS = [f"{SUBNET}.11", f"{SUBNET}.12"]
DOWN = f"{SUBNET}.13"  # on the bridge's subnet, nobody there


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root (network namespaces)"
    for tool in ("/usr/sbin/sshd", "/usr/bin/pdsh", "/usr/bin/ssh-keygen"):
        if not Path(tool).exists():
            return f"{tool} is not installed (apt-get install openssh-server pdsh)"
    probe = subprocess.run(["ip", "netns", "add", "pt-probe"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"cannot make a network namespace: {probe.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", "pt-probe"], capture_output=True)
    return None


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True)


def make_hosts() -> None:
    teardown_hosts()
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "addr", "add", f"{SUBNET}.1/24", "dev", BRIDGE)
    sh("ip", "link", "set", BRIDGE, "up")
    for k, address in enumerate(HOSTS):
        ns = f"pthost{k}"
        sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", f"{ns}-v", "type", "veth", "peer", "name", "eth0", "netns", ns)
        sh("ip", "link", "set", f"{ns}-v", "master", BRIDGE, "up")
        sh("ip", "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        sh("ip", "-n", ns, "link", "set", "eth0", "up")
        sh("ip", "-n", ns, "link", "set", "lo", "up")


def teardown_hosts() -> None:
    for k in range(len(HOSTS)):
        subprocess.run(["ip", "netns", "del", f"pthost{k}"], capture_output=True)
    subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True)


def start_sshds(folder: Path) -> list[subprocess.Popen]:
    """An sshd per host, keys made here; an `ssh` on PATH that uses them (DeepSpeed and pdsh call plain ssh)."""
    for key in ("client", "host"):
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(folder / key))
    shutil.copy(folder / "client.pub", folder / "authorized_keys")
    (folder / "sshd_config").write_text(
        f"HostKey {folder / 'host'}\nAuthorizedKeysFile {folder / 'authorized_keys'}\nPermitRootLogin prohibit-password\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n")
    (folder / "ssh_config").write_text(
        f"Host *\n  IdentityFile {folder / 'client'}\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n"
        "  LogLevel ERROR\n  BatchMode yes\n  ConnectTimeout 5\n")
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (bin_dir / "ssh").write_text(f'#!/bin/sh\nexec /usr/bin/ssh -F {folder / "ssh_config"} "$@"\n')
    (bin_dir / "ssh").chmod(0o755)
    Path("/run/sshd").mkdir(exist_ok=True)
    daemons = [subprocess.Popen(["ip", "netns", "exec", f"pthost{k}", "/usr/sbin/sshd", "-D", "-e", "-f",
                                 str(folder / "sshd_config"), "-o", f"ListenAddress={address}"],
                                stderr=subprocess.DEVNULL) for k, address in enumerate(HOSTS)]
    deadline = time.time() + 20
    while any(subprocess.run([str(bin_dir / "ssh"), a, "true"], capture_output=True).returncode for a in HOSTS):
        assert time.time() < deadline, "the sshds did not come up"
        time.sleep(0.3)
    return daemons


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory):
    reason = missing()
    if reason:
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("hosts")
    make_hosts()
    daemons = []
    saved = {k: os.environ.get(k) for k in ("PATH", "GLOO_SOCKET_IFNAME")}
    try:
        daemons = start_sshds(folder)
        os.environ["PATH"] = f"{folder / 'bin'}{os.pathsep}{os.environ['PATH']}"
        os.environ["GLOO_SOCKET_IFNAME"] = "eth0"  # the ranks' interface in their namespace
        yield folder
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        for d in daemons:
            d.terminate()
        teardown_hosts()


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
    return cfg.train.model_copy(update={"hosts": hosts, "launch": launch, "master_addr": HOSTS[0],
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
    data["train"].update(hosts=[{"name": a, "slots": 1} for a in [*HOSTS, DOWN]], launch="per_node",
                         node_command=["ssh", "{host}"])
    (tmp_path / "run").mkdir()
    checks, _ = run_node_checks(parse_config(data), tmp_path / "run", tmp_path / "run" / "preflight", timeout_s=30)
    status = {c.name: c.status for c in checks}
    for host in HOSTS:
        assert status[f"node_reachable[{host}]"] == PASS and status[f"shared_storage[{host}]"] == PASS
    assert status[f"node_reachable[{DOWN}]"] == FAIL
