"""DeepSpeed imported in the ranks and the launcher without MLflow, which it imports for its autotuner only."""
import os
import subprocess
import sys

from tests.conftest import ROOT

CHECK = """
import sys
from model.ds_import import import_deepspeed
deepspeed = import_deepspeed()
assert deepspeed.init_distributed and "mlflow" not in sys.modules, sorted(m for m in sys.modules if "mlflow" in m)
import mlflow  # rank 0 still tracks: MLflow imports as usual afterwards
from mlflow.tracking import MlflowClient
print("ok", mlflow.__version__)
"""


def test_deepspeed_imports_without_mlflow_which_still_imports_afterwards():
    proc = subprocess.run([sys.executable, "-c", CHECK], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "DS_ACCELERATOR": "cpu"})
    assert proc.returncode == 0 and proc.stdout.startswith("ok"), proc.stderr[-3000:]
