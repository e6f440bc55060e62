#!/usr/bin/env bash
# Wheels for a GPU node that has torch (CUDA), pyarrow, tokenizers, transformers and pyyaml but no network:
# DeepSpeed (pure Python, no prebuilt ops) and the small packages the training program needs beyond those.
#
#   infra/gpu_wheels.sh DEST [PYTHON_VERSION]      (default 3.12; run on a machine with PyPI access)
#
# `make gpu-prepare` (infra/gpu_prepare.py) runs this into .gpu/wheels and installs them into .gpu/site, which
# travels; on the node:  PYTHONPATH=.gpu/site python3 benchmarks/gpu_check.py --prepared .gpu/prepared --out "$OUT"
set -euo pipefail

DEST="${1:?usage: infra/gpu_wheels.sh DEST [PYTHON_VERSION]}"
PYV="${2:-3.12}"
HERE="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$HERE/.venv/bin/python}"
DEEPSPEED_VERSION="$(sed -n 's/^DEEPSPEED_VERSION := //p' "$HERE/Makefile")"
mkdir -p "$DEST"

# DeepSpeed is an sdist: build it here without its ops (they JIT-compile on the node if ever used; the
# training program's AdamW needs none, model/optimizer.py)
DS_BUILD_OPS=0 "$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DEST" "deepspeed==$DEEPSPEED_VERSION"

pin() { "$PY" -c "import importlib.metadata as m; print(m.version('$1'))"; }
for pkg in pydantic pydantic-core annotated-types typing-inspection hjson; do
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$DEST" "$pkg==$(pin "$pkg")"
done
ls -la "$DEST"
du -sh "$DEST"
