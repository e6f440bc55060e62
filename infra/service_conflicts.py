"""What stands in the way of this checkout's local services (infra/local.sh), named with the fix.

A Prefect or MLflow server left running by another checkout (one since deleted, say) still answers on the port
this one wants: its own server then fails to bind, the health check is answered by the stranger, and the demo's
flow run goes to that server's worker, which runs another checkout's code and fails without saying why. A worker
left polling this API URL does the same to every flow run it picks up. Both are found here, before anything is
deployed:

    python infra/service_conflicts.py port NAME PORT PIDFILE   exit 1 naming the process on PORT, unless PIDFILE's
                                                               process (or one it started) holds it
    python infra/service_conflicts.py workers API_URL PIDFILE...   exit 1 naming each Prefect worker that polls
                                                                   API_URL and is none of the PIDFILEs' processes
"""
from __future__ import annotations

import sys
from pathlib import Path

import psutil


def listener_pids(port: int) -> set[int]:
    """The processes listening on TCP port (any address); 0 for one of another user, whose pid is not shown."""
    return {c.pid or 0 for c in psutil.net_connections(kind="tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port}


def pid_from(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if psutil.pid_exists(pid) else None


def started_by(pid: int, owners: set[int]) -> bool:
    """Whether pid is one of owners or a descendant of one (mlflow's gunicorn workers, a server's uvicorn)."""
    try:
        process = psutil.Process(pid)
        return pid in owners or any(parent.pid in owners for parent in process.parents())
    except psutil.NoSuchProcess:
        return False


def describe(pid: int) -> str:
    if not pid:
        return "a process of another user"
    try:
        process = psutil.Process(pid)
        return f"pid {pid}: {' '.join(process.cmdline())[:200]} (cwd {process.cwd()})"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {pid}"


def port_conflict(name: str, port: int, pidfile: Path) -> str | None:
    """Why name cannot have port, or None: free, or held by the process in pidfile."""
    own = pid_from(pidfile)
    strangers = sorted(pid for pid in listener_pids(port) if not (own and pid and started_by(pid, {own})))
    if not strangers:
        return None
    held_by = "; ".join(describe(pid) for pid in strangers)
    pids = " ".join(str(pid) for pid in strangers if pid) or "it"
    return (f"port {port}, which {name} needs, is held by a process this checkout did not start ({held_by}). "
            f"Stop it (`make stop` in the checkout that started it, or kill {pids}), "
            f"or give this checkout other ports: PREFECT_PORT=4300 MLFLOW_PORT=5100 make demo")


def polls(pid: int, api_url: str) -> bool:
    """Whether pid is a Prefect worker whose PREFECT_API_URL is api_url."""
    try:
        process = psutil.Process(pid)
        cmdline = process.cmdline()
        if not ("worker" in cmdline and "start" in cmdline and any(part.endswith("prefect") for part in cmdline)):
            return False
        return process.environ().get("PREFECT_API_URL", "").rstrip("/") == api_url.rstrip("/")
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def foreign_workers(api_url: str, pidfiles: list[Path]) -> str | None:
    """Why the flow runs of api_url could go to a worker of another checkout, or None."""
    own = {pid for pid in map(pid_from, pidfiles) if pid}
    strangers = sorted(p.pid for p in psutil.process_iter() if polls(p.pid, api_url) and not started_by(p.pid, own))
    if not strangers:
        return None
    who = "; ".join(describe(pid) for pid in strangers)
    return (f"a Prefect worker this checkout did not start polls {api_url} and would take its flow runs, running "
            f"another checkout's code ({who}). Stop it (`make stop` in its checkout, or kill "
            f"{' '.join(map(str, strangers))}), or give this checkout other ports: PREFECT_PORT=4300 make demo")


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "port":
        problem = port_conflict(argv[1], int(argv[2]), Path(argv[3]))
    elif len(argv) >= 2 and argv[0] == "workers":
        problem = foreign_workers(argv[1], [Path(p) for p in argv[2:]])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
