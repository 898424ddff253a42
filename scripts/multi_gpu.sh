#!/usr/bin/env bash
# The several-GPU measurements of issue #33 on a host with 4 GPUs: each case with 1, 2 and 4 GPUs, every binary
# given (before / after) alternated case by case, so every ratio comes from one run on one machine.
#   scripts/multi_gpu.sh OUTDIR BINARY [BINARY...]        (SPCG_MULTI_CASES=quick: the small cases only)
# Per run: the report's JSON (phases, ranks) and the whole process timed from outside, launcher included
# (wall_s in OUTDIR/runs.tsv: binary, case, gpus, rc, wall seconds, report file). One-GPU runs see every GPU of
# the host, as a user's process does; a binary that picks its device before CUDA starts (--device) starts as
# fast as on a one-GPU host, one that does not initialises all four.
set -uo pipefail
out="${1:?usage: scripts/multi_gpu.sh OUTDIR BINARY [BINARY...]}"
shift
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader > "$out/device.txt" 2>&1 || true
nvidia-smi topo -m > "$out/topology.txt" 2>&1 || true
printf 'binary\tcase\tgpus\trc\twall_s\treport\n' > "$out/runs.tsv"
matrix_dir="${SPCG_MATRIX_DIR:-.devdata/matrices}"
cases=(
  "p300-jacobi|--generate poisson3d:300 --precond jacobi --timing phases|1 2 4"
  "fv1-jacobi|--matrix $matrix_dir/spd/fv1.mtx --precond jacobi --timing phases|1 2 4"
  "jump48-block4|--generate jump3d:48 --solver block-cg --nrhs 4 --precond jacobi --timing phases|1 2 4"
  "p200-block16|--generate poisson3d:200 --solver block-cg --nrhs 16 --precond jacobi --timing phases|1 2 4"
)
if [ "${SPCG_MULTI_CASES:-}" != quick ]; then
  cases+=("p300-block16|--generate poisson3d:300 --solver block-cg --nrhs 16 --precond jacobi --timing phases|1 4")
  # Chebyshev's iterations on ranks against one GPU's (the issue: within 2 %), and auto's choice there
  cases+=("p300-cheb|--generate poisson3d:300 --precond chebyshev --timing phases|1 4")
  cases+=("jump256-cheb|--generate jump3d:256 --precond chebyshev --timing phases|1 4")
  cases+=("p300-auto|--generate poisson3d:300 --timing phases|4")
  # the largest: GPU bytes per row after setup (the rank table), and the whole process against one GPU
  cases+=("p600-jacobi|--generate poisson3d:600 --precond jacobi --timing phases|1 4")
fi
for c in "${cases[@]}"; do
  IFS='|' read -r name args gpus_list <<< "$c"
  for gpus in $gpus_list; do
    for bin in "$@"; do
      tag=$(basename "$(dirname "$bin")")
      report="$out/${tag}_${name}_g${gpus}.json"
      extra=""
      [ "$gpus" -gt 1 ] && extra="--gpus $gpus"
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086
      timeout 300 "$bin" solve $args $extra --report-file "$report" > "$out/${tag}_${name}_g${gpus}.log" 2>&1
      rc=$?
      t1=$(date +%s.%N)
      printf '%s\t%s\t%s\t%s\t%.3f\t%s\n' "$tag" "$name" "$gpus" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(basename "$report")" >> "$out/runs.tsv"
    done
  done
done
cat "$out/runs.tsv"
