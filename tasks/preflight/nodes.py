"""Per-node preflight: probe every node of the launch, check clocks, disks and shared storage, and drop failing nodes.

Each node runs tasks.preflight.node_probe through train.cluster.node_command (ssh,
srun, ... or nothing for this machine). A node that cannot be reached, sees a
different run root, lacks disk or drifts in time fails; with
preflight.drop_failing_nodes the train stage gets a hostfile without it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

from pretrain import PROJECT_ROOT
from pretrain.config import HostConfig, PipelineConfig, TrainConfig
from tasks.common.hosts import cluster_hosts, on_node, without_hosts, write_hostfile
from tasks.preflight.checks import FAIL, PASS, WARN, Check

PREFLIGHT_HOSTFILE = "hostfile"


def probe_node(host: HostConfig, node_command: list[str], run_root: Path, marker: str, timeout_s: float) -> dict:
    project = str(PROJECT_ROOT)
    cmd = [sys.executable, "-m", "tasks.preflight.node_probe", "--run-root", str(run_root), "--marker", marker]
    env = {**os.environ, "PYTHONPATH": project}
    cmd = on_node(node_command, host.name, cmd, env)
    sent = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, cwd=project)
    except (OSError, subprocess.TimeoutExpired) as err:
        return {"host": host.name, "error": f"{type(err).__name__}: {err}"}
    received = time.time()
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"host": host.name, "error": f"probe exit {proc.returncode}: {(proc.stderr or proc.stdout)[-300:]}"}
    report = json.loads(lines[-1])
    # the node's clock against ours at the midpoint of the round trip
    return {**report, "host": host.name, "clock_skew_s": report["time"] - (sent + received) / 2,
            "round_trip_s": received - sent}


def node_checks(report: dict, cfg: PipelineConfig) -> list[Check]:
    name = report["host"]
    if "error" in report:
        return [Check(f"node_reachable[{name}]", FAIL, "unreachable", "the probe runs", report["error"])]
    checks = [Check(f"node_reachable[{name}]", PASS, f"{report['round_trip_s'] * 1e3:.0f} ms round trip", "the probe runs")]
    skew = abs(report["clock_skew_s"])
    checks.append(Check(f"clock_skew[{name}]", PASS if skew < 0.5 else WARN if skew < 5 else FAIL,
                        f"{report['clock_skew_s'] * 1e3:+.0f} ms", "< 500 ms (warn), < 5 s (fail)",
                        "logs and NCCL timeouts are compared across nodes"))
    free = report["free_gb_run_root"]
    checks.append(Check(f"free_disk[{name}]", PASS if free is not None and free >= cfg.preflight.min_free_gb else FAIL,
                        f"{free:.1f} GB" if free is not None else "run root missing", f">= {cfg.preflight.min_free_gb} GB"))
    shm = report.get("shm_free_gb")
    checks.append(Check(f"dev_shm[{name}]", PASS if shm is not None and shm >= 1.0 else WARN,
                        f"{shm:.1f} GB free" if shm is not None else "no /dev/shm", ">= 1 GB free",
                        "NCCL and staged shards use it"))
    checks.append(Check(f"shared_storage[{name}]", PASS if report["sees_shared_marker"] else FAIL,
                        "sees the run root" if report["sees_shared_marker"] else "does not see the marker",
                        "the same run root as the launching node (NFS)"))
    gpus = report.get("gpus")
    if gpus:
        names = sorted({g["name"] for g in gpus})
        slots = next((h.slots for h in cluster_hosts(cfg.train) if h.name == name), None)
        ok = len(names) == 1 and (slots is None or len(gpus) >= slots)
        checks.append(Check(f"gpus[{name}]", PASS if ok else FAIL, f"{len(gpus)} x {' + '.join(names)}",
                            f"{slots or '?'} GPUs of one model", f"driver {gpus[0]['driver']}, CUDA {gpus[0]['cuda']}"))
    return checks


def run_node_checks(cfg: PipelineConfig, run_root: Path, out_dir: Path, timeout_s: float = 120) -> tuple[list[Check], dict]:
    """Checks per node and the hostfile for training (failing nodes dropped when the policy says so)."""
    hosts = cluster_hosts(cfg.train)
    if len(hosts) < 2:
        return [], {"hosts": [h.name for h in hosts], "dropped": []}
    marker = f".preflight-shared-{uuid.uuid4().hex[:8]}"
    (run_root / marker).write_text("")
    try:
        reports = [probe_node(h, cfg.train.cluster.node_command, run_root, marker, timeout_s) for h in hosts]
    finally:
        (run_root / marker).unlink(missing_ok=True)
    per_node = {h.name: node_checks(r, cfg) for h, r in zip(hosts, reports)}
    failing = [name for name, checks in per_node.items() if any(c.status == FAIL for c in checks)]
    dropped = failing if cfg.preflight.drop_failing_nodes and len(failing) < len(hosts) else []
    kept = [h for h in hosts if h.name not in dropped]
    out_dir.mkdir(parents=True, exist_ok=True)
    write_hostfile(kept, out_dir / PREFLIGHT_HOSTFILE)
    (out_dir / "nodes.json").write_text(json.dumps(reports, indent=2))
    checks = [c for name in per_node for c in per_node[name]]
    if dropped:  # the run goes on without them: what failed stays in the report, as warnings
        for c in checks:
            if c.status == FAIL and any(c.name.endswith(f"[{d}]") for d in dropped):
                c.status, c.detail = WARN, f"{c.detail}; node dropped from the hostfile".lstrip("; ")
    return checks, {"hosts": [h.name for h in kept], "dropped": dropped,
                    "hostfile": str(out_dir / PREFLIGHT_HOSTFILE)}


def surviving_nodes(cfg: PipelineConfig, train: TrainConfig, run_root: Path, log_line=print,
                    timeout_s: float = 60) -> TrainConfig:
    """Before a relaunch: `train` without the nodes that now fail their probe (lost since the last launch), so the
    run goes on without a person on the ones left. All failing leaves the settings as they are: then the relaunch
    fails and says why."""
    if len(cluster_hosts(train)) < 2:
        return train
    probe = cfg.model_copy(update={"train": train, "preflight": cfg.preflight.model_copy(
        update={"drop_failing_nodes": True})})
    checks, nodes = run_node_checks(probe, run_root, run_root / "train" / "relaunch", timeout_s)
    if not nodes["dropped"]:
        return train
    why = "; ".join(f"{c.name}: {c.measured}" for c in checks if c.status == WARN and "dropped" in c.detail)
    log_line(f"relaunch without node(s) {nodes['dropped']} ({why}); on {nodes['hosts']}")
    return without_hosts(train, set(nodes["dropped"]))
