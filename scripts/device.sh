#!/usr/bin/env bash
# The one command for the GPU machine: the whole test suite (GPU tests included), compute-sanitizer memcheck on
# the kernel tests, and the benchmarks; logs and benchmark JSON go to OUTDIR, a summary table is printed last.
#   scripts/device.sh OUTDIR [tests|bench|all]
# Uses prebuilt binaries in build/ (build here with scripts/setup.sh; carry build/apps/spcg and build/tests/test_*).
# Matrices: SPCG_MATRIX_DIR, else ../shared/matrices, else .devdata/matrices.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/device.sh OUTDIR [tests|bench|all]}"
what="${2:-all}"
mkdir -p "$out"
if [ -z "${SPCG_MATRIX_DIR:-}" ]; then
  for d in ../shared/matrices .devdata/matrices; do [ -d "$d/spd" ] && export SPCG_MATRIX_DIR="$(cd "$d" && pwd)" && break; done
fi
summary=()
export SPCG_SOURCE_DIR="$(pwd)" SPCG_BINARY="$(pwd)/build/apps/spcg"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > "$out/device.txt" 2>&1 || true
if [ "$what" = tests ] || [ "$what" = all ]; then
  for bin in build/tests/test_*; do  # every suite there is (GPU tests included)
    [ -x "$bin" ] || continue
    t=$(basename "$bin")
    "$bin" --gtest_brief=1 > "$out/$t.log" 2>&1
    rc=$?
    summary+=("$t: rc=$rc $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$out/$t.log" | tr '\n' ' ')")
  done
  # memcheck on the kernel tests: synthetic edge cases for every kernel, plus the fused-dot test.
  compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_kernels --gtest_brief=1 \
    --gtest_filter='*empty*:*one_1x1*:*odd_97*:*dense_row*:*powerlaw*:*rect*:*zero_nnz*:*poisson3d_9*:*spmm_dia__stencil*:*spmm_dia_runs__stencil*:*__band_random*:*spmm_dia_runs__wide_band*:*file_nos6*:Registry.*:CsrStream.EveryShape*:PinnedUploader.*:BlockOps.*:Setup/DeviceSetupVsHost.*:DeviceSetup.*' \
    > "$out/memcheck_kernels.log" 2>&1
  rc=$?
  summary+=("memcheck test_kernels: rc=$rc $(grep -E 'ERROR SUMMARY' "$out/memcheck_kernels.log" | tail -1)")
  compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_solvers --gtest_brief=1 \
    --gtest_filter='*ZeroRight*:*MaxIter*:*RankDeficient*:*Jacobi*:*Persistent*:*WideBlocks*:*Stalls*:*IllConditioned*:*NearlyDependent*:*SmallDense*' > "$out/memcheck_solvers.log" 2>&1
  rc=$?
  summary+=("memcheck test_solvers: rc=$rc $(grep -E 'ERROR SUMMARY' "$out/memcheck_solvers.log" | tail -1)")
  compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_precond --gtest_brief=1 \
    --gtest_filter='*Aggregates*:*Galerkin*:*RowProduct*:*Coarsest*:*Chebyshev*:*BlockJacobi*:*Planted*:*AmgFp32Copy*' > "$out/memcheck_precond.log" 2>&1
  rc=$?
  summary+=("memcheck test_precond: rc=$rc $(grep -E 'ERROR SUMMARY' "$out/memcheck_precond.log" | tail -1)")
  # updates: the kept shapes (the fill pass alone, then the values alone) and the transposes' kept order
  compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_update --gtest_brief=1 \
    --gtest_filter='*Chain*' > "$out/memcheck_update.log" 2>&1
  rc=$?
  summary+=("memcheck test_update: rc=$rc $(grep -E 'ERROR SUMMARY' "$out/memcheck_update.log" | tail -1)")
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  md="$SPCG_MATRIX_DIR/spd"
  build/apps/spcg bench spmv --matrix-dir "$md" --output "$out/bench_spmv.json" > "$out/bench_spmv.txt" 2>&1
  summary+=("bench spmv: rc=$?")
  build/apps/spcg bench spmm --k 1,2,4,8,16,32 --output "$out/bench_spmm.json" > "$out/bench_spmm.txt" 2>&1
  summary+=("bench spmm: rc=$?")
  build/apps/spcg bench cg --matrix-dir "$md" --output "$out/bench_cg.json" > "$out/bench_cg.txt" 2>&1
  summary+=("bench cg: rc=$?")
  build/apps/spcg bench block-cg --k 16 --output "$out/bench_block_cg.json" > "$out/bench_block_cg.txt" 2>&1
  summary+=("bench block-cg: rc=$?")
fi
echo "== summary ($(cat "$out/device.txt" 2>/dev/null))"
for s in "${summary[@]}"; do echo "  $s"; done
