"""The preflight checks and the gate: each check is pass / warn / fail / not_available, graded by a hardware profile."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrain.config import PreflightConfig
from tasks.preflight.baselines import FAIL, PASS, WARN, grade, profile
from tasks.preflight.parsers import (nccl_summary, nvbandwidth_summary, parse_nccl_tests, parse_nccl_tests_json,
                                     parse_nvbandwidth, parse_nvbandwidth_json)
from tasks.preflight.probe import allreduce_probe
from tasks.preflight.tools import find_tool, gpu_inventory, run_tool

NOT_AVAILABLE = "not_available"


@dataclass
class Check:
    name: str
    status: str
    measured: str
    expected: str
    detail: str = ""
    value: float | None = None  # the measurement as a number, for what reads the report (the communication plan)


def graded(name: str, value: float, unit: str, limits: dict | None, key: str, detail: str = "",
           scale: float = 1.0) -> Check:
    """A measurement graded by the profile; without an expectation for it the check just reports it."""
    if limits is None:
        return Check(name, PASS, f"{value:g} {unit}", "reported (no expectation in this profile)", detail, value)
    status, expected = grade(value, limits, key, scale)
    return Check(name, status, f"{value:g} {unit}", f"{expected} {unit}", detail, value)


def check_disk(path: Path, min_free_gb: float, name: str = "free_disk_run_root") -> Check:
    path.mkdir(parents=True, exist_ok=True)
    free_gb = shutil.disk_usage(path).free / 1e9
    return Check(name, PASS if free_gb >= min_free_gb else FAIL, f"{free_gb:.1f} GB", f">= {min_free_gb} GB", str(path))


def check_storage(run_root: Path, size_mb: float, limits: dict | None) -> Check:
    """Write, fsync, read back and delete a file on the run root (shared storage on a cluster)."""
    probe = run_root / f".preflight-storage-{os.getpid()}"
    block = os.urandom(1 << 20)
    try:
        t0 = time.perf_counter()
        with open(probe, "wb") as f:
            for _ in range(int(size_mb)):
                f.write(block)
            f.flush()
            os.fsync(f.fileno())
        write_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        with open(probe, "rb") as f:
            while f.read(1 << 22):
                pass
        read_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        small = run_root / f".preflight-latency-{os.getpid()}"
        small.write_bytes(b"x")
        small.unlink()
        latency_ms = (time.perf_counter() - t0) * 1e3
    except OSError as err:
        return Check("shared_storage", FAIL, f"error: {err}", "writable run root", str(run_root))
    finally:
        probe.unlink(missing_ok=True)
    write_mbps = int(size_mb) / write_s
    return graded("shared_storage", round(write_mbps, 1), "MB/s write", limits, "storage_write_mbps",
                  f"read {int(size_mb) / max(read_s, 1e-9):.0f} MB/s (page cache likely), create+delete "
                  f"{latency_ms:.2f} ms, {run_root}")


def check_shm(min_free_gb: float = 1.0) -> Check:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return Check("dev_shm", NOT_AVAILABLE, "no /dev/shm", "a tmpfs at /dev/shm")
    usage = shutil.disk_usage(shm)
    status = PASS if usage.free / 1e9 >= min_free_gb else WARN
    return Check("dev_shm", status, f"{usage.free / 1e9:.1f} GB free of {usage.total / 1e9:.1f} GB",
                 f">= {min_free_gb} GB free (NCCL and staged shards use it)")


def check_allreduce(cfg: PreflightConfig, limits: dict | None) -> Check:
    try:
        r = allreduce_probe(cfg.allreduce_ranks, cfg.allreduce_mb)
    except Exception as err:  # a probe that cannot run is a failed check, not a crash
        return Check("allreduce_probe", FAIL, "error", "runs", f"{type(err).__name__}: {err}")
    if not r["correct"]:
        return Check("allreduce_probe", FAIL, "wrong sum", "correct sum", f"backend={r['backend']}")
    return graded("allreduce_probe", round(r["busbw_gbps"], 3), "GB/s busbw", limits, "probe_busbw_gbps",
                  f"backend={r['backend']} ranks={r['world']} size={r['bytes'] / 2**20:.1f} MiB "
                  f"median={r['seconds'] * 1e3:.2f} ms")


def check_gpus() -> Check:
    gpus = gpu_inventory()
    if gpus is None:
        return Check("gpu_inventory", NOT_AVAILABLE, "nvidia-smi not found", "nvidia-smi", "no NVIDIA GPU on this node")
    if not gpus:
        return Check("gpu_inventory", FAIL, "nvidia-smi failed", "GPU list")
    bad_ecc = [g for g in gpus if g["ecc_uncorrected"] not in ("0", "[N/A]", "N/A", "")]
    names = sorted({g["name"] for g in gpus})
    return Check("gpu_inventory", FAIL if bad_ecc or len(names) > 1 else PASS,
                 f"{len(gpus)} x {' + '.join(names)}, {gpus[0]['memory']}", "one GPU model, no uncorrected ECC errors",
                 f"driver {gpus[0]['driver']}, CUDA {gpus[0].get('cuda', '?')}"
                 + (f"; ECC errors on {[g['index'] for g in bad_ecc]}" if bad_ecc else ""))


def nccl_failure(s: dict) -> str:
    """Why a run failed, in the tool's words where it gave them."""
    if s["errors"]:
        return s["errors"][0]
    return "no footer (killed or truncated)" if s["truncated"] else "wrong values or FAILED footer"


def check_nccl_test(cfg: PreflightConfig, binary_name: str, key: str, limits: dict | None, scale: float = 1.0) -> Check:
    name = f"nccl_tests_{binary_name.removesuffix('_perf')}"
    binary = find_tool(binary_name, cfg.nccl_tests_dir)
    if binary is None:
        return Check(name, NOT_AVAILABLE, f"{binary_name} not found", "installed (infra/build_gpu_tools.sh)")
    gpus = len(gpu_inventory() or []) or 1
    cmd = [*cfg.nccl_tests_launcher, binary, "-b", "8M", "-e", "1G", "-f", "2", "-g", "1" if cfg.nccl_tests_launcher else str(gpus)]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / f"{binary_name}.json"
        code, out = run_tool(cmd + (["-J", str(report)] if cfg.tool_json else []))
        parsed = parse_nccl_tests_json(json.loads(report.read_text())) if report.is_file() else parse_nccl_tests(out)
    s = nccl_summary(parsed)
    if code != 0 or s["failed"]:
        return Check(name, FAIL, f"exit {code}: {nccl_failure(s)}", "a complete run with correct values",
                     "; ".join(s["errors"]) or out[-500:])
    return graded(name, s["avg_busbw"], "GB/s avg busbw", limits, key,
                  f"peak {s['peak_busbw']} GB/s, {s['ranks'] or gpus} ranks on {len(s['hosts'] or [1])} host(s)"
                  + (f"; expectation is per NIC x {scale:g} NICs" if scale != 1 else ""), scale)


def check_nvbandwidth(cfg: PreflightConfig, test: str, key: str, limits: dict | None) -> Check:
    name = f"nvbandwidth_{test}"
    binary = cfg.nvbandwidth_path or find_tool("nvbandwidth")
    if binary is None:
        return Check(name, NOT_AVAILABLE, "nvbandwidth not found", "installed (infra/build_gpu_tools.sh)")
    code, out = run_tool([binary, "-t", test] + (["-j"] if cfg.tool_json else []))
    parsed = parse_nvbandwidth_json(json.loads(out[out.index("{"):])) if cfg.tool_json and "{" in out \
        else parse_nvbandwidth(out)
    summary = nvbandwidth_summary(parsed).get(test)
    if code != 0 or not summary or summary["min"] is None:
        return Check(name, FAIL if code else NOT_AVAILABLE, f"exit {code}", f"a {test} matrix", out[-500:])
    return graded(name, summary["min"], "GB/s slowest", limits, key,
                  f"SUM {summary['sum']} GB/s, fastest {summary['max']} GB/s, {summary['cells']} measurements")


def run_checks(cfg: PreflightConfig, run_root: Path, nodes: int = 1) -> list[Check]:
    """Every check on this node; across nodes (nodes > 1) the all-reduce is graded per NIC."""
    expect = profile(cfg.profile, cfg.baselines_file)
    across = nodes > 1 and "allreduce_busbw_per_nic" in expect
    allreduce_limits = expect["allreduce_busbw_per_nic"] if across else expect.get("allreduce_busbw_gbps")
    return [
        check_disk(run_root, cfg.min_free_gb),
        check_storage(run_root, cfg.storage_test_mb, expect.get("storage_write_mbps")),
        check_shm(),
        check_allreduce(cfg, expect.get("probe_busbw_gbps")),
        check_gpus(),
        check_nccl_test(cfg, "all_reduce_perf", "allreduce_busbw_gbps", allreduce_limits,
                        cfg.nics_per_node if across else 1),
        check_nccl_test(cfg, "all_gather_perf", "all_gather_busbw_gbps", expect.get("all_gather_busbw_gbps")),
        check_nvbandwidth(cfg, "host_to_device_memcpy_ce", "h2d_gbps", expect.get("h2d_gbps")),
        check_nvbandwidth(cfg, "device_to_device_memcpy_read_ce", "d2d_gbps", expect.get("d2d_gbps")),
    ]


def reported_only(checks: list[Check], names: list[str]) -> list[Check]:
    """The checks, those named graded as warnings at worst: measured and shown, never stopping the pipeline."""
    for c in checks:
        if c.name in names and c.status == FAIL:
            c.status, c.detail = WARN, f"{c.detail}; fail reported only (preflight.report_only)".lstrip("; ")
    return checks


def gate(checks: list[Check], ignore_failures: bool) -> dict:
    failed = [c.name for c in checks if c.status == FAIL]
    return {
        "checks": [asdict(c) for c in checks],
        "failed": failed,
        "warnings": [c.name for c in checks if c.status == WARN],
        "passed_gate": not failed or ignore_failures,
        "override": bool(failed) and ignore_failures,
    }
