#!/usr/bin/env bash
# build.sh — configure and build ds4cpp into build/ (CUDA backend included when nvcc is present).
# Usage: scripts/build.sh [extra cmake args...]   (DS4_BUILD_DIR overrides the folder)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR="${DS4_BUILD_DIR:-build}"
CUDA_FLAG=()
NVCC="$(command -v nvcc || true)"
[ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ] && NVCC=/usr/local/cuda/bin/nvcc
if [ -n "$NVCC" ] && [ "${DS4_CUDA:-1}" != 0 ]; then
  CUDA_FLAG=(-DDS4_CUDA=ON -DCMAKE_CUDA_COMPILER="$NVCC")
fi
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  cmake -S . -B "$BUILD_DIR" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${CUDA_FLAG[@]}" "$@"
else
  cmake -S . -B "$BUILD_DIR" "$@" >/dev/null
fi
cmake --build "$BUILD_DIR" -j "$(nproc)"
