"""Where per-shard tasks run: a local process pool, or a Ray cluster through prefect-ray."""
from __future__ import annotations

import os
from typing import Callable

from prefect.futures import as_completed
from prefect.task_runners import ProcessPoolTaskRunner

from pretrain.config import ExecutorConfig
from tasks.common.lifetime import die_with_parent


def task_runner_for(executor: ExecutorConfig):
    if executor.kind == "ray":
        try:
            from prefect_ray import RayTaskRunner  # optional: pip install prefect-ray
        except ImportError:
            raise RuntimeError("clean.executor.kind is 'ray' but prefect-ray is not installed; "
                               "run `pip install prefect-ray` or set clean.executor.kind: process") from None
        return RayTaskRunner(address=executor.ray_address) if executor.ray_address else RayTaskRunner()
    # workers die with this process, even when it is SIGKILLed
    return ProcessPoolTaskRunner(max_workers=executor.workers, initializer=die_with_parent, initargs=(os.getpid(),))


def map_on(executor: ExecutorConfig, task, calls: list[dict], on_done: Callable[[int], None] | None = None) -> list:
    """Run `task` once per parameter dict on the configured runner; results in call order.

    on_done(n) is called each time one more call has finished (for progress)."""
    if not calls:
        return []
    with task_runner_for(executor) as runner:
        futures = [runner.submit(task, params) for params in calls]
        for n, _ in enumerate(as_completed(futures), start=1):
            if on_done:
                on_done(n)
        return [f.result() for f in futures]
