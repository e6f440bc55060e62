"""The whole preflight: node probes, the local checks, the profiled run, and the gate over them; and what it dropped."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from pretrain.config import PipelineConfig
from tasks.common.outputs import read_json
from tasks.preflight.checks import gate, reported_only, run_checks
from tasks.preflight.comm import check_comm_share
from tasks.preflight.nodes import run_node_checks
from tasks.train.launch import cluster_hosts


def run_preflight(cfg: PipelineConfig, run_root: Path, log_line: Callable[[str], None] = print) -> dict:
    """Every check the config asks for, gated: the report preflight/report.json holds."""
    node_checks, nodes = run_node_checks(cfg, run_root, run_root / "preflight")
    checks = run_checks(cfg.preflight, run_root, nodes=max(1, len(nodes["hosts"]))) + node_checks
    if cfg.preflight.comm_profile_steps:
        checks.append(check_comm_share(cfg, run_root, log_line))
    return {**gate(reported_only(checks, cfg.preflight.report_only), cfg.preflight.ignore_failures), "nodes": nodes}


def without_dropped_nodes(cfg: PipelineConfig) -> PipelineConfig:
    """The config with the nodes preflight dropped (preflight.drop_failing_nodes) left out."""
    report = cfg.run_root_path() / "preflight" / "report.json"
    if not report.is_file():
        return cfg
    dropped = set(read_json(report).get("nodes", {}).get("dropped", []))
    if not dropped:
        return cfg
    kept = [h for h in cluster_hosts(cfg.train) if h.name not in dropped]
    print(f"training without the nodes preflight dropped: {sorted(dropped)}; on {[h.name for h in kept]}")
    return cfg.model_copy(update={"train": cfg.train.model_copy(update={"hosts": kept, "hostfile": None})})
