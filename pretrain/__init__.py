"""Pipeline-wide pieces: the config schema (lowest layer) and the CLI (top layer)."""
from pathlib import Path

# the checkout (or installed tree) holding flows/, tasks/, model/, pretrain/: what the ranks and the node probes put
# on PYTHONPATH, and where the git commit of a stage's version is read
PROJECT_ROOT = Path(__file__).resolve().parent.parent
