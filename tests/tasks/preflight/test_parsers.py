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
    assert row["root"] is None and row["redop"] == "sum" and row["in_place"] == {
        "time_us": 20.07, "algbw": 0.0, "busbw": 0.0, "wrong": 0.0}


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
