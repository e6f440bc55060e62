"""The two-host bed comes up over what a killed run left behind."""
import subprocess
import time

import pytest

from benchmarks._two_hosts import make_hosts, missing, teardown_hosts


@pytest.fixture
def root_with_namespaces():
    reason = missing()
    if reason:
        pytest.skip(reason)
    yield
    teardown_hosts()


def test_hosts_come_up_over_a_killed_runs_namespace_that_a_process_still_holds(root_with_namespaces):
    make_hosts()
    # A run killed mid-test: its namespace's name is gone but a process still holds it, and with it the veth.
    holder = subprocess.Popen(["ip", "netns", "exec", "pthost0", "sleep", "600"])
    try:
        wait_for_a_process_in("pthost0")
        subprocess.run(["ip", "netns", "del", "pthost0"], check=True)
        assert "pthost0-v" in subprocess.run(["ip", "link"], capture_output=True, text=True).stdout
        make_hosts()
        hosts = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert "pthost0" in hosts and "pthost1" in hosts
    finally:
        holder.kill()
        holder.wait()


def wait_for_a_process_in(namespace: str) -> None:
    """`ip netns exec` enters the namespace after Popen returns; deleting its name before that frees the veth."""
    deadline = time.monotonic() + 10
    while not subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout.split():
        assert time.monotonic() < deadline, f"no process entered {namespace} in 10 s"
        time.sleep(0.05)
