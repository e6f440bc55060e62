"""Two hosts on one machine for tests and benchmarks: network namespaces on a bridge, each with its own address and
sshd, and links that `tc` can slow to a cluster's speed. Needs root, `ip netns`, sshd and pdsh (`.ci/run`
installs them); `missing()` names what is not there."""
from __future__ import annotations

import os
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

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
    """Also clears what a killed run left: a namespace lives on (and keeps its veth) while a process is in it, so
    its processes are killed first and the veth deleted by name."""
    for k in range(len(HOSTS)):
        ns = f"pthost{k}"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
        subprocess.run(["kill", "-9", *pids], capture_output=True) if pids else None
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{ns}-v"], capture_output=True)
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


def shape_links(rate_mbit: float | None) -> None:
    """Every host's link at `rate_mbit` Mbit/s each way (a token bucket on each end of each veth), or unshaped."""
    for k in range(len(HOSTS)):
        for ns_args, dev in (((("-n", f"pthost{k}")), "eth0"), ((), f"pthost{k}-v")):
            subprocess.run(["tc", *ns_args, "qdisc", "del", "dev", dev, "root"], capture_output=True)
            if rate_mbit:
                burst = max(32_000, int(rate_mbit * 1e6 / 8 / 250))  # 4 ms of traffic, at least 32 kB
                sh("tc", *ns_args, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                   "burst", str(burst), "latency", "100ms")


@contextmanager
def hosts_up(folder: Path) -> Iterator[Path]:
    """Both hosts and their sshds, with `ssh` on PATH reaching them and gloo on their interface, until the block
    ends; then everything is taken down and the environment restored."""
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
