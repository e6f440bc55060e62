"""Find and run the GPU health tools when they are installed; the GPU inventory from nvidia-smi."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path


def find_tool(name: str, directory: str | None = None) -> str | None:
    if directory:
        path = Path(directory) / name
        return str(path) if path.is_file() else None
    return shutil.which(name)


def run_tool(cmd: list[str], timeout_s: float = 600) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    return proc.returncode, proc.stdout + proc.stderr


def gpu_inventory() -> list[dict] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    code, out = run_tool([smi, "--query-gpu=index,name,memory.total,driver_version,ecc.errors.uncorrected.volatile.total",
                          "--format=csv,noheader"], timeout_s=60)
    if code != 0:
        return []
    _, header = run_tool([smi], timeout_s=60)
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    rows = []
    for line in out.strip().splitlines():
        index, name, mem, driver, ecc = (p.strip() for p in (line.split(",") + [""] * 5)[:5])
        rows.append({"index": index, "name": name, "memory": mem, "driver": driver, "ecc_uncorrected": ecc,
                     "cuda": cuda.group(1) if cuda else "?"})
    return rows
