#!/usr/bin/env bash
# libFuzzer run over the Matrix Market reader (needs clang): seeds are the test inputs and inputs/. Every input
# is read on one thread and on three with tiny chunks; a difference aborts (tests/fuzz_matrix_market.cpp).
#   scripts/fuzz.sh [seconds]   (default 60)
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang)" >&2; exit 1; }
mkdir -p build/fuzz build/fuzz/corpus
deflate=()
[ -f /usr/include/libdeflate.h ] && deflate=(-DSPCG_HAVE_LIBDEFLATE -ldeflate)
clang++ -std=c++17 -g -O1 -fsanitize=fuzzer,address,undefined -I. -Isolver/include tests/fuzz_matrix_market.cpp \
  sparse/matrix_market.cpp sparse/mm_input.cpp sparse/mm_parse.cpp sparse/mm_build.cpp sparse/mm_write.cpp sparse/csr_matrix.cpp sparse/host_memory.cpp -lz "${deflate[@]}" -pthread \
  -o build/fuzz/fuzz_matrix_market
cp inputs/*.mtx build/fuzz/corpus/ 2>/dev/null || true
[ -d ../shared/matrices/odd ] && find ../shared/matrices -name '*.mtx' -size -200k -exec cp {} build/fuzz/corpus/ \;
build/fuzz/fuzz_matrix_market build/fuzz/corpus -max_total_time="$secs" -max_len=4096 -rss_limit_mb=2048 -print_final_stats=1
