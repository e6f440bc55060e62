"""The preflight parsers on real outputs of many layouts (tests/fixtures/tool_outputs/SOURCES.md): the figures
are the tools' own footers; failures, cut outputs and launcher labels are judged by what the lines hold."""
from pathlib import Path

import pytest

from tasks.preflight.parsers import nccl_summary, nvbandwidth_summary, parse_nccl_tests, parse_nvbandwidth

OUTPUTS = Path(__file__).resolve().parents[2] / "fixtures" / "tool_outputs"


def output(kind: str, name: str) -> str:
    return (OUTPUTS / kind / name).read_text()


def summary(name: str) -> dict:
    return nccl_summary(parse_nccl_tests(output("nccl-tests", name)))


# file, the footer's average busbw, rows, the first row's (redop, root), the largest busbw of any row
COMPLETE = [
    ("superbench_8xa100_allreduce.txt", 68.4048, 34, ("sum", None), 235.26),
    ("superbench_8xa100_allgather.txt", 58.2651, 34, (None, None), 230.07),
    ("superbench_8xa100_alltoall.txt", 58.6481, 34, (None, None), 226.16),
    ("superbench_8xa100_broadcast.txt", 64.8653, 34, (None, 0), 234.7),
    ("superbench_8xa100_reduce.txt", 65.018, 34, ("sum", 0), 231.28),
    ("superbench_8xa100_reducescatter.txt", 60.168, 34, ("sum", None), 231.52),
    ("a3mega_2node_16xh100_mpirun.txt", 70.742, 31, ("sum", -1), 338.82),
]


@pytest.mark.parametrize("name,avg,rows,head,peak", COMPLETE)
def test_complete_outputs_give_the_tools_own_figures(name, avg, rows, head, peak):
    parsed = parse_nccl_tests(output("nccl-tests", name))
    s = nccl_summary(parsed)
    assert (s["avg_busbw"], s["rows"], s["peak_busbw"]) == (avg, rows, peak)
    assert (parsed["rows"][0]["redop"], parsed["rows"][0]["root"]) == head
    assert s["complete"] and not s["failed"] and not s["truncated"]
    assert parsed["rows"][-1]["size"] == parsed["config"]["max_bytes"]  # every row read, the NCCL INFO line skipped


def test_validation_off_reads_as_no_error_not_as_zero_wrong():
    row = parse_nccl_tests(output("nccl-tests", "superbench_8xa100_reduce.txt"))["rows"][-1]
    assert row["out_of_place"] == {"time_us": 37613.0, "algbw": 228.38, "busbw": 228.38, "wrong": None,
                                   "error": None, "over_threshold": False}


def test_two_hosts_under_mpirun_are_named():
    s = summary("a3mega_2node_16xh100_mpirun.txt")
    assert s["ranks"] == 16 and s["hosts"] == ["ztan-mig-235z", "ztan-mig-gq73"]


FAILED = [  # file, the first failure line kept, ranks listed
    ("nccl_tests_issue5_2018_nccl1_failure.txt", "NCCL failure all_reduce.cu:95 'unhandled cuda error'", 8),
    ("nccl_tests_issue66_cuda_failure.txt", "Test CUDA failure common.cu:730 'unknown error'", None),
    ("nccl_tests_issue280_failure_unindented_rows.txt", "Test NCCL failure common.cu:1005 'unhandled CUDA error'", 3),
    ("rccl_tests_issue50_colon_config_failure.txt",
     "Test NCCL failure common.cu:1285 'internal error - please report this issue to the NCCL developers'", 4),
]


@pytest.mark.parametrize("name,message,ranks", FAILED)
def test_a_reported_failure_fails_the_run_with_its_message(name, message, ranks):
    s = summary(name)
    assert s["failed"] and s["errors"][0] == message and s["ranks"] == ranks


def test_failure_lines_fail_a_run_whose_rows_look_fine():
    s = summary("nccl_tests_issue280_failure_unindented_rows.txt")
    assert s["rows"] == 3 and s["wrong"] == 0 and s["errors"][1] == "Test failure common.cu:891"


def test_old_config_lines_are_read_wherever_they_are():
    assert parse_nccl_tests(output("nccl-tests", "rccl_tests_issue50_colon_config_failure.txt"))["config"] == {
        "nthread": 1, "ngpus": 4, "min_bytes": 8, "max_bytes": 134217728}
    legacy = parse_nccl_tests(output("nccl-tests", "nccl_tests_issue5_2018_nccl1_failure.txt"))
    assert legacy["config"]["ngpus"] == 8 and legacy["devices"][0]["pid"] is None


@pytest.mark.parametrize("name,rows", [("nccl_issue1039_4xv100_truncated.txt", 4),
                                       ("aws_k8s_tester_pr503_mpirun_tag_output.txt", 3),
                                       ("nccl_issue1812_4xa100_nccl_info_between.txt", 0),
                                       ("nccl_tests_issue107_two_processes_legacy.txt", 0)])
def test_an_output_cut_before_its_footer_is_failed(name, rows):
    s = summary(name)
    assert s["rows"] == rows and s["truncated"] and s["failed"] and not s["errors"]


def test_a_run_whose_rows_reach_the_maximum_passes_without_its_footer():
    text = output("nccl-tests", "a3mega_2node_16xh100_mpirun.txt")
    cut = text[:text.index("# Out of bounds")]
    s = nccl_summary(parse_nccl_tests(cut))
    assert not s["complete"] and not s["truncated"] and not s["failed"] and s["rows"] == 31


def test_a_crash_after_some_rows_is_failed_with_the_crash_line():
    lines = output("nccl-tests", "a3mega_2node_16xh100_mpirun.txt").splitlines()
    crash = output("nccl-tests", "nccl_tests_issue280_failure_unindented_rows.txt").splitlines()[:2]
    s = nccl_summary(parse_nccl_tests("\n".join(lines[:40] + crash)))
    assert s["failed"] and s["rows"] == 17 and s["errors"][0].startswith("Test NCCL failure")


@pytest.mark.parametrize("name", [c[0] for c in COMPLETE] + [f[0] for f in FAILED])
def test_any_launcher_label_or_missing_hash_changes_nothing(name):
    text = output("nccl-tests", name)
    ray = "\n".join(f"(head, rank=0, pid=3808) [1,0]<stdout>:{line}" for line in text.splitlines())
    host = "\n".join(f"node-07.cluster: {line}" for line in text.splitlines())
    bare = "\n".join(line.replace("#", "", 1) if line.lstrip().startswith("#") and "#wrong" not in line else line
                     for line in text.splitlines())
    want = nccl_summary(parse_nccl_tests(text))
    for variant in (ray, host, bare):
        got = nccl_summary(parse_nccl_tests(variant))
        assert {k: got[k] for k in ("avg_busbw", "rows", "peak_busbw", "failed", "errors")} == \
            {k: want[k] for k in ("avg_busbw", "rows", "peak_busbw", "failed", "errors")}


def test_nccl_info_noise_between_rows_is_skipped():
    lines = output("nccl-tests", "superbench_8xa100_allreduce.txt").splitlines()
    noisy = [x for line in lines for x in (line, "node:12:34 [0] NCCL INFO Channel 00/24 :    0   1   2   3   4")]
    assert nccl_summary(parse_nccl_tests("\n".join(noisy)))["rows"] == 34


def test_nvbandwidth_v06_with_waived_tests_and_a_latency_matrix():
    text = output("nvbandwidth", "superbench_v0.6_gh200.txt")
    p = parse_nvbandwidth(text)
    assert p["version"] == "v0.6" and p["devices"] == [{"index": 0, "name": "NVIDIA GH200 480GB", "pci": "00000009:01:00"}]
    s = nvbandwidth_summary(p)
    assert s["host_to_device_memcpy_ce"] == {"sum": 1985.6, "min": 269.33, "max": 412.11, "cells": 6}
    assert s["device_to_host_memcpy_ce"]["sum"] == 607.26
    labelled = "\n".join(f"(head, rank=0, pid=3808) {line}" for line in text.splitlines())
    assert nvbandwidth_summary(parse_nvbandwidth(labelled)) == s
