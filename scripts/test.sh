#!/usr/bin/env bash
# Build if needed and run the whole test suite (GPU tests skip with the reason where there is no device).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure "$@"
