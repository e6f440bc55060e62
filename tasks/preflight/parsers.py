"""Parsers for the text NVIDIA's nccl-tests and nvbandwidth print, in every format seen in the wild.

nccl-tests: current (v2.x: version line, Group and root columns, PCI ids),
legacy (no Group or root column, `error` column as `0e+00`), times printed as
integers or in exponent form at large sizes, `N/A` in #wrong when validation is
off, per-iteration and timestamp columns, and `[1,0]<stdout>:` prefixes under
mpirun --tag-output. A missing footer marks the output truncated.
nvbandwidth: v0.2 and v0.8 preambles, one matrix per test with `N/A` cells,
and the `SUM <test> <value>` line that ends each test.
"""
from __future__ import annotations

import re

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_INT = re.compile(r"^-?\d+$")
_VERSION = re.compile(r"#\s*nccl-tests version (\S+)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONFIG = re.compile(r"#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]+)\]\s+(.*)$")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)\s*(OK|FAILED)?")
_ERROR = re.compile(r"#\s*error:\s*(.+)$")


def strip_mpi_prefixes(text: str) -> list[str]:
    return [_MPI_PREFIX.sub("", line.rstrip("\r")) for line in text.splitlines()]


def _number(token: str) -> float | None:
    return None if token == "N/A" else float(token)


def _result(values: list[str]) -> dict:
    time_us, algbw, busbw, wrong = values[:4]
    return {"time_us": float(time_us), "algbw": float(algbw), "busbw": float(busbw), "wrong": _number(wrong)}


def parse_nccl_row(line: str) -> dict | None:
    """One result row, or None for anything else."""
    tokens = line.split()
    if len(tokens) < 12 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    has_root = len(tokens) >= 13 and bool(_INT.match(tokens[4]))
    head, values = (tokens[:5], tokens[5:]) if has_root else (tokens[:4], tokens[4:])
    values = [v for v in values if not re.match(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$", v)]  # -T timestamps
    per_iteration = len(values) >= 16  # time algbw busbw #wrong i_min i_max i_p99 i_cv%, twice
    in_place = values[8:12] if per_iteration else values[4:8]
    try:
        return {"size": int(head[0]), "count": int(head[1]), "type": head[2], "redop": head[3],
                "root": int(head[4]) if has_root else None,
                "out_of_place": _result(values[:4]), "in_place": _result(in_place)}
    except (ValueError, IndexError):
        return None


def parse_nccl_tests(text: str) -> dict:
    """Everything the text holds; `complete` is False when the footer is missing (a truncated or killed run)."""
    out: dict = {"version": None, "test": None, "config": None, "devices": [], "rows": [], "out_of_bounds": None,
                 "avg_busbw": None, "avg_busbw_check": None, "errors": [], "complete": False}
    for line in strip_mpi_prefixes(text):
        if not line.lstrip().startswith("#"):
            row = parse_nccl_row(line)
            if row:
                out["rows"].append(row)
            continue
        if m := _VERSION.match(line):
            out["version"] = m.group(1)
        elif m := _STARTING.match(line):
            out["test"] = m.group(1)
        elif m := _CONFIG.match(line):
            out["config"] = dict(zip(("nthread", "ngpus", "min_bytes", "max_bytes"), map(int, m.groups())))
        elif m := _DEVICE.match(line):
            rank, group, pid, host, device, pci, name = m.groups()
            out["devices"].append({"rank": int(rank), "group": int(group) if group else None, "pid": int(pid),
                                   "host": host, "device": int(device), "pci": pci, "name": name.strip()})
        elif m := _OOB.match(line):
            out["out_of_bounds"] = {"count": int(m.group(1)), "ok": m.group(2) != "FAILED" and int(m.group(1)) == 0}
        elif m := _AVG.match(line):
            out["avg_busbw"] = float(m.group(1))
            out["avg_busbw_check"] = m.group(2)  # OK / FAILED when NCCL_TESTS_MIN_BW is set
            out["complete"] = True
        elif m := _ERROR.match(line):
            out["errors"].append(m.group(1).strip())
    return out


def nccl_summary(parsed: dict) -> dict:
    """The figures a check needs: peak and average busbw, whether the run finished and validated."""
    rows = parsed["rows"]
    peak = max((max(r["out_of_place"]["busbw"], r["in_place"]["busbw"]) for r in rows), default=None)
    wrong = sum((r["out_of_place"]["wrong"] or 0) + (r["in_place"]["wrong"] or 0) for r in rows)
    failed = bool(wrong) or (parsed["out_of_bounds"] is not None and not parsed["out_of_bounds"]["ok"]) \
        or parsed["avg_busbw_check"] == "FAILED" or bool(parsed["errors"])
    return {"avg_busbw": parsed["avg_busbw"], "peak_busbw": peak, "rows": len(rows), "wrong": wrong,
            "complete": parsed["complete"], "failed": failed, "ranks": len(parsed["devices"]) or None,
            "hosts": sorted({d["host"] for d in parsed["devices"]}) or None}


_NVB_VERSION = re.compile(r"^nvbandwidth Version:\s*(\S+)")
_NVB_DEVICE = re.compile(r"^Device (\d+):\s*(.+?)(?:\s+\(([0-9a-fA-F:.]+)\))?\s*$")
_NVB_RUNNING = re.compile(r"^Running (\S+?)\.?$")
_NVB_SUM = re.compile(r"^SUM\s+(\S+)\s+([0-9.]+)")


def parse_nvbandwidth(text: str) -> dict:
    """Version, devices and, per test, its matrix (None for N/A cells) and SUM."""
    out: dict = {"version": None, "devices": [], "tests": {}}
    current: dict | None = None
    for line in strip_mpi_prefixes(text):
        stripped = line.strip()
        if m := _NVB_VERSION.match(stripped):
            out["version"] = m.group(1)
        elif m := _NVB_DEVICE.match(stripped):
            out["devices"].append({"index": int(m.group(1)), "name": m.group(2), "pci": m.group(3)})
        elif m := _NVB_RUNNING.match(stripped):
            current = {"title": None, "columns": [], "rows": {}, "sum": None}
            out["tests"][m.group(1)] = current
        elif current is not None and "bandwidth (GB/s)" in stripped:
            current["title"] = stripped
        elif m := _NVB_SUM.match(stripped):
            out["tests"].setdefault(m.group(1), current or {"title": None, "columns": [], "rows": {}})["sum"] = float(m.group(2))
            current = None
        elif current is not None and stripped:
            tokens = stripped.split()
            if all(t.isdigit() for t in tokens) and not current["columns"]:
                current["columns"] = [int(t) for t in tokens]
            elif tokens[0].isdigit() and len(tokens) > 1:
                current["rows"][int(tokens[0])] = [_number(t) for t in tokens[1:]]
    return out


def nvbandwidth_summary(parsed: dict) -> dict[str, dict]:
    """Per test: SUM, and the slowest and fastest measured cell (a weak link shows as a low minimum)."""
    summary = {}
    for name, test in parsed["tests"].items():
        cells = [v for row in test["rows"].values() for v in row if v is not None]
        summary[name] = {"sum": test.get("sum"), "min": min(cells, default=None), "max": max(cells, default=None),
                         "cells": len(cells)}
    return summary


def _find_key(node, key: str):
    """The first value of `key` anywhere in a JSON document (depth first)."""
    if isinstance(node, dict):
        if key in node:
            return node[key]
        children = node.values()
    elif isinstance(node, list):
        children = node
    else:
        return None
    for child in children:
        found = _find_key(child, key)
        if found is not None:
            return found
    return None


def _json_result(r: dict | None) -> dict | None:
    if not r:
        return None
    time_us = r.get("time", r.get("cpu_time"))
    wrong = r.get("nwrong")
    return {"time_us": float(time_us), "algbw": float(r["alg_bw"]), "busbw": float(r["bus_bw"]),
            "wrong": None if wrong in (None, "nan") else float(wrong)}


def parse_nccl_tests_json(doc: dict) -> dict:
    """nccl-tests' `-J file` output (format version 2 of its util.cu writer), in parse_nccl_tests' shape.

    The writer nests sections by where the test is in its run; the sections
    are looked up by name, so an extra level of nesting does not matter.
    """
    config = _find_key(doc, "config") or {}
    rows = []
    for r in _find_key(doc, "results") or []:
        oop, ip = _json_result(r.get("out_of_place")), _json_result(r.get("in_place"))
        root = r.get("root")
        rows.append({"size": int(r["size"]), "count": int(r["count"]), "type": r["type"], "redop": r["redop"],
                     "root": int(root) if root not in (None, "") and str(root).strip().lstrip("-").isdigit() else None,
                     "out_of_place": oop or ip, "in_place": ip or oop})
    oob = _find_key(doc, "out_of_bounds")
    avg = _find_key(doc, "average_bus_bandwidth")
    okay = avg.get("okay") if avg else None
    return {
        "version": str(doc.get("version")) if doc.get("version") is not None else None,
        "test": None,
        "config": {"nthread": config.get("nthreads"), "ngpus": config.get("ngpus"),
                   "min_bytes": config.get("minimum_bytes"), "max_bytes": config.get("maximum_bytes")} if config else None,
        "devices": [{"rank": d.get("rank"), "group": d.get("group"), "pid": d.get("pid"), "host": d.get("hostname"),
                     "device": d.get("device"), "pci": d.get("device_hex"), "name": d.get("device_info")}
                    for d in (_find_key(doc, "devices") or [])],
        "rows": rows,
        "out_of_bounds": {"count": int(oob["count"]), "ok": oob.get("okay") in (True, "true")} if oob else None,
        "avg_busbw": float(avg["bandwidth"]) if avg else None,
        "avg_busbw_check": None if okay in (None, "unchecked") else "OK" if okay in (True, "true") else "FAILED",
        "errors": [e for e in (_find_key(doc, "errors") or []) if e],
        "complete": avg is not None,
    }


def parse_nvbandwidth_json(doc: dict) -> dict:
    """nvbandwidth's `-j` output ({"nvbandwidth": {"testcases": [...]}}), in parse_nvbandwidth's shape."""
    root = doc.get("nvbandwidth", doc)
    tests = {}
    for case in root.get("testcases", []):
        matrix = case.get("bandwidth_matrix") or []
        tests[case["name"]] = {
            "title": case.get("bandwidth_description"),
            "columns": list(range(len(matrix[0]))) if matrix else [],
            "rows": {i: [_number(str(cell).strip()) for cell in row] for i, row in enumerate(matrix)},
            "sum": float(case["sum"]) if "sum" in case else None,
            "status": case.get("status"), "error": case.get("error"),
        }
    return {"version": root.get("version"), "devices": [], "tests": tests, "error": root.get("error")}
