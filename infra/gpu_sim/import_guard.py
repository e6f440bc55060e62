"""Installed into the GPU-sim environment (as a .pth hook): records every top-level import that nothing provides.

The environment holds only the GPU image's packages, and the carried wheels sit on
PYTHONPATH, as on the lent machine. An import of anything else fails there as it
would on the machine; this hook, last on sys.meta_path, also writes down which
module was missing and which file asked for it (one JSON line per miss, in the file
that PRETRAIN_IMPORT_MISSES names), in every process: the check's, the launcher's
and each rank's. A miss that code catches (an optional dependency) is recorded
too; `infra/gpu_sim.py` decides which misses fail the simulation.

It never raises and never finds anything, so `importlib.util.find_spec` and
optional imports behave exactly as without it.
"""
from __future__ import annotations

import json
import os
import sys

LOG_ENV = "PRETRAIN_IMPORT_MISSES"
_IMPORT_MACHINERY = ("<frozen importlib", "importlib/__init__.py", "importlib/util.py", "pkgutil.py")


def importer() -> str:
    """file:line of the code whose import statement (or find_spec call) reached this finder."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not any(part in name for part in _IMPORT_MACHINERY) and name != __file__:
            return f"{name}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"


class MissRecorder:
    """A meta path finder that finds nothing: reached only when every real finder has given up."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        log = os.environ.get(LOG_ENV)
        if log and "." not in fullname:  # a package, not a submodule of one that exists
            try:
                with open(log, "a", encoding="utf-8") as f:
                    f.write(json.dumps({"module": fullname, "importer": importer(), "pid": os.getpid()}) + "\n")
            except OSError:
                pass
        return None


def install() -> None:
    if not any(f is MissRecorder for f in sys.meta_path):
        sys.meta_path.append(MissRecorder)


install()
