#!/usr/bin/env bash
# Packs what a device run needs into .devdata/bundle.txz (xz: all the travel a run may carry is 64 MiB): the
# stripped binaries of build/, the static libraries the Python module links (scripts/device_python.sh) and a copy
# of ../shared/matrices. On the device:
#   tar xJf .devdata/bundle.txz && mv matrices .devdata/ && SPCG_MATRIX_DIR=$PWD/.devdata/matrices scripts/device.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
mkdir -p "$tmp/build/apps" "$tmp/build/tests" .devdata
find build/apps -maxdepth 1 -type f -executable -exec cp {} "$tmp/build/apps/" \;
find build/tests -maxdepth 1 -type f -executable \( -name 'test_*' -o -name 'fake_*' \) -exec cp {} "$tmp/build/tests/" \;
strip "$tmp"/build/apps/* "$tmp"/build/tests/*
# the static libraries scripts/device_python.sh links the Python module with, on the GPU machine's Python
for lib in solver/libspcg_solver.a kernels/libspcg_kernels.a sparse/libspcg_sparse.a; do
  mkdir -p "$tmp/build/$(dirname "$lib")" && cp "build/$lib" "$tmp/build/$lib" && strip --strip-debug "$tmp/build/$lib"
done
mkdir -p "$tmp/build/python-link/include"
[ -d /usr/include/pybind11 ] && cp -r /usr/include/pybind11 "$tmp/build/python-link/include/"
for a in libdeflate.a libz.a; do
  f=$(find /usr/lib /usr/local/lib -name "$a" 2>/dev/null | head -1)
  [ -n "$f" ] && cp "$f" "$tmp/build/python-link/"
done
[ -d ../shared/matrices ] && cp -r ../shared/matrices "$tmp/matrices"
rm -f .devdata/bundle.tgz .devdata/bundle.txz
tar cJf .devdata/bundle.txz -C "$tmp" .
rm -rf "$tmp"
ls -la .devdata/bundle.txz
