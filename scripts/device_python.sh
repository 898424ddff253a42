#!/usr/bin/env bash
# The Python module on a GPU machine, for that machine's python3 (which holds CuPy and PyTorch): module.cpp
# compiled there and linked with the static libraries built here (carried under build/: spcg_solver,
# spcg_kernels, spcg_sparse, and libdeflate.a / libz.a under build/python-link/), then python/tests with the
# device tests, then python/bench/bench_python.py's rows.
#   scripts/device_python.sh OUTDIR [tests|bench|all]        (PYTHON: the interpreter, default python3)
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/device_python.sh OUTDIR [tests|bench|all]}"
what="${2:-all}"
mkdir -p "$out"
py="${PYTHON:-python3}"
export NCCL_NVLS_ENABLE=0
dir=build-device-python/python
mkdir -p "$dir/spcg"
cp python/spcg/*.py "$dir/spcg/"
suffix=$("$py" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")
cuda=$(dirname "$(dirname "$(command -v nvcc)")")
# pybind11's headers: the interpreter's own package, else the ones carried in build/python-link/include
includes=$("$py" -m pybind11 --includes 2>/dev/null) ||
  includes="-I$("$py" -c "import sysconfig; print(sysconfig.get_paths()['include'])") -Ibuild/python-link/include"
# shellcheck disable=SC2086
g++ -O2 -std=c++17 -shared -fPIC $includes -I. -Isolver/include -DSPCG_PROJECT_VERSION=\"device\" \
  python/src/module.cpp -o "$dir/spcg/_spcg$suffix" \
  -Wl,--start-group build/solver/libspcg_solver.a build/kernels/libspcg_kernels.a build/sparse/libspcg_sparse.a \
  build/python-link/libdeflate.a build/python-link/libz.a -Wl,--end-group \
  -L"$cuda/lib64" -L"$cuda/lib64/stubs" -lcudart_static -ldl -lrt -lpthread > "$out/build.log" 2>&1
echo "module build: rc=$? ($("$py" --version 2>&1))" | tee -a "$out/summary.txt"
export PYTHONPATH="$PWD/$dir"
if [ "$what" = tests ] || [ "$what" = all ]; then
  "$py" -m pytest -q -rs python/tests > "$out/pytest.log" 2>&1
  echo "pytest: rc=$? $(tail -1 "$out/pytest.log")" | tee -a "$out/summary.txt"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  md="${SPCG_MATRIX_DIR:-.devdata/matrices}/spd"
  # every SPD file's cg row (60 s a comparison at most), then the 147 MB read (once each: SciPy's takes long)
  timeout "${SPCG_BENCH_S:-300}" "$py" python/bench/bench_python.py --matrices "$md" --only import,fv1,solver,cg --runs 5 \
    --timeout 60 --out "$out/bench_python.json" > "$out/bench_python.txt" 2>&1
  echo "bench_python: rc=$?" | tee -a "$out/summary.txt"
  timeout "${SPCG_MMREAD_S:-150}" "$py" python/bench/bench_python.py --only mmread --mmread-runs 1 \
    --out "$out/bench_mmread.json" > "$out/bench_mmread.txt" 2>&1
  echo "bench_python mmread: rc=$?" | tee -a "$out/summary.txt"
fi
