"""Parsers for the text NVIDIA's nccl-tests and nvbandwidth print, found by its content, not by its place.

nccl-tests: every line is searched for what it holds, wherever that stands in the line, so any label a
launcher puts before it (mpirun --tag-output's `[1,0]<stdout>:`, Slurm's `0: `, Ray's `(head, rank=0,
pid=3808)`, a host name) and NCCL INFO lines between the rows change nothing. Header and footer lines are
read with or without their `#` (builds before 2.10 printed the config line bare). A result row is two
integers (size, count), a type, an optional reduction op, an optional root, then the out-of-place and
in-place blocks (time, algbw, busbw, check; twice as wide with per-iteration columns; `-T` timestamps
skipped); the blocks are counted from the values, so a row that leaves its redop blank (alltoall) or a
legacy broadcast with a root and no redop reads right. The check column counts wrong elements (`#wrong`)
or, in legacy outputs, holds the largest numerical error (`error`, `res`). AMD's rccl-tests print the same
table (`# nThreads: 1 nGpus: 4 ...`, an asterisk after an error over its threshold).
Verdicts: the tool's own footer (`Out of bounds values : 0 OK`, `Avg bus bandwidth : X [OK|FAILED]`)
decides over counts from the rows; any line reporting a failure (`Test NCCL failure`, `Test CUDA failure`,
`Test failure`, `NCCL failure`, `NCCL WARN`, `Segmentation fault`, a rank that exited on a signal) fails
the run with the line kept; an output without its footer is failed unless its rows reach the configured
maximum size with no wrong values (only the footer was lost).
nvbandwidth: v0.2-v0.8 preambles, one matrix per test with `N/A` cells, and the `SUM <test> <value>` line
that ends each test, after any launcher label.
"""
from __future__ import annotations

import math
import re

_LAUNCHER_LABEL = re.compile(r"^\s*(?:\([^)]*\)\s*)?(?:\[\d+,\d+\]<std(?:out|err)>:\s?)?(?:\d+:\s)?")
_ROW = re.compile(r"(?<![\w.,:\-])(\d+)\s+(\d+)\s+([A-Za-z][A-Za-z0-9_]*)\s+(\S.*)$")
_NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\*?$|^N/A\*?$")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$")
_HEADER = re.compile(r"\b(?:size\s+count|bytes\s+N)\s+type\b(.*)$")
_VERSION = re.compile(r"(nccl-tests) version (\S+)|(rccl-tests): Version (\S+)")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
_CONFIG = re.compile(r"nThreads?:?\s+(\d+)\s+nGpus:?\s+(\d+)\s+(?:nRanks:?\s+\d+\s+)?minBytes:?\s+(\d+)\s+"
                     r"maxBytes:?\s+(\d+)")
_REDUCED_MAX = re.compile(r"Reducing maxBytes to (\d+)")
_DEVICE = re.compile(r"Rank\s+(\d+)(?:\s+Group\s+(\d+))?(?:\s+Pid\s+(\d+))?\s+on\s+(\S+)\s+device\s+(\d+)\s+"
                     r"\[([^\]]+)\]\s+(.*)$")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"Avg bus bandwidth\s*:\s*([0-9.eE+-]+|nan|inf)\s*(OK|FAILED)?", re.I)
_FAILURE = re.compile(r"(Test (?:NCCL |CUDA )?failure\b.*|NCCL failure\b.*|NCCL WARN\b.*|Segmentation fault.*|"
                      r"Bus error.*|exited on signal \d+.*|MPI_ABORT.*|(?<=#)\s*error:\s*\S.*)")


def strip_mpi_prefixes(text: str) -> list[str]:
    """The lines without the labels launchers put before them (Ray, mpirun --tag-output, srun -l)."""
    return [_LAUNCHER_LABEL.sub("", line.rstrip("\r"), count=1) for line in text.splitlines()]


def _number(token: str) -> float | None:
    return None if token == "N/A" else float(token)


def table_layout(line: str) -> dict | None:
    """From the column header (`size count type redop root time ... #wrong`), wherever it stands in the line:
    whether the check column counts wrong elements (`#wrong`) or holds an error magnitude (legacy `error`)."""
    m = _HEADER.search(line)
    if not m or "time" not in m.group(1).split():
        return None
    tail = m.group(1).split()
    return {"check": "count" if "#wrong" in tail else "magnitude" if {"error", "res"} & set(tail) else None}


def _result(values: list[str], check: str | None) -> dict:
    time_us, algbw, busbw, checked = values[:4]
    over = checked.endswith("*")  # rccl-tests: an error over its threshold, the tool's own verdict on the row
    value = _number(checked.rstrip("*"))
    if check == "magnitude":
        return {"time_us": float(time_us), "algbw": float(algbw), "busbw": float(busbw), "wrong": None,
                "error": value, "over_threshold": over}
    out = {"time_us": float(time_us), "algbw": float(algbw), "busbw": float(busbw), "wrong": value}
    return {**out, "over_threshold": True} if over else out


def _check_kind(values: list[str], layout: dict | None) -> str:
    if layout and layout["check"]:
        return layout["check"]
    return "magnitude" if "e" in values[3].lower() and "N/A" not in values[3] else "count"


def parse_nccl_row(line: str, layout: dict | None = None) -> dict | None:
    """The result row in this line, wherever it starts, or None; `layout` from the table's header when seen."""
    m = _ROW.search(line)
    if not m:
        return None
    size, count, dtype, rest = m.groups()
    tokens = [t for t in rest.split() if not _STAMP.match(t)]
    redop = tokens.pop(0) if tokens and not _NUMBER.match(tokens[0]) else None
    if not tokens or not all(_NUMBER.match(t) for t in tokens) or len(tokens) % 4 not in (0, 1) \
            or len(tokens) // 4 not in (2, 4):
        return None
    root = int(tokens.pop(0)) if len(tokens) % 4 == 1 else None
    width = len(tokens) // 2  # 4 per block, 8 with per-iteration columns
    try:
        check = _check_kind(tokens, layout)
        return {"size": int(size), "count": int(count), "type": dtype, "redop": redop, "root": root,
                "out_of_place": _result(tokens[:4], check), "in_place": _result(tokens[width:width + 4], check)}
    except ValueError:
        return None


def _read_meta(line: str, out: dict) -> bool:
    """The version, test, config and device lines; True when the line was one of them."""
    if m := _VERSION.search(line):
        out["tool"], out["version"] = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
    elif m := _STARTING.search(line):
        out["test"] = m.group(1)
    elif m := _CONFIG.search(line):
        out["config"] = dict(zip(("nthread", "ngpus", "min_bytes", "max_bytes"), map(int, m.groups())))
    elif m := _REDUCED_MAX.search(line):
        out["config"] = {**(out["config"] or {}), "max_bytes": int(m.group(1))}
    elif m := _DEVICE.search(line):
        rank, group, pid, host, device, pci, name = m.groups()
        out["devices"].append({"rank": int(rank), "group": int(group) if group else None,
                               "pid": int(pid) if pid else None, "host": host, "device": int(device), "pci": pci,
                               "name": name.strip()})
    else:
        return False
    return True


def _read_footer(line: str, out: dict) -> bool:
    if m := _OOB.search(line):
        out["out_of_bounds"] = {"count": int(m.group(1)), "ok": m.group(2) != "FAILED" and int(m.group(1)) == 0}
    elif m := _AVG.search(line):
        value = float(m.group(1))
        out["avg_busbw"] = value if math.isfinite(value) else None
        out["avg_busbw_check"] = m.group(2)  # OK / FAILED when NCCL_TESTS_MIN_BW is set
        out["complete"] = True
    elif m := _FAILURE.search(line):
        out["errors"].append(m.group(1).strip())
    else:
        return False
    return True


def parse_nccl_tests(text: str) -> dict:
    """Everything the text holds; `complete` is False when the footer is missing (a truncated or killed run)."""
    out: dict = {"tool": None, "version": None, "test": None, "config": None, "devices": [], "rows": [],
                 "out_of_bounds": None, "avg_busbw": None, "avg_busbw_check": None, "errors": [], "complete": False}
    layout = None
    for line in strip_mpi_prefixes(text):
        if found := table_layout(line):
            layout = found
        elif not (_read_meta(line, out) or _read_footer(line, out)) and (row := parse_nccl_row(line, layout)):
            out["rows"].append(row)
    return out


def _rows_reach_the_end(parsed: dict) -> bool:
    """An output cut after its last row: the rows reach the configured maximum size."""
    config, rows = parsed["config"] or {}, parsed["rows"]
    return bool(rows and config.get("max_bytes") and max(r["size"] for r in rows) >= config["max_bytes"])


def nccl_summary(parsed: dict) -> dict:
    """The figures a check needs: peak and average busbw, whether the run finished and validated.

    Validation is the tool's own verdict (the out-of-bounds footer) when the output has one; only an output
    without it is judged from its rows (wrong-element counts, rccl-tests' over-threshold marks), and is failed
    unless the rows reach the configured maximum size. An `error` column of a legacy output is a magnitude
    (reported as max_error), never a count. A reported failure line fails the run whatever the rows say."""
    rows = parsed["rows"]
    results = [r[side] for r in rows for side in ("out_of_place", "in_place")]
    peak = max((res["busbw"] for res in results), default=None)
    wrong = sum(res["wrong"] or 0 for res in results)
    errors = [res["error"] for res in results if res.get("error") is not None]
    verdict = parsed["out_of_bounds"]
    values_bad = (not verdict["ok"]) if verdict is not None else \
        bool(wrong) or any(res.get("over_threshold") for res in results)
    truncated = not parsed["complete"] and not _rows_reach_the_end(parsed)
    failed = values_bad or truncated or parsed["avg_busbw_check"] == "FAILED" or bool(parsed["errors"])
    return {"avg_busbw": parsed["avg_busbw"], "peak_busbw": peak, "rows": len(rows), "wrong": wrong,
            "max_error": max(errors) if errors else None, "verdict": "tool" if verdict is not None else "rows",
            "complete": parsed["complete"], "truncated": truncated, "failed": failed,
            "errors": parsed["errors"][:5], "ranks": len(parsed["devices"]) or None,
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
