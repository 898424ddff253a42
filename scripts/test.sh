#!/usr/bin/env bash
# Build if needed and run the whole test suite (GPU tests skip with the reason where there is no device).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
(cd build && ctest --output-on-failure "$@")
# The Python module against SciPy, on Debian's interpreter (the one the module is built for). pytest's exit code
# 5 (no tests collected) is a failure here, as is a module that was not built.
[ -d build/python/spcg ] || { echo "spcg test: build/python/spcg is missing (the Python module was not built)" >&2; exit 1; }
rc=0
PYTHONPATH="$PWD/build/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -m pytest -q -p no:cacheprovider python/tests || rc=$?
if [ "$rc" -eq 5 ]; then echo "spcg test: pytest collected no tests in python/tests" >&2; exit 1; fi
exit "$rc"
