#!/usr/bin/env bash
# Line coverage of the host code (sparse/, apps/, solver/, the host .cpp files of kernels/) by the test suites.
# Not part of CI's test command (a second, unoptimised build): run it by hand.
#
#   scripts/coverage.sh cpu                 build build-cov (--coverage, -O0), run the whole suite here (on a
#                                           machine without a GPU: the CPU suite, as CI runs it) and print
#                                           per-folder line coverage; JSON + text in out/coverage/cpu.*
#   scripts/coverage.sh pack                pack build-cov's binaries into .devdata/coverage.tgz for a GPU machine
#   scripts/coverage.sh device OUTDIR       on the GPU machine, in a copy of this checkout with the pack unpacked
#                                           (tar xzf .devdata/coverage.tgz): run every test binary with
#                                           GCOV_PREFIX, pack the counts into OUTDIR/gcda.tgz
#   scripts/coverage.sh merge GCDA.tgz      here again: the device's counts into build-cov, per-folder coverage
#                                           of the CPU and GPU suites together; out/coverage/all.*
#
# The counts (.gcda) are written where the objects were built (build-cov/..., absolute paths of this
# checkout); on the device GCOV_PREFIX puts them under a scratch folder instead, and merge copies them back
# beside the .gcno notes they belong to. Debian 12's GCC 12 writes gcov output that gcovr 5.2 half-parses:
# --gcov-ignore-parse-errors.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
what="${1:?usage: scripts/coverage.sh cpu|pack|device OUTDIR|merge GCDA.tgz}"
bdir="$root/build-cov"
out="$root/out/coverage"

report() {  # $1: name of the report (cpu / all)
  mkdir -p "$out"
  command -v gcovr >/dev/null || { apt-get install -y -qq gcovr >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq gcovr >/dev/null); }
  # the coverage build's folder as the search path: other build folders of the checkout hold counts of their own
  local common=(-r "$root" "$bdir" --object-directory "$bdir" --gcov-ignore-parse-errors -e "$root/tests/" -e "$root/build.*")
  gcovr "${common[@]}" --json "$out/$1.json" >/dev/null 2>"$out/$1.gcovr-warnings.log"
  {
    echo "line coverage ($1 suite$( [ "$1" = all ] && echo 's, CPU + GPU' ), $(date -u +%F), commit $(git rev-parse --short HEAD))"
    for f in 'sparse/' 'apps/' 'solver/' 'kernels/.*\.cpp$'; do
      local line
      line=$(gcovr --add-tracefile "$out/$1.json" -r "$root" -f "$root/$f" -s 2>/dev/null | grep '^lines:' || echo "lines: n/a")
      printf '  %-22s %s\n' "$f" "$line"
    done
  } | tee "$out/$1.txt"
}

case "$what" in
  cpu)
    if [ ! -f "$bdir/build.ninja" ]; then
      cmake -S . -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Coverage -DCMAKE_CXX_FLAGS_COVERAGE="-O0 -g --coverage" \
        -DCMAKE_CUDA_FLAGS_COVERAGE="-O2" -DCMAKE_EXE_LINKER_FLAGS_COVERAGE="--coverage" \
        -DCMAKE_CUDA_ARCHITECTURES="${SPCG_CUDA_ARCHITECTURES:-90}" \
        $(command -v ccache >/dev/null && echo -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache) >/dev/null
    fi
    cmake --build "$bdir" -j "$(nproc)"
    find "$bdir" -name '*.gcda' -delete
    mkdir -p "$root/out"
    (cd "$bdir" && ctest -j "$(nproc)" -E package.consumer --output-on-failure > "$root/out/coverage-ctest.log" 2>&1) ||
      { grep -E "tests passed|tests failed|Failed" "$root/out/coverage-ctest.log"; exit 1; }
    grep -E "tests passed|tests failed" "$root/out/coverage-ctest.log"
    report cpu
    ;;
  pack)
    tmp=$(mktemp -d)
    mkdir -p "$tmp/build-cov/apps" "$tmp/build-cov/tests" .devdata
    find "$bdir/apps" -maxdepth 1 -type f -executable -exec cp {} "$tmp/build-cov/apps/" \;
    find "$bdir/tests" -maxdepth 1 -type f -executable -name 'test_*' -exec cp {} "$tmp/build-cov/tests/" \;
    find "$bdir/tests" -maxdepth 1 -type f -executable -name 'fake_*' -exec cp {} "$tmp/build-cov/tests/" \; 2>/dev/null || true
    strip "$tmp"/build-cov/apps/* "$tmp"/build-cov/tests/*  # the counters' file names are data, not symbols
    echo "$bdir" > "$tmp/build-cov/origin"
    tar czf .devdata/coverage.tgz -C "$tmp" .
    rm -rf "$tmp"
    ls -la .devdata/coverage.tgz
    ;;
  device)
    dest="${2:?usage: scripts/coverage.sh device OUTDIR}"
    mkdir -p "$dest"
    origin=$(cat build-cov/origin)
    export GCOV_PREFIX=/tmp/spcg-gcda GCOV_PREFIX_STRIP=0 SPCG_SOURCE_DIR="$root" SPCG_BINARY="$root/build-cov/apps/spcg"
    rm -rf "$GCOV_PREFIX"
    # SPCG_COVERAGE_TESTS: the binaries to run (default all); SPCG_COVERAGE_FILTER: a gtest filter for them
    # (the instrumented test_kernels takes ~8 min whole on an H200: a run may take the suites in two calls,
    # whose counts merge adds up)
    for t in ${SPCG_COVERAGE_TESTS:-build-cov/tests/test_*}; do
      "$t" --gtest_brief=1 --gtest_filter="${SPCG_COVERAGE_FILTER:-*}" > "$dest/coverage_$(basename "$t").log" 2>&1
      echo "$(basename "$t"): rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$dest/coverage_$(basename "$t").log" | tr '\n' ' ')"
    done
    # the CLI's own paths on the GPU: a few solves as a user runs them
    for args in "solve --generate poisson3d:24 --verify" "solve --generate poisson2d:64 --precond amg --verify" \
                "solve --generate jump3d:10 --solver block-cg --nrhs 4 --precond jacobi --verify" \
                "solve --generate poisson2d:40 --solver multi-cg --nrhs 3 --timing kernels --verify" \
                "solve --generate poisson2d:100 --precond auto" "bench spmv --matrices poisson2d:64 --runs 3" \
                "bench cg --matrices poisson2d:64 --runs 2"; do
      # shellcheck disable=SC2086
      build-cov/apps/spcg $args > /dev/null 2>&1; echo "spcg $args: rc=$?"
    done
    (cd "$GCOV_PREFIX$origin/.." && tar czf "$dest/gcda.tgz" "$(basename "$origin")")
    ls -la "$dest/gcda.tgz"
    ;;
  merge)
    shift
    [ $# -ge 1 ] || { echo "usage: scripts/coverage.sh merge GCDA.tgz [GCDA.tgz ...]" >&2; exit 2; }
    # each device run's counts to a tracefile of its own, then their sum (gcovr adds the counts)
    mkdir -p "$out"
    traces=()
    i=0
    for tgz in "$@"; do
      tmp=$(mktemp -d)
      tar xzf "$tgz" -C "$tmp"
      find "$bdir" -name '*.gcda' -delete
      (cd "$tmp/build-cov" && find . -name '*.gcda' -exec cp --parents {} "$bdir/" \;)
      rm -rf "$tmp"
      gcovr -r "$root" "$bdir" --object-directory "$bdir" --gcov-ignore-parse-errors -e "$root/tests/" -e "$root/build.*" \
        --json "$out/device-$i.json" >/dev/null 2>>"$out/all.gcovr-warnings.log"
      traces+=(--add-tracefile "$out/device-$i.json")
      i=$((i + 1))
    done
    gcovr "${traces[@]}" -r "$root" --json "$out/all.json" >/dev/null 2>>"$out/all.gcovr-warnings.log"
    {
      echo "line coverage (all suites, CPU + GPU, $(date -u +%F), commit $(git rev-parse --short HEAD))"
      for f in 'sparse/' 'apps/' 'solver/' 'kernels/.*\.cpp$'; do
        line=$(gcovr --add-tracefile "$out/all.json" -r "$root" -f "$root/$f" -s 2>/dev/null | grep '^lines:' || echo "lines: n/a")
        printf '  %-22s %s\n' "$f" "$line"
      done
    } | tee "$out/all.txt"
    ;;
  *) echo "usage: scripts/coverage.sh cpu|pack|device OUTDIR|merge GCDA.tgz" >&2; exit 2 ;;
esac
