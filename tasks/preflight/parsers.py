"""Parsers for the text NVIDIA's nccl-tests and nvbandwidth print, in every format seen in the wild.

nccl-tests: current (v2.x: version line, Group and root columns, PCI ids),
legacy (no Group or root column; broadcast without a redop column; an `error`
column that holds the largest numerical error, `1e-06`, not a count of wrong
elements), times printed as integers or in exponent form at large sizes, `N/A`
in #wrong when validation is off, per-iteration and timestamp columns,
`[1,0]<stdout>:` prefixes under mpirun --tag-output and `0: ` prefixes under
Slurm's `srun -l`. AMD's rccl-tests print the same table with a version line
of their own and notes (`# Errors with asterisks ...`, an asterisk after an
error over its threshold). The columns are read from the table's header line
when there is one. A missing footer marks the output truncated; the footer's
verdict (`Out of bounds values : 0 OK`) is the tool's own and decides over
counts taken from the rows.
nvbandwidth: v0.2 and v0.8 preambles, one matrix per test with `N/A` cells,
and the `SUM <test> <value>` line that ends each test.
"""
from __future__ import annotations

import re

_MPI_PREFIX = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:\s?")
_SRUN_PREFIX = re.compile(r"^\s*\d+: ")
_INT = re.compile(r"^-?\d+$")
_VERSION = re.compile(r"#\s*(nccl-tests) version (\S+)|(rccl-tests): Version (\S+)")
_STARTING = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONFIG = re.compile(r"#?\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_DEVICE = re.compile(r"#\s*Rank\s+(\d+)(?:\s+Group\s+(\d+))?\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+(\d+)\s+\[([^\]]+)\]\s+(.*)$")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)\s*(OK|FAILED)?")
_ERROR = re.compile(r"#\s*error:\s*(.+)$")


def strip_mpi_prefixes(text: str) -> list[str]:
    """The lines without the labels launchers put before them (mpirun --tag-output, srun -l)."""
    return [_MPI_PREFIX.sub("", _SRUN_PREFIX.sub("", line.rstrip("\r"), count=1)) for line in text.splitlines()]


def _number(token: str) -> float | None:
    return None if token == "N/A" else float(token)


def table_layout(line: str) -> dict | None:
    """The column header (`#  size  count  type  redop  root  time ...  #wrong`): the leading columns, and
    whether the check column counts wrong elements (`#wrong`) or holds an error magnitude (legacy `error`)."""
    tokens = line.lstrip("#").split()
    if len(tokens) < 6 or tokens[:2] != ["size", "count"] or "time" not in tokens:
        return None
    check = "count" if "#wrong" in tokens else "magnitude" if "error" in tokens else None
    return {"head": tokens[:tokens.index("time")], "check": check}


def _result(values: list[str], check: str | None) -> dict:
    time_us, algbw, busbw, checked = values[:4]
    over = checked.endswith("*")  # rccl-tests: an error over its threshold, the tool's own verdict on the row
    value = _number(checked.rstrip("*"))
    if check == "magnitude":
        return {"time_us": float(time_us), "algbw": float(algbw), "busbw": float(busbw), "wrong": None,
                "error": value, "over_threshold": over}
    out = {"time_us": float(time_us), "algbw": float(algbw), "busbw": float(busbw), "wrong": value}
    return {**out, "over_threshold": True} if over else out


def _head(tokens: list[str], layout: dict | None) -> tuple[dict, int] | None:
    """The leading fields of a row and how many tokens they take, from the header or, without one, the shape."""
    if layout:
        names = layout["head"]
        if len(tokens) < len(names) + 8:
            return None
        fields = dict(zip(names, tokens))
        return {"size": int(fields["size"]), "count": int(fields["count"]), "type": fields.get("type"),
                "redop": fields.get("redop"), "root": int(fields["root"]) if "root" in fields else None}, len(names)
    has_root = len(tokens) >= 13 and bool(_INT.match(tokens[4]))
    width = 5 if has_root else 4
    return {"size": int(tokens[0]), "count": int(tokens[1]), "type": tokens[2], "redop": tokens[3],
            "root": int(tokens[4]) if has_root else None}, width


def parse_nccl_row(line: str, layout: dict | None = None) -> dict | None:
    """One result row, or None for anything else; `layout` from the table's header line when it had one."""
    tokens = line.split()
    if len(tokens) < 12 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    check = layout["check"] if layout else ("magnitude" if "e" in tokens[-1].lower() and "N/A" not in tokens[-1]
                                            else "count")
    try:
        found = _head(tokens, layout)
        if found is None:
            return None
        head, width = found
        values = [v for v in tokens[width:] if not re.match(r"^\d{4}-\d\d-\d\d$|^\d\d:\d\d:\d\d$", v)]  # -T
        per_iteration = len(values) >= 16  # time algbw busbw #wrong i_min i_max i_p99 i_cv%, twice
        in_place = values[8:12] if per_iteration else values[4:8]
        return {**head, "out_of_place": _result(values[:4], check), "in_place": _result(in_place, check)}
    except (ValueError, IndexError):
        return None


def parse_nccl_tests(text: str) -> dict:
    """Everything the text holds; `complete` is False when the footer is missing (a truncated or killed run)."""
    out: dict = {"tool": None, "version": None, "test": None, "config": None, "devices": [], "rows": [],
                 "out_of_bounds": None, "avg_busbw": None, "avg_busbw_check": None, "errors": [], "complete": False}
    layout = None
    for line in strip_mpi_prefixes(text):
        if not line.lstrip().startswith("#"):
            if row := parse_nccl_row(line, layout):
                out["rows"].append(row)
            elif m := _VERSION.match(line.strip()):  # rccl-tests print theirs without the '#'
                out["tool"], out["version"] = m.group(3), m.group(4)
            elif m := _CONFIG.match(line.strip()):  # so did nccl-tests before 2.10
                out["config"] = dict(zip(("nthread", "ngpus", "min_bytes", "max_bytes"), map(int, m.groups())))
            continue
        if found := table_layout(line):
            layout = found
        elif m := _VERSION.match(line):
            out["tool"], out["version"] = m.group(1), m.group(2)
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
    """The figures a check needs: peak and average busbw, whether the run finished and validated.

    Validation is the tool's own verdict (the out-of-bounds footer) when the output has one; only a truncated
    output is judged from its rows (wrong-element counts, rccl-tests' over-threshold marks). An `error` column
    of a legacy output is a magnitude (reported as max_error), never a count."""
    rows = parsed["rows"]
    results = [r[side] for r in rows for side in ("out_of_place", "in_place")]
    peak = max((res["busbw"] for res in results), default=None)
    wrong = sum(res["wrong"] or 0 for res in results)
    errors = [res["error"] for res in results if res.get("error") is not None]
    verdict = parsed["out_of_bounds"]
    values_bad = (not verdict["ok"]) if verdict is not None else \
        bool(wrong) or any(res.get("over_threshold") for res in results)
    failed = values_bad or parsed["avg_busbw_check"] == "FAILED" or bool(parsed["errors"])
    return {"avg_busbw": parsed["avg_busbw"], "peak_busbw": peak, "rows": len(rows), "wrong": wrong,
            "max_error": max(errors) if errors else None, "verdict": "tool" if verdict is not None else "rows",
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
