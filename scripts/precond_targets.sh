#!/usr/bin/env bash
# The runs behind issue #24's targets, each a `spcg solve` with its JSON report in OUTDIR (summarised by
# scripts/precond_summary.py): generated problems with none / jacobi / the preconditioners, 16 right-hand
# sides with block-cg and multi-cg, and every SPD file of the shared set with none / jacobi / amg / auto.
#   scripts/precond_targets.sh OUTDIR [generated|files|all] [extra spcg solve options...]
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/precond_targets.sh OUTDIR [generated|files|all]}"
what="${2:-all}"
shift 2 2>/dev/null || shift $#
extra=("$@")
mkdir -p "$out"
spcg="${SPCG_BINARY:-build/apps/spcg}"
md="${SPCG_MATRIX_DIR:-../shared/matrices}/spd"
# --timing phases: CUDA graphs on, no per-kernel events (what a user's solve runs)
run() {  # run NAME ARGS...
  local name="$1"; shift
  "$spcg" solve --timing phases --maxit 20000 --report-file "$out/$name.json" "$@" "${extra[@]}" > "$out/$name.txt" 2>&1
  echo "$name rc=$?"
}
if [ "$what" = generated ] || [ "$what" = all ]; then
  for spec in poisson3d:200 poisson2d:1024 jump3d:128 aniso3d:128 poisson3d:128; do
    tag=${spec/:/_}
    for p in none jacobi chebyshev block-jacobi amg auto; do
      run "gen_${tag}_cg_$p" --generate "$spec" --precond "$p"
    done
    run "gen_${tag}_cg_amg-plain" --generate "$spec" --precond amg --amg-prolongator plain
  done
  for s in block-cg multi-cg; do
    for p in jacobi amg; do
      run "rhs16_poisson3d_128_${s}_$p" --generate poisson3d:128 --solver "$s" --nrhs 16 --rhs random --precond "$p"
    done
  done
fi
if [ "$what" = files ] || [ "$what" = all ]; then
  for f in "$md"/*.mtx "$md"/*.mtx.gz; do
    [ -e "$f" ] || continue
    b=$(basename "$f"); b=${b%.gz}; b=${b%.mtx}
    for p in none jacobi amg auto; do
      run "file_${b}_$p" --matrix "$f" --precond "$p"
    done
  done
fi
