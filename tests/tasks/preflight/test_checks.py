import stat

import pytest

from pretrain.config import PreflightConfig
from tasks.preflight.baselines import grade, load_profiles, profile
from tasks.preflight.checks import (FAIL, NOT_AVAILABLE, PASS, WARN, Check, check_allreduce, check_disk,
                                    check_nccl_test, check_nvbandwidth, check_storage, gate, reported_only,
                                    run_checks)
from tests.conftest import FIXTURES, need_shared


def test_allreduce_probe_really_runs_two_gloo_ranks():
    check = check_allreduce(PreflightConfig(allreduce_ranks=2, allreduce_mb=1), {"pass": 0.0, "warn": 0.0})
    assert check.status == PASS, check
    assert "backend=gloo ranks=2" in check.detail


def test_allreduce_below_the_profile_fails():
    check = check_allreduce(PreflightConfig(allreduce_ranks=2, allreduce_mb=1), {"pass": 1e6, "warn": 1e5})
    assert check.status == FAIL and check.measured.endswith("GB/s busbw") and check.expected.startswith(">= 1e+06")


def test_disk_and_storage_checks(tmp_path):
    assert check_disk(tmp_path, 0.0).status == PASS
    failed = check_disk(tmp_path, 1e9)
    assert failed.status == FAIL and failed.expected == ">= 1000000000.0 GB"
    storage = check_storage(tmp_path, 8, {"pass": 1.0, "warn": 0.5})
    assert storage.status == PASS and "MB/s write" in storage.measured and "create+delete" in storage.detail
    assert not list(tmp_path.glob(".preflight-*"))  # cleans up after itself


def test_tools_absent_here_are_not_available_and_do_not_fail(tmp_path):
    checks = {c.name: c for c in run_checks(PreflightConfig(allreduce_mb=1, min_free_gb=0.0, storage_test_mb=4,
                                                            nccl_tests_dir=str(tmp_path)), tmp_path)}
    assert checks["nccl_tests_all_reduce"].status == NOT_AVAILABLE
    assert checks["nvbandwidth_host_to_device_memcpy_ce"].status in (NOT_AVAILABLE, PASS)
    assert gate(list(checks.values()), ignore_failures=False)["passed_gate"]


def test_gate_blocks_on_failure_unless_overridden():
    checks = [Check("a", PASS, "", ""), Check("b", FAIL, "", ""), Check("c", WARN, "", "")]
    blocked = gate(checks, False)
    assert not blocked["passed_gate"] and blocked["failed"] == ["b"] and blocked["warnings"] == ["c"]
    assert not blocked["override"]
    overridden = gate(checks, True)
    assert overridden["passed_gate"] and overridden["override"]


def test_a_report_only_check_that_fails_warns_and_lets_the_gate_pass(tmp_path):
    slow_disk = check_storage(tmp_path, 4, {"pass": 1e9, "warn": 1e8})  # no disk writes a PB/s: a real fail
    assert slow_disk.status == FAIL
    checks = reported_only([slow_disk, Check("b", FAIL, "", "")], ["shared_storage"])
    assert checks[0].status == WARN and checks[0].detail.endswith("fail reported only (preflight.report_only)")
    assert "MB/s write" in checks[0].measured  # the measurement is kept
    assert gate(checks, False)["failed"] == ["b"]  # a check not named still fails


def test_shipped_profiles_load_and_grade_both_directions(tmp_path):
    profiles = load_profiles()
    assert {"cpu-ci", "h100-sxm-8x-nvlink", "ib-hdr-200g", "pcie-gen4-no-nvlink"} <= set(profiles)
    assert grade(24.0, profiles["ib-hdr-200g"]["allreduce_busbw_per_nic"], "allreduce_busbw_per_nic")[0] == PASS
    assert grade(40.0, profiles["ib-hdr-200g"]["allreduce_busbw_per_nic"], "x", scale=2)[0] == WARN  # 2 NICs: 44 expected
    assert grade(0.8, {"pass": 0.5, "warn": 0.67}, "max_comm_share")[0] == FAIL  # lower is better
    with pytest.raises(ValueError, match="choose one of"):
        profile("dgx-9000")
    bad = tmp_path / "profiles.yaml"
    bad.write_text("mine:\n  h2d_gbps: 20\n")
    with pytest.raises(ValueError, match=r"mine.*h2d_gbps.*\{pass: X, warn: Y\}"):
        load_profiles(str(bad))


def tool_printing(folder, name: str, fixture_path, exit_code: int = 0, text: str | None = None) -> str:
    """A stand-in for a GPU tool that prints a recorded real output (no GPU here)."""
    folder.mkdir(exist_ok=True)
    out = folder / f"{name}.out"
    out.write_text(text if text is not None else fixture_path.read_text())
    script = folder / name
    script.write_text(f"#!/bin/sh\ncat '{out}'\nexit {exit_code}\n")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_nccl_tests_check_grades_a_recorded_run(tmp_path):
    a100 = need_shared(FIXTURES / "nccl-tests" / "n2_3node_a100_ib_tail.txt")
    tool_printing(tmp_path / "bin", "all_reduce_perf", a100)
    cfg = PreflightConfig(nccl_tests_dir=str(tmp_path / "bin"))
    check = check_nccl_test(cfg, "all_reduce_perf", "allreduce_busbw_per_nic",
                            profile("ib-hdr-200g")["allreduce_busbw_per_nic"], scale=4)  # 4x HDR per node
    assert check.status == WARN and check.measured == "84.8558 GB/s avg busbw"  # 84.9 < 88 expected for 4 NICs
    assert "x 4 NICs" in check.detail


def test_nccl_tests_check_fails_on_truncated_or_failed_output(tmp_path):
    head = need_shared(FIXTURES / "nccl-tests" / "n1_current_2node_gb10_head.txt")
    tool_printing(tmp_path / "bin", "all_reduce_perf", head)
    cfg = PreflightConfig(nccl_tests_dir=str(tmp_path / "bin"))
    truncated = check_nccl_test(cfg, "all_reduce_perf", "allreduce_busbw_gbps", None)
    assert truncated.status == FAIL and "no footer" in truncated.measured
    tail = (FIXTURES / "nccl-tests" / "n2_3node_a100_ib_tail.txt").read_text()
    tool_printing(tmp_path / "bin", "all_reduce_perf", None, text=tail.replace("0 OK", "7 FAILED"))
    failed = check_nccl_test(cfg, "all_reduce_perf", "allreduce_busbw_gbps", None)
    assert failed.status == FAIL and "FAILED footer" in failed.measured


def test_nccl_tests_check_names_the_tools_own_failure_line(tmp_path):
    from pathlib import Path

    real = Path(__file__).resolve().parents[2] / "fixtures" / "tool_outputs" / "nccl-tests"
    tool_printing(tmp_path / "bin", "all_reduce_perf", real / "nccl_tests_issue280_failure_unindented_rows.txt")
    check = check_nccl_test(PreflightConfig(nccl_tests_dir=str(tmp_path / "bin")), "all_reduce_perf",
                            "allreduce_busbw_gbps", None)
    assert check.status == FAIL and "Test NCCL failure common.cu:1005" in check.measured
    assert "Test failure common.cu:891" in check.detail


def test_nvbandwidth_check_grades_the_slowest_gpu(tmp_path):
    rtx = need_shared(FIXTURES / "nvbandwidth" / "v1_v0.2_8x_rtx4090_h2d.txt")
    binary = tool_printing(tmp_path / "bin", "nvbandwidth", rtx)
    cfg = PreflightConfig(nvbandwidth_path=binary)
    check = check_nvbandwidth(cfg, "host_to_device_memcpy_ce", "h2d_gbps", {"pass": 24.0, "warn": 20.0})
    assert check.status == WARN and check.measured == "23.9 GB/s slowest" and "SUM 205.04" in check.detail


def test_checks_read_the_tools_json_output_when_asked(tmp_path):
    import json

    from tests.tasks.preflight.test_parsers import NCCL_JSON, NVB_JSON

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # stand-ins that behave like the tools: nccl-tests writes its -J file, nvbandwidth -j prints JSON
    (bin_dir / "report.json").write_text(json.dumps(NCCL_JSON))
    nccl = bin_dir / "all_reduce_perf"
    nccl.write_text(f'#!/bin/sh\nwhile [ $# -gt 0 ]; do [ "$1" = -J ] && cp "{bin_dir}/report.json" "$2"; shift; done\n')
    nccl.chmod(0o755)
    nvb = tool_printing(bin_dir, "nvbandwidth", None, text=json.dumps(NVB_JSON))
    cfg = PreflightConfig(nccl_tests_dir=str(bin_dir), nvbandwidth_path=nvb, tool_json=True)
    check = check_nccl_test(cfg, "all_reduce_perf", "allreduce_busbw_gbps", {"pass": 80.0, "warn": 60.0})
    assert check.status == PASS and check.measured == "84.8558 GB/s avg busbw"
    h2d = check_nvbandwidth(cfg, "host_to_device_memcpy_ce", "h2d_gbps", {"pass": 24.0, "warn": 20.0})
    assert h2d.status == WARN and h2d.measured == "23.9 GB/s slowest"
