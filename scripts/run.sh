#!/usr/bin/env bash
# The main job: build if needed, then solve the built-in default system (inputs/fv1.mtx, Norris/fv1, an FEM
# Laplace problem) and verify the answer with Eigen. On a machine without a CUDA device spcg says so and runs
# the host reference solver. Extra arguments go to `spcg solve`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec build/apps/spcg solve --verify "$@"
