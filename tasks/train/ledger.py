"""The token ledger of a training: tokens trained per data pool and mixture phase, as the last logged step has it
(the training program logs it with every logged step: model/data.py token_ledger)."""
from __future__ import annotations

from pathlib import Path

from model.data import LEDGER_PREFIX
from model.protocol import read_jsonl


def ledger_rows(metrics_path: Path) -> list[dict]:
    """One row per (phase, pool): tokens and their share of the phase; [] before any ledger was logged."""
    lines = [m for m in read_jsonl(metrics_path) if any(k.startswith(LEDGER_PREFIX) for k in m)] \
        if Path(metrics_path).is_file() else []
    if not lines:
        return []
    last = lines[-1]
    counts = {tuple(k.removeprefix(LEDGER_PREFIX).split("/", 1)): int(v) for k, v in last.items()
              if k.startswith(LEDGER_PREFIX)}
    totals = {phase: sum(v for (p, _), v in counts.items() if p == phase) for phase, _ in counts}
    return [{"step": last["step"], "phase": phase, "pool": pool, "tokens": n,
             "share": round(n / totals[phase], 4) if totals[phase] else 0.0}
            for (phase, pool), n in counts.items()]
