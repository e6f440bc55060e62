"""The hang watch with real processes: two gloo ranks, one stuck outside any collective."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from model.protocol import EXIT_HUNG
from model.straggler import StragglerWatch, rank_figures
from model.watchdog import HangWatch, heartbeat_path, stack_path
from tasks.train.hang import FrozenJobMonitor, archive_hang, describe, hang_report, read_heartbeats
from tasks.common.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

RANK = """
import os, sys, threading, time
import torch, torch.distributed as dist
from model.watchdog import HangWatch

def read_forever():  # a read from storage that never returns
    threading.Event().wait()

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
watch = HangWatch(sys.argv[1], rank, 2, timeout_s=2.0, slow_phase_timeout_s=60, every_s=0.3, exit_grace_s=1.0)
for step in range(1, 4):
    if rank == 1 and step == 3:
        read_forever()
    dist.all_reduce(torch.ones(1))
    watch.beat(step)
watch.close()
"""


def start_ranks(train_dir: Path, script: str) -> list[subprocess.Popen]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "WORLD_SIZE": "2"}
    return [subprocess.Popen([sys.executable, "-c", script, str(train_dir)], env={**env, "RANK": str(r)},
                             stderr=subprocess.PIPE, text=True) for r in range(2)]


def test_a_hung_rank_is_named_with_its_stack_and_every_rank_exits(tmp_path):
    since = time.time()
    ranks = start_ranks(tmp_path, RANK)
    codes = [p.wait(timeout=60) for p in ranks]
    assert codes == [EXIT_HUNG, EXIT_HUNG]
    assert "made no progress for 2 s after step 2" in ranks[1].stderr.read()
    report = hang_report(tmp_path, since)
    assert report["hung_ranks"] == [1] and report["waiting_ranks"] == [0]
    assert "read_forever" in report["where"][1] and report["after_step"] == 2
    assert "all_reduce" in stack_path(tmp_path, 0).read_text()  # the waiting rank's stack shows where it waits
    beat = read_heartbeats(tmp_path)[1]
    assert beat["hung"] and beat["step"] == 2 and beat["pid"] == ranks[1].pid
    folder = archive_hang(tmp_path, report)
    assert sorted(p.name for p in folder.iterdir()) == ["rank0.txt", "rank1.txt", "report.json"]
    assert hang_report(tmp_path, since) is None  # archived: a relaunch starts clean
    message = describe(report, folder)
    assert "Hung: rank 1 on" in message and "ranks [0] were waiting for it" in message
    event = json.loads((tmp_path / "events.jsonl").read_text().splitlines()[-1])
    assert event["event"] == "hang" and event["hung_ranks"] == [1] and "read_forever" in event["stacks"]["1"]


FIRST_STEP = """
import os, sys, threading
import torch, torch.distributed as dist
from model.watchdog import HangWatch

rank = int(os.environ["RANK"])
dist.init_process_group("gloo", rank=rank, world_size=2)
watch = HangWatch(sys.argv[1], rank, 2, timeout_s=60.0, slow_phase_timeout_s=60, every_s=0.3, exit_grace_s=1.0,
                  first_step_timeout_s=2.0)
if rank == 1:
    threading.Event().wait()  # start-up work that never ends: rank 0 waits in the first collective
dist.all_reduce(torch.ones(1))
watch.beat(1)
watch.close()
"""


def test_a_rank_stuck_before_its_first_step_is_caught_by_the_first_step_timeout(tmp_path):
    ranks = start_ranks(tmp_path, FIRST_STEP)
    codes = [p.wait(timeout=60) for p in ranks]  # without it, the process group's 30-minute timeout
    assert codes == [EXIT_HUNG, EXIT_HUNG]
    assert "made no progress for 2 s before its first step (phase start)" in ranks[1].stderr.read()
    assert "all_reduce" in stack_path(tmp_path, 0).read_text()


GIL_HOG = """
import re, sys, time
from model.watchdog import HangWatch
watch = HangWatch(sys.argv[1], 0, 1, timeout_s=1.5, slow_phase_timeout_s=60, every_s=0.2)
watch.beat(1)
time.sleep(0.6)  # a heartbeat or two first
re.match(r"(a+)+$", "a" * 64 + "b")  # catastrophic backtracking: C code that never lets go of the GIL
"""


def test_a_rank_that_holds_the_gil_is_dumped_by_the_c_timer_and_killed_by_the_stage(tmp_path):
    since = time.time()
    proc = subprocess.Popen([sys.executable, "-c", GIL_HOG, str(tmp_path)],
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    with FrozenJobMonitor(tmp_path, since, grace_s=1.0, silent_s=30, poll_s=0.5) as monitor:
        code = proc.wait(timeout=60)
    assert code == -signal.SIGKILL and monitor.killed == [0]
    assert "in match" in stack_path(tmp_path, 0).read_text()  # written while the GIL was held
    beat = json.loads(heartbeat_path(tmp_path, 0).read_text())
    assert beat["hung"] is False  # its own thread never ran again to say so


def test_default_timeout_follows_the_step_time(tmp_path):
    watch = HangWatch(tmp_path, 0, 1, timeout_s=None, slow_phase_timeout_s=900, every_s=60)
    try:
        assert watch.timeout() == 60.0
        watch.durations.extend([12.0] * 5)
        assert watch.timeout() == 120.0
        watch.slow_phase("save")
        assert watch.armed_for == 900
    finally:
        watch.close()
    assert not stack_path(tmp_path, 0).exists()  # nothing hung: no stacks file left
    assert json.loads(heartbeat_path(tmp_path, 0).read_text())["phase"] == "ended"


def test_a_rank_slow_for_consecutive_reports_is_named_once():
    watch = StragglerWatch(ratio=1.5, consecutive=3)
    assert watch.observe(1, [0.1, 0.1, 0.4, 0.1]) == []
    assert watch.observe(2, [0.1, 0.1, 0.4, 0.1]) == []
    [event] = watch.observe(3, [0.1, 0.1, 0.4, 0.1])
    assert event["rank"] == 2 and event["ratio"] == 4.0
    assert watch.observe(4, [0.1, 0.1, 0.4, 0.1]) == []  # once per streak
    watch.observe(5, [0.1, 0.1, 0.1, 0.1])  # the streak ends
    assert [watch.observe(s, [0.1, 0.1, 0.1, 0.5]) for s in (6, 7, 8)][-1][0]["rank"] == 3
    assert rank_figures([0.1, 0.3, 0.2])["own_s_slowest_rank"] == 1
