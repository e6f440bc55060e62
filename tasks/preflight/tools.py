"""Find and run the GPU health tools when they are installed; read their summary lines."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output
_AVG_BUSBW = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.]+)")
_NVB_SUM = re.compile(r"^SUM\s+(\S+)\s+([0-9.]+)", re.M)


def find_tool(name: str, directory: str | None = None) -> str | None:
    if directory:
        path = Path(directory) / name
        return str(path) if path.is_file() else None
    return shutil.which(name)


def nccl_avg_busbw(output: str) -> float | None:
    text = "\n".join(_PREFIX.sub("", line) for line in output.splitlines())
    m = _AVG_BUSBW.search(text)
    return float(m.group(1)) if m else None


def nvbandwidth_sums(output: str) -> dict[str, float]:
    return {name: float(v) for name, v in _NVB_SUM.findall(output)}


def run_tool(cmd: list[str], timeout_s: float = 600) -> tuple[int, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    return proc.returncode, proc.stdout + proc.stderr


def gpu_inventory() -> list[dict] | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    code, out = run_tool([smi, "--query-gpu=name,memory.total,driver_version,ecc.errors.uncorrected.volatile.total",
                          "--format=csv,noheader"], timeout_s=60)
    if code != 0:
        return []
    rows = []
    for line in out.strip().splitlines():
        name, mem, driver, ecc = (p.strip() for p in (line.split(",") + ["", "", ""])[:4])
        rows.append({"name": name, "memory": mem, "driver": driver, "ecc_uncorrected": ecc})
    return rows
