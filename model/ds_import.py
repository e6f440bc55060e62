"""DeepSpeed imported without the MLflow it does not need.

`import deepspeed` imports MLflow (and with it pandas, FastAPI, OpenTelemetry: 1.5 s of CPU)
for its autotuner alone, which this pipeline never runs. Every process that imports DeepSpeed
pays it: the launcher and each rank, at every launch and relaunch, although only rank 0
tracks to MLflow. While DeepSpeed imports, MLflow reads as not installed (its autotuner then
runs without MLflow logging); afterwards `import mlflow` works as usual.
"""
from __future__ import annotations

import sys


def import_deepspeed():
    hidden = "mlflow" not in sys.modules
    if hidden:
        sys.modules["mlflow"] = None  # `import mlflow` raises ImportError, which DeepSpeed catches
    try:
        import deepspeed
    finally:
        if hidden and sys.modules.get("mlflow", 0) is None:
            del sys.modules["mlflow"]
    return deepspeed
