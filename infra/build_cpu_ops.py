"""Compile DeepSpeed's CPU shared-memory collective op at install, on a machine without a GPU.

DeepSpeed compiles it just in time when the first CPU rank starts: 35-48 s on 2 cores, inside
the first training launch (of `make demo`, or the first test that trains), which looks like a
hang. Its cache (~/.cache/torch_extensions, or TORCH_EXTENSIONS_DIR) is keyed by the install's
paths, so each virtual environment compiles its own once. GPU ranks use NCCL and never load it.
"""
from __future__ import annotations

import os
import sys
import time


def main() -> int:
    import torch

    if torch.cuda.is_available():
        print("build_cpu_ops: a GPU machine; DeepSpeed's CPU shared-memory op is not needed")
        return 0
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    from deepspeed.comm.torch import build_shm_op  # what each CPU rank calls when its communication starts

    start = time.perf_counter()
    try:
        op = build_shm_op()
    except Exception as err:  # the ranks would fail on the same compile at their start
        print(f"error: DeepSpeed's CPU shared-memory op did not compile ({err}); CPU ranks need a C++ compiler "
              "(apt-get install g++) and ninja (pip install ninja)", file=sys.stderr)
        return 1
    if op is None:
        print("build_cpu_ops: DeepSpeed does not build its shared-memory op here; CPU ranks run without it")
        return 0
    print(f"build_cpu_ops: DeepSpeed's CPU shared-memory op ready ({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
