"""The whole preflight: node probes, the local checks, the profiled run, and the gate over them; and what it dropped."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

from model.comm_profile import PROFILE_FILE
from pretrain.config import PipelineConfig
from tasks.common.outputs import read_json
from tasks.preflight.checks import gate, reported_only, run_checks
from tasks.preflight.comm import check_comm_share
from tasks.preflight.nodes import run_node_checks
from tasks.common.hosts import without_hosts


def run_preflight(cfg: PipelineConfig, run_root: Path, log_line: Callable[[str], None] = print) -> dict:
    """Every check the config asks for, gated: the report preflight/report.json holds."""
    node_checks, nodes = run_node_checks(cfg, run_root, run_root / "preflight")
    checks = run_checks(cfg.preflight, run_root, nodes=max(1, len(nodes["hosts"]))) + node_checks
    if cfg.preflight.comm_profile_steps:
        checks.append(check_comm_share(cfg, run_root, log_line))
    report = {**gate(reported_only(checks, cfg.preflight.report_only), cfg.preflight.ignore_failures), "nodes": nodes}
    return {**report, "comm_plan": planned(cfg, run_root, report["checks"], nodes["dropped"], log_line)}


def planned(cfg: PipelineConfig, run_root: Path, checks: list[dict], dropped: list[str],
            log_line: Callable[[str], None]) -> dict | None:
    """The communication plan from what was just measured, on the nodes training will use; printed and kept in the
    report. None without a profiled run (preflight.comm_profile_steps: 0) or a trained tokenizer."""
    from tasks.train.comm_plan import make_plan, measured_from, ranks_of, render, zero3_profile

    profile = run_root / "preflight" / "profile" / PROFILE_FILE
    tokenizer = run_root / "tokenizer" / "report.json"
    if not (profile.is_file() and tokenizer.is_file()):
        return None
    train = without_nodes(cfg, set(dropped)).train
    try:
        plan = make_plan(cfg.model, train, read_json(tokenizer)["embedding_rows"], ranks_of(train),
                         measured_from(checks, read_json(profile), zero3_profile(run_root / "preflight")))
    except ValueError as err:  # e.g. a global batch that does not divide over the ranks left
        log_line(f"communication plan: {err}")
        return {"error": str(err)}
    table = render(plan)
    for line in table.splitlines():
        log_line(line)
    return {**json.loads(plan.to_json()), "table": table}


def without_dropped_nodes(cfg: PipelineConfig) -> PipelineConfig:
    """The config with the nodes preflight dropped (preflight.drop_failing_nodes) left out."""
    report = cfg.run_root_path() / "preflight" / "report.json"
    if not report.is_file():
        return cfg
    dropped = set(read_json(report).get("nodes", {}).get("dropped", []))
    if dropped:
        print(f"training without the nodes preflight dropped: {sorted(dropped)}")
    return without_nodes(cfg, dropped)


def without_nodes(cfg: PipelineConfig, dropped: set[str]) -> PipelineConfig:
    return cfg.model_copy(update={"train": without_hosts(cfg.train, dropped)}) if dropped else cfg
