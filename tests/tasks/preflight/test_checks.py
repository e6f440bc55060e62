import pytest

from pretrain.config import PreflightConfig
from tasks.preflight.checks import FAIL, NOT_AVAILABLE, PASS, Check, check_allreduce, check_disk, gate, run_checks
from tasks.preflight.tools import nccl_avg_busbw, nvbandwidth_sums
from tests.conftest import FIXTURES, need_shared


def test_allreduce_probe_really_runs_two_gloo_ranks():
    check = check_allreduce(PreflightConfig(allreduce_ranks=2, allreduce_mb=1, min_allreduce_gbps=0.0))
    assert check.status == PASS, check
    assert "backend=gloo ranks=2" in check.detail


def test_allreduce_below_threshold_fails():
    check = check_allreduce(PreflightConfig(allreduce_ranks=2, allreduce_mb=1, min_allreduce_gbps=1e6))
    assert check.status == FAIL and check.measured.endswith("GB/s busbw")


def test_disk_check(tmp_path):
    assert check_disk(tmp_path, 0.0).status == PASS
    failed = check_disk(tmp_path, 1e9)
    assert failed.status == FAIL and failed.expected == ">= 1000000000.0 GB"


def test_tools_absent_here_are_not_available_and_do_not_fail(tmp_path):
    checks = {c.name: c for c in run_checks(PreflightConfig(allreduce_mb=1, min_free_gb=0.0,
                                                            nccl_tests_dir=str(tmp_path)), tmp_path)}
    assert checks["nccl_tests_all_reduce"].status == NOT_AVAILABLE
    assert gate(list(checks.values()), ignore_failures=False)["passed_gate"]


def test_gate_blocks_on_failure_unless_overridden():
    checks = [Check("a", PASS, "", ""), Check("b", FAIL, "", "")]
    assert gate(checks, False) == {**gate(checks, False), "passed_gate": False, "failed": ["b"], "override": False}
    overridden = gate(checks, True)
    assert overridden["passed_gate"] and overridden["override"]


@pytest.mark.parametrize("name,expected", [("n2_3node_a100_ib_tail.txt", 84.8558)])
def test_nccl_tests_summary_from_real_output(name, expected):
    text = need_shared(FIXTURES / "nccl-tests" / name).read_text()
    assert nccl_avg_busbw(text) == pytest.approx(expected)


def test_nccl_tests_mpirun_prefix():
    assert nccl_avg_busbw("[1,0]<stdout>:# Avg bus bandwidth    : 23.5 \n") == 23.5


def test_nvbandwidth_sum_lines_from_real_output():
    text = need_shared(FIXTURES / "nvbandwidth" / "v1_v0.2_8x_rtx4090_h2d.txt").read_text()
    assert nvbandwidth_sums(text) == {"host_to_device_memcpy_ce": 205.04}
