"""The nccl-tests and nvbandwidth parsers against every recorded output in ../shared/fixtures."""
import pytest

from tasks.preflight.parsers import (nccl_summary, nvbandwidth_summary, parse_nccl_row, parse_nccl_tests,
                                     parse_nvbandwidth)
from tests.conftest import FIXTURES, need_shared


def fixture(kind: str, name: str) -> str:
    return need_shared(FIXTURES / kind / name).read_text()


def test_current_format_head_only_is_parsed_and_marked_truncated():
    p = parse_nccl_tests(fixture("nccl-tests", "n1_current_2node_gb10_head.txt"))
    assert (p["version"], p["test"]) == ("2.20.0", "all_reduce_perf")
    assert p["config"] == {"nthread": 1, "ngpus": 1, "min_bytes": 8192, "max_bytes": 8589934592}
    assert [(d["rank"], d["host"], d["pci"], d["name"]) for d in p["devices"]] == [
        (0, "spark-d708", "000f:01:00", "NVIDIA GB10"), (1, "spark-dbf4", "000f:01:00", "NVIDIA GB10")]
    assert [r["size"] for r in p["rows"]] == [8192, 16384] and p["rows"][1]["in_place"]["busbw"] == 0.53
    s = nccl_summary(p)
    assert not s["complete"] and s["avg_busbw"] is None and s["peak_busbw"] == 0.53 and s["hosts"] == ["spark-d708", "spark-dbf4"]


def test_three_node_tail_with_footer():
    p = parse_nccl_tests(fixture("nccl-tests", "n2_3node_a100_ib_tail.txt"))
    s = nccl_summary(p)
    assert s["complete"] and s["avg_busbw"] == 84.8558 and s["peak_busbw"] == 96.69 and not s["failed"]
    assert p["out_of_bounds"] == {"count": 0, "ok": True} and p["rows"][0]["out_of_place"]["time_us"] == 2644.1


def test_integer_times_at_large_sizes():
    p = parse_nccl_tests(fixture("nccl-tests", "n3_2x_h100_pcie_nvlink_integer_times.txt"))
    assert [r["out_of_place"]["time_us"] for r in p["rows"]] == [9306.7, 18535.0]
    assert nccl_summary(p)["peak_busbw"] == 115.93


def test_legacy_format_without_group_or_root_column():
    p = parse_nccl_tests(fixture("nccl-tests", "n4_legacy_2020_t4.txt"))
    assert p["devices"][0]["group"] is None and p["devices"][0]["name"] == "Tesla T4"
    row = p["rows"][0]
    # its `error` column is the largest numerical error (0e+00), not a count of wrong elements
    assert row["root"] is None and row["redop"] == "sum" and row["in_place"] == {
        "time_us": 20.07, "algbw": 0.0, "busbw": 0.0, "wrong": None, "error": 0.0, "over_threshold": False}


@pytest.mark.parametrize("name", ["n1_current_2node_gb10_head.txt", "n2_3node_a100_ib_tail.txt",
                                  "n3_2x_h100_pcie_nvlink_integer_times.txt", "n4_legacy_2020_t4.txt"])
def test_mpirun_tag_output_prefixes_change_nothing(name):
    text = fixture("nccl-tests", name)
    tagged = "\n".join(f"[1,{i % 3}]<stdout>:{line}" for i, line in enumerate(text.splitlines()))
    assert parse_nccl_tests(tagged) == parse_nccl_tests(text)


def test_failed_footer_and_wrong_values_fail_the_summary():
    text = fixture("nccl-tests", "n2_3node_a100_ib_tail.txt")
    failed = text.replace("Out of bounds values : 0 OK", "Out of bounds values : 12 FAILED")
    s = nccl_summary(parse_nccl_tests(failed))
    assert s["failed"] and s["complete"]
    below_min = text.replace("Avg bus bandwidth    : 84.8558", "Avg bus bandwidth    : 84.8558 FAILED")
    assert nccl_summary(parse_nccl_tests(below_min))["failed"]


def test_rows_in_every_column_layout_the_tool_prints():
    # exponent times past 7 digits, N/A in #wrong (validation off), per-iteration columns, -T timestamps
    row = parse_nccl_row("  8589934592  2147483648  float  sum  -1  1.2e+05  71.23  71.23  N/A  1.2e+05  71.30  71.30  N/A")
    assert row["out_of_place"] == {"time_us": 1.2e5, "algbw": 71.23, "busbw": 71.23, "wrong": None}
    per_iter = parse_nccl_row("1048576 262144 float sum -1 50.1 20.93 36.63 0 48.0 60.2 59.9 3.10 "
                              "49.2 21.31 37.29 0 47.1 58.8 58.0 2.90 2025-11-30 10:00:01")
    assert per_iter["in_place"]["busbw"] == 37.29 and per_iter["out_of_place"]["busbw"] == 36.63
    assert parse_nccl_row("# nThread 1 nGpus 1") is None and parse_nccl_row("all_reduce_perf: error") is None


def test_nvbandwidth_v02_matrix_and_sum():
    p = parse_nvbandwidth(fixture("nvbandwidth", "v1_v0.2_8x_rtx4090_h2d.txt"))
    assert p["version"] == "v0.2" and p["devices"][0]["name"] == "NVIDIA GeForce RTX 4090"
    test = p["tests"]["host_to_device_memcpy_ce"]
    assert test["columns"] == list(range(8)) and test["rows"][0][2] == 23.90 and test["sum"] == 205.04
    s = nvbandwidth_summary(p)["host_to_device_memcpy_ce"]
    assert (s["min"], s["max"], s["cells"]) == (23.90, 26.38, 8)


def test_nvbandwidth_na_diagonal_and_partial_matrix():
    p = parse_nvbandwidth(fixture("nvbandwidth", "v2_v0.8_6x_a6000_d2d_read_partial.txt"))
    test = p["tests"]["device_to_device_memcpy_read_ce"]
    assert test["rows"][0][0] is None and test["rows"][1][1] is None and sorted(test["rows"]) == [0, 1]
    assert test["sum"] == 715.53  # as printed; the elided rows are not invented
    assert nvbandwidth_summary(p)["device_to_device_memcpy_read_ce"]["min"] == 21.80


def test_nvbandwidth_v08_device_line_with_pci_id_and_notes():
    p = parse_nvbandwidth(fixture("nvbandwidth", "v3_v0.8_1x_a100_h2d_sm.txt"))
    assert p["devices"] == [{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "pci": "00000000:99:00"}]
    assert p["tests"]["host_to_device_memcpy_sm"]["rows"] == {0: [25.13]}
    assert p["tests"]["host_to_device_memcpy_sm"]["sum"] == 25.13


# No recorded -J output is at hand: this document is written the way nccl-tests' src/util.cu
# (JSON_FILE_VERSION 2) writes one, values taken from the n2 fixture's rows and footer.
NCCL_JSON = {
    "version": 2, "start_time": "2025-11-30 10:00:00", "args": ["all_reduce_perf", "-J", "out.json"], "env": [],
    "nccl_version": 22703,
    "config": {"nthreads": 1, "ngpus": 1, "minimum_bytes": 8, "maximum_bytes": 134217728, "step_bytes": 1048576,
               "warmup_iters": 5, "iterations": 20, "aggregated_iterations": 1, "validation": 1, "graph": 0,
               "blocking_collectives": "false", "per_iter_timing": "false", "parallel_init": "false",
               "devices": [{"rank": 0, "group": 0, "pid": 3621216, "hostname": "pod01", "device": 0,
                            "device_hex": "0x10", "device_info": "NVIDIA A100-SXM4-40GB"}]},
    "results": [
        {"size": 132120584, "count": 33030146, "type": "float", "redop": "sum", "root": "    -1",
         "out_of_place": {"time": 2644.1, "alg_bw": 49.97, "bus_bw": 95.77, "nwrong": 0.0},
         "in_place": {"time": 2619.1, "alg_bw": 50.45, "bus_bw": 96.69, "nwrong": 0.0},
         "actual_iterations": 20, "experiment_name": "all_reduce_perf"}],
    "out_of_bounds": {"count": 0, "okay": "true"},
    "average_bus_bandwidth": {"bandwidth": 84.8558, "okay": "unchecked"},
    "errors": [], "end_time": "2025-11-30 10:00:09",
}


def test_nccl_tests_json_output_reads_like_the_text():
    from tasks.preflight.parsers import parse_nccl_tests_json

    from_json = parse_nccl_tests_json(NCCL_JSON)
    text = parse_nccl_tests(fixture("nccl-tests", "n2_3node_a100_ib_tail.txt"))
    assert from_json["rows"][0] == text["rows"][0]
    assert nccl_summary(from_json)["avg_busbw"] == nccl_summary(text)["avg_busbw"] == 84.8558
    assert from_json["devices"][0]["host"] == "pod01" and from_json["complete"] and not nccl_summary(from_json)["failed"]
    failed = {**NCCL_JSON, "out_of_bounds": {"count": 3, "okay": "false"}}
    assert nccl_summary(parse_nccl_tests_json(failed))["failed"]
    assert not parse_nccl_tests_json({k: v for k, v in NCCL_JSON.items() if k != "average_bus_bandwidth"})["complete"]


# Written the way nvbandwidth's json_output.cpp writes `-j` output (cells are strings), with the v1 fixture's values.
NVB_JSON = {"nvbandwidth": {
    "version": "v0.2", "git_version": "6cefdda", "CUDA Runtime Version": 12030, "Driver Version": "545.29.06",
    "testcases": [{"name": "host_to_device_memcpy_ce", "status": "Passed",
                   "bandwidth_description": "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)",
                   "bandwidth_matrix": [["25.5", "24.26", "23.9", "26.3", "26.28", "26.38", "26.09", "26.31"]],
                   "sum": 205.04},
                  {"name": "device_to_device_memcpy_read_ce", "status": "Waived"}]}}


def test_nvbandwidth_json_output_reads_like_the_text():
    from tasks.preflight.parsers import parse_nvbandwidth_json

    from_json = parse_nvbandwidth_json(NVB_JSON)
    text = parse_nvbandwidth(fixture("nvbandwidth", "v1_v0.2_8x_rtx4090_h2d.txt"))
    name = "host_to_device_memcpy_ce"
    assert from_json["tests"][name]["rows"] == text["tests"][name]["rows"]
    assert nvbandwidth_summary(from_json)[name] == nvbandwidth_summary(text)[name]
    assert from_json["tests"]["device_to_device_memcpy_read_ce"]["status"] == "Waived"
    assert nvbandwidth_summary(from_json)["device_to_device_memcpy_read_ce"]["min"] is None


# The outputs below keep the layout of real ones posted in public issues (their numbers changed, rows cut):
# each names where its format comes from.

# NVIDIA/nccl-tests#176: legacy all_reduce, no root column, `error` = 1e-06 (a magnitude) on 128 GPUs
LEGACY_ERROR_MAGNITUDE = """\
#                                                       out-of-place                       in-place
#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
        4096          1024     float     sum    92.10    0.04    0.09  1e-06    91.80    0.04    0.09  2e-06
     1048576        262144     float     sum    310.5    3.38    6.70  1e-06    309.9    3.38    6.72  1e-06
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 3.4000
"""

# NVIDIA/nccl-tests#82: legacy broadcast_perf, a root column and no redop, validation off (N/A)
LEGACY_BROADCAST = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 2147483648 step: 2(factor) warmup iters: 10 iters: 100 validation: 0
#       size         count    type    root     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float       0    44.10    0.00    0.00    N/A    37.90    0.00    0.00    N/A
  2147483648     536870912   float       0   190211   11.29   11.29    N/A   190377   11.28   11.28    N/A
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 5.1200
"""

# crickett-hpe/hpc-ai-envs#30 and ROCm/rccl#2078: rccl-tests on MI300X, its version line without '#', the
# asterisk note and the closing line
RCCL = """\
# nThread 1 nGpus 8 minBytes 8388608 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:83d38d9
# Using devices
#  Rank  0 Group  0 Pid  37300 on   g100n126 device  0 [0000:05:00] AMD Instinct MI300X
#  Rank  1 Group  0 Pid  37300 on   g100n126 device  1 [0000:33:00] AMD Instinct MI300X
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
     8388608       2097152     float     sum      -1    90.40   92.80  162.40      0    94.10   89.10  155.90      0
  1073741824     268435456     float     sum      -1     5620  191.06  334.35      0     5610  191.40  334.95      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 246.9000
#
# Collective test concluded: all_reduce_perf
"""


def test_a_legacy_error_column_is_a_magnitude_not_a_count_of_wrong_values():
    s = nccl_summary(parse_nccl_tests(LEGACY_ERROR_MAGNITUDE))
    assert not s["failed"] and s["wrong"] == 0 and s["max_error"] == 2e-06 and s["avg_busbw"] == 3.4


def test_a_legacy_broadcast_table_without_redop_reads_its_root():
    p = parse_nccl_tests(LEGACY_BROADCAST)
    assert p["config"] == {"nthread": 1, "ngpus": 1, "min_bytes": 8, "max_bytes": 2147483648}
    last = p["rows"][-1]
    assert (last["size"], last["root"], last["redop"], last["in_place"]["busbw"]) == (2147483648, 0, None, 11.28)
    assert not nccl_summary(p)["failed"]


def test_rccl_tests_output_with_its_notes():
    p = parse_nccl_tests(RCCL)
    assert (p["tool"], p["version"]) == ("rccl-tests", "develop:83d38d9") and p["complete"]
    assert [d["name"] for d in p["devices"]] == ["AMD Instinct MI300X"] * 2 and len(p["rows"]) == 2
    s = nccl_summary(p)
    assert s["avg_busbw"] == 246.9 and s["peak_busbw"] == 334.95 and not s["failed"] and s["verdict"] == "tool"
    over = RCCL.replace("334.95      0\n", "334.95   12*\n")  # the tool marks a row over its threshold...
    assert parse_nccl_tests(over)["rows"][1]["in_place"]["over_threshold"]
    assert not nccl_summary(parse_nccl_tests(over))["failed"]  # ...but its footer verdict, still OK, decides
    truncated = over.split("# Errors with")[0]  # no footer: the rows are all there is to judge by
    assert nccl_summary(parse_nccl_tests(truncated))["failed"]


@pytest.mark.parametrize("name", ["n2_3node_a100_ib_tail.txt", "n4_legacy_2020_t4.txt"])
def test_srun_labelled_lines_change_nothing(name):
    text = fixture("nccl-tests", name)
    labelled = "\n".join(f"{i % 2}: {line}" for i, line in enumerate(text.splitlines()))  # srun -l
    assert parse_nccl_tests(labelled) == parse_nccl_tests(text)


def test_the_tools_verdict_decides_over_counts_from_the_rows():
    text = fixture("nccl-tests", "n2_3node_a100_ib_tail.txt")
    p = parse_nccl_tests(text)
    p["rows"][0]["in_place"]["wrong"] = 3.0  # a count in the table the footer's "0 OK" disagrees with
    assert not nccl_summary(p)["failed"]
    p["out_of_bounds"] = None  # without the footer the rows are the evidence
    assert nccl_summary(p)["failed"]
