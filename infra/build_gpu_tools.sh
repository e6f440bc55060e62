#!/usr/bin/env bash
# Build NVIDIA's nccl-tests and nvbandwidth from source on a CUDA machine, for the preflight stage.
#
#   infra/build_gpu_tools.sh [PREFIX]        (default PREFIX: ~/.local/gpu-tools)
#
# Sources: cloned from GitHub, or taken from NCCL_TESTS_SRC / NVBANDWIDTH_SRC (folders) on a node without network.
# Needs: make, cmake (>= 3.20), a C++ compiler, the CUDA toolkit (nvcc; CUDA_HOME or /usr/local/cuda),
# NCCL headers and library (NCCL_HOME; else a system NCCL; else the nvidia-nccl wheel PyTorch's CUDA build
# installs), Boost program_options for nvbandwidth, and optionally MPI (set MPI_HOME) for multi-node nccl-tests.
# NVCC_GENCODE limits nccl-tests to your GPUs' architecture (e.g. -gencode=arch=compute_90,code=sm_90): minutes less.
# Each tool builds on its own; the script fails only when neither builds.
# Then set in the config:  preflight.nccl_tests_dir: PREFIX/nccl-tests/build   preflight.nvbandwidth_path: PREFIX/nvbandwidth/nvbandwidth
set -uo pipefail

PREFIX="${1:-$HOME/.local/gpu-tools}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
JOBS="$(nproc)"
mkdir -p "$PREFIX"
[ -x "$CUDA_HOME/bin/nvcc" ] || CUDA_HOME="$(dirname "$(dirname "$(command -v nvcc 2>/dev/null || echo /x/x/nvcc)")")"
[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "error: no nvcc under CUDA_HOME or on PATH; set CUDA_HOME" >&2; exit 2; }

source_of() {  # NAME REPO SRC_VAR -> the source folder under PREFIX
  local name="$1" repo="$2" src="$3"
  if [ ! -d "$PREFIX/$name" ]; then
    if [ -n "$src" ]; then cp -r "$src" "$PREFIX/$name"; else git clone --depth 1 "$repo" "$PREFIX/$name"; fi
  fi
}

nccl_home() {  # a folder with include/nccl.h and lib/libnccl.so
  if [ -n "${NCCL_HOME:-}" ]; then echo "$NCCL_HOME"; return; fi
  if ldconfig -p 2>/dev/null | grep -q 'libnccl.so ' && [ -f /usr/include/nccl.h ]; then echo /usr; return; fi
  local wheel
  wheel="$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)" || return 1
  [ -f "$wheel/include/nccl.h" ] || return 1
  mkdir -p "$PREFIX/nccl/lib"
  ln -sfn "$wheel/include" "$PREFIX/nccl/include"
  local lib
  lib="$(ls "$wheel"/lib/libnccl.so* | head -1)"
  ln -sf "$lib" "$PREFIX/nccl/lib/libnccl.so"
  ln -sf "$lib" "$PREFIX/nccl/lib/libnccl.so.2"
  echo "$PREFIX/nccl"
}

build_nccl_tests() {
  source_of nccl-tests https://github.com/NVIDIA/nccl-tests.git "${NCCL_TESTS_SRC:-}" || return 1
  local home
  home="$(nccl_home)" || { echo "nccl-tests: no NCCL headers and library found; set NCCL_HOME" >&2; return 1; }
  local args=(-C "$PREFIX/nccl-tests" -j "$JOBS" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$home")
  [ -n "${NVCC_GENCODE:-}" ] && args+=(NVCC_GENCODE="$NVCC_GENCODE")
  [ -n "${MPI_HOME:-}" ] && args+=(MPI=1 MPI_HOME="$MPI_HOME")
  make "${args[@]}" && ls -1 "$PREFIX/nccl-tests/build/"*_perf
  echo "nccl-tests run with LD_LIBRARY_PATH=$home/lib"
}

build_nvbandwidth() {
  source_of nvbandwidth https://github.com/NVIDIA/nvbandwidth.git "${NVBANDWIDTH_SRC:-}" || return 1
  (cd "$PREFIX/nvbandwidth" && cmake -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc" . && make -j "$JOBS") \
    && ls -1 "$PREFIX/nvbandwidth/nvbandwidth"
}

built=0
if build_nccl_tests; then built=$((built + 1)); else echo "nccl-tests: not built" >&2; fi
if build_nvbandwidth; then built=$((built + 1)); else echo "nvbandwidth: not built (Boost program_options?)" >&2; fi
[ "$built" -gt 0 ] || { echo "error: neither tool built" >&2; exit 1; }
echo "set preflight.nccl_tests_dir: $PREFIX/nccl-tests/build and preflight.nvbandwidth_path: $PREFIX/nvbandwidth/nvbandwidth"
