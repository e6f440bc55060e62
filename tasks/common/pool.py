"""Per-shard work on a local process pool, in order, with progress lines (the CLI path; flows use Prefect runners)."""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from typing import Callable

from tasks.common.lifetime import worker_init
from tasks.common.progress import Progress


def map_local(fn: Callable, calls: list[tuple], workers: int | None, what: str, unit: str,
              spawn: bool = False, initializer: Callable | None = None) -> list:
    """fn(*args) for each args tuple, on up to `workers` processes (None: one per CPU); results in call order."""

    workers = min(workers or os.cpu_count() or 1, max(len(calls), 1))
    progress = Progress(what, unit, every_s=5)
    results = []
    if workers == 1:
        for args in calls:
            results.append(fn(*args))
            progress.add()
    else:
        ctx = multiprocessing.get_context("spawn") if spawn else None
        init = partial(worker_init, os.getpid(), *([initializer] if initializer else []))  # workers die with us
        with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=init) as pool:
            for result in pool.map(fn, *zip(*calls)):
                results.append(result)
                progress.add()
    progress.done()
    return results
