"""The preflight checks and the gate: each check is pass / warn / fail / not_available."""
from __future__ import annotations

import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrain.config import PreflightConfig
from tasks.preflight.probe import allreduce_probe
from tasks.preflight.tools import find_tool, gpu_inventory, nccl_avg_busbw, nvbandwidth_sums, run_tool

PASS, WARN, FAIL, NOT_AVAILABLE = "pass", "warn", "fail", "not_available"


@dataclass
class Check:
    name: str
    status: str
    measured: str
    expected: str
    detail: str = ""


def check_disk(run_root: Path, min_free_gb: float) -> Check:
    run_root.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(run_root).free / 1e9
    return Check("free_disk_run_root", PASS if free_gb >= min_free_gb else FAIL,
                 f"{free_gb:.1f} GB", f">= {min_free_gb} GB", str(run_root))


def check_allreduce(cfg: PreflightConfig) -> Check:
    try:
        r = allreduce_probe(cfg.allreduce_ranks, cfg.allreduce_mb)
    except Exception as err:  # a probe that cannot run is a failed check, not a crash
        return Check("allreduce_probe", FAIL, "error", "runs", f"{type(err).__name__}: {err}")
    if not r["correct"]:
        return Check("allreduce_probe", FAIL, "wrong sum", "correct sum", f"backend={r['backend']}")
    ok = r["busbw_gbps"] >= cfg.min_allreduce_gbps
    return Check("allreduce_probe", PASS if ok else FAIL, f"{r['busbw_gbps']:.3f} GB/s busbw",
                 f">= {cfg.min_allreduce_gbps} GB/s",
                 f"backend={r['backend']} ranks={r['world']} size={r['bytes'] / 2**20:.1f} MiB "
                 f"median={r['seconds'] * 1e3:.2f} ms")


def check_gpus() -> Check:
    gpus = gpu_inventory()
    if gpus is None:
        return Check("gpu_inventory", NOT_AVAILABLE, "nvidia-smi not found", "nvidia-smi", "no NVIDIA GPU on this node")
    if not gpus:
        return Check("gpu_inventory", FAIL, "nvidia-smi failed", "GPU list")
    bad_ecc = [g for g in gpus if g["ecc_uncorrected"] not in ("0", "[N/A]", "N/A", "")]
    return Check("gpu_inventory", FAIL if bad_ecc else PASS, f"{len(gpus)} x {gpus[0]['name']}",
                 "no uncorrected ECC errors", f"driver {gpus[0]['driver']}")


def check_nccl_tests(cfg: PreflightConfig) -> Check:
    binary = find_tool("all_reduce_perf", cfg.nccl_tests_dir)
    if binary is None:
        return Check("nccl_tests_all_reduce", NOT_AVAILABLE, "all_reduce_perf not found",
                     "installed")
    code, out = run_tool([binary, "-b", "8M", "-e", "256M", "-f", "2", "-g", "1"])
    busbw = nccl_avg_busbw(out)
    if code != 0 or busbw is None:
        return Check("nccl_tests_all_reduce", FAIL, f"exit {code}", "Avg bus bandwidth line", out[-500:])
    return Check("nccl_tests_all_reduce", PASS, f"{busbw} GB/s avg busbw", "reported", binary)


def check_nvbandwidth(cfg: PreflightConfig) -> Check:
    binary = cfg.nvbandwidth_path or find_tool("nvbandwidth")
    if binary is None:
        return Check("nvbandwidth", NOT_AVAILABLE, "nvbandwidth not found", "installed")
    code, out = run_tool([binary, "-t", "host_to_device_memcpy_ce"])
    sums = nvbandwidth_sums(out)
    if code != 0 or not sums:
        return Check("nvbandwidth", FAIL, f"exit {code}", "SUM lines", out[-500:])
    return Check("nvbandwidth", PASS, ", ".join(f"{k}={v} GB/s" for k, v in sums.items()), "reported", binary)


def run_checks(cfg: PreflightConfig, run_root: Path) -> list[Check]:
    return [check_disk(run_root, cfg.min_free_gb), check_allreduce(cfg), check_gpus(),
            check_nccl_tests(cfg), check_nvbandwidth(cfg)]


def gate(checks: list[Check], ignore_failures: bool) -> dict:
    failed = [c.name for c in checks if c.status == FAIL]
    return {
        "checks": [asdict(c) for c in checks],
        "failed": failed,
        "passed_gate": not failed or ignore_failures,
        "override": bool(failed) and ignore_failures,
    }
