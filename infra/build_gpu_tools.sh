#!/usr/bin/env bash
# Build NVIDIA's nccl-tests and nvbandwidth from source on a CUDA machine, for the preflight stage.
#
#   infra/build_gpu_tools.sh [PREFIX]        (default PREFIX: ~/.local/gpu-tools)
#
# Needs: git, make, cmake (>= 3.20), a C++ compiler, the CUDA toolkit (nvcc; CUDA_HOME or /usr/local/cuda),
# NCCL (headers and library; NCCL_HOME if not in a system path), Boost program_options for nvbandwidth,
# and optionally MPI (set MPI_HOME) for multi-node nccl-tests.
# Then set in the config:  preflight.nccl_tests_dir: PREFIX/nccl-tests/build   preflight.nvbandwidth_path: PREFIX/nvbandwidth/nvbandwidth
set -euo pipefail

PREFIX="${1:-$HOME/.local/gpu-tools}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
JOBS="$(nproc)"
mkdir -p "$PREFIX"

command -v "$CUDA_HOME/bin/nvcc" >/dev/null || { echo "error: no nvcc under CUDA_HOME=$CUDA_HOME; set CUDA_HOME" >&2; exit 2; }

if [ ! -d "$PREFIX/nccl-tests" ]; then
  git clone --depth 1 https://github.com/NVIDIA/nccl-tests.git "$PREFIX/nccl-tests"
fi
make_args=(-C "$PREFIX/nccl-tests" -j "$JOBS" CUDA_HOME="$CUDA_HOME")
[ -n "${NCCL_HOME:-}" ] && make_args+=(NCCL_HOME="$NCCL_HOME")
[ -n "${MPI_HOME:-}" ] && make_args+=(MPI=1 MPI_HOME="$MPI_HOME")
make "${make_args[@]}"

if [ ! -d "$PREFIX/nvbandwidth" ]; then
  git clone --depth 1 https://github.com/NVIDIA/nvbandwidth.git "$PREFIX/nvbandwidth"
fi
(cd "$PREFIX/nvbandwidth" && cmake -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" . && make -j "$JOBS")

echo "built:"
ls -1 "$PREFIX/nccl-tests/build/"*_perf
ls -1 "$PREFIX/nvbandwidth/nvbandwidth"
echo "set preflight.nccl_tests_dir: $PREFIX/nccl-tests/build and preflight.nvbandwidth_path: $PREFIX/nvbandwidth/nvbandwidth"
