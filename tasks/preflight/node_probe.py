"""What one node reports about itself: run on every node (through train.cluster.node_command) by the preflight.

    python -m tasks.preflight.node_probe --run-root DIR
prints one JSON line: host, clock, GPUs, free disk at the run root, /dev/shm, and
whether the run root is the shared storage the other nodes see (a marker file).
"""
from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import time
from pathlib import Path


def probe(run_root: Path, marker: str | None) -> dict:
    from tasks.preflight.tools import gpu_inventory

    shm = shutil.disk_usage("/dev/shm") if Path("/dev/shm").is_dir() else None
    return {
        "host": socket.gethostname(),
        "time": time.time(),
        "gpus": gpu_inventory(),
        "free_gb_run_root": shutil.disk_usage(run_root).free / 1e9 if run_root.is_dir() else None,
        "shm_free_gb": shm.free / 1e9 if shm else None,
        "sees_shared_marker": (run_root / marker).is_file() if marker else None,
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run-root", required=True, type=Path)
    parser.add_argument("--marker", default=None, help="a file the orchestrator wrote under the run root")
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.run_root, args.marker)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
