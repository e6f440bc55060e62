"""The preflight stage: run the cluster health checks and stop the pipeline when one fails (unless overridden)."""
from __future__ import annotations

from pathlib import Path

from prefect import flow, get_run_logger, task

from flows.common import DEFAULT_CONFIG, markdown_artifact, stage_run, table_artifact
from pretrain.config import PipelineConfig, resolve_config
from tasks.common.failures import retry_if_transient
from tasks.common.outputs import write_json
from tasks.preflight.suite import run_preflight


class PreflightFailed(RuntimeError):
    pass


@task(name="health-checks", retries=1, retry_delay_seconds=30, retry_condition_fn=retry_if_transient)
def preflight_task(cfg: PipelineConfig, run_root: str) -> dict:
    return run_preflight(cfg, Path(run_root), get_run_logger().info)


def headline(report: dict) -> str:
    return ("Preflight: " + ("passed" if not report["failed"] else f"FAILED {report['failed']}")
            + (" (override recorded)" if report["override"] else ""))


@flow(name="preflight", log_prints=True, persist_result=True)
def preflight_flow(config: PipelineConfig | str = DEFAULT_CONFIG, mlflow_parent_run_id: str | None = None) -> dict:
    """Run the health checks and stop the pipeline when one fails (unless overridden)."""
    cfg = resolve_config(config, "preflight")
    with stage_run(cfg, "preflight", mlflow_parent_run_id) as run:
        report = preflight_task(cfg, str(run.root))
        out = run.dir("preflight")
        out.mkdir(parents=True, exist_ok=True)
        write_json(out / "report.json", report)
        run.log_files(out, ("report.json",), "preflight")
        table_artifact(run, "preflight", report["checks"], headline(report))
        if report.get("comm_plan") and "table" in report["comm_plan"]:
            markdown_artifact(run, "comm-plan", f"```\n{report['comm_plan']['table']}\n```", "Communication plan")
        if not report["passed_gate"]:
            raise PreflightFailed(f"preflight checks failed: {report['failed']}; see {out / 'report.json'}. "
                                  f"Fix them, or set preflight.ignore_failures: true to train anyway")
    return report
