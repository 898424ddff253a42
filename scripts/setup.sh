#!/usr/bin/env bash
# One set-up path for both README commands: installs what is missing (Debian packages), then configures and
# builds Release into build/. Safe to run repeatedly; does nothing that is already done.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# The Python module (python/) builds for Debian's /usr/bin/python3 with its packages (numpy, scipy, pytest;
# matplotlib for result.plot()).
for p in cmake ninja-build g++ libeigen3-dev libboost-program-options-dev libgtest-dev googletest zlib1g-dev libdeflate-dev ccache \
         python3-dev pybind11-dev python3-numpy python3-scipy python3-pytest python3-matplotlib; do
  have_pkg "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  echo "spcg setup: installing ${need[*]}"
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi

NVCC="${CUDACXX:-}"
if [ -z "$NVCC" ]; then
  for c in nvcc /usr/local/cuda/bin/nvcc; do
    if command -v "$c" >/dev/null 2>&1; then NVCC="$(command -v "$c")"; break; fi
  done
fi
[ -n "$NVCC" ] || { echo "spcg setup: the CUDA toolkit (nvcc) is required to build; install CUDA 12.x/13.x" >&2; exit 1; }

launcher=()
command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
# GPU architectures: SPCG_CUDA_ARCHITECTURES (e.g. "80;90"), else CMake's choice (this machine's GPU, else sm_90).
archs=()
[ -n "${SPCG_CUDA_ARCHITECTURES:-}" ] && archs=(-DCMAKE_CUDA_ARCHITECTURES="$SPCG_CUDA_ARCHITECTURES")
if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$NVCC" "${launcher[@]}" "${archs[@]}" >/dev/null
fi
cmake --build build -j "$(nproc)"
