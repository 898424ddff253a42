#!/usr/bin/env bash
# Where a several-GPU job's fixed costs go (issue #33): the same small solve (fv1, 26 iterations) and
# poisson3d:300 on N GPUs under NCCL settings that change what its start and first connections do, each run's
# report phases kept (start: NCCL id, CUDA, NCCL init, the sums' connection; the setup's connect phase).
#   scripts/nccl_start_probe.sh OUTDIR BINARY [GPUS]      (GPUS default 4)
set -uo pipefail
out="${1:?usage: scripts/nccl_start_probe.sh OUTDIR BINARY [GPUS]}"
bin="$2"
gpus="${3:-4}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
matrix_dir="${SPCG_MATRIX_DIR:-.devdata/matrices}"
variants=("default|" "channels2|NCCL_MAX_NCHANNELS=2" "channels1|NCCL_MAX_NCHANNELS=1" "simple|NCCL_PROTO=Simple"
          "nocumem|NCCL_CUMEM_ENABLE=0" "eager|NCCL_RUNTIME_CONNECT=0" "ll1|NCCL_MAX_NCHANNELS=1 NCCL_PROTO=LL")
printf 'variant\tcase\trc\twall_s\treport\n' > "$out/runs.tsv"
for v in "${variants[@]}"; do
  IFS='|' read -r name vars <<< "$v"
  for c in "fv1|--matrix $matrix_dir/spd/fv1.mtx --precond jacobi" "p300|--generate poisson3d:300 --precond jacobi"; do
    IFS='|' read -r cname args <<< "$c"
    report="$out/${name}_${cname}.json"
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    env $vars timeout 120 "$bin" solve $args --gpus "$gpus" --timing phases --report-file "$report" > "$out/${name}_${cname}.log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$cname" "$rc" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" "$(basename "$report")" >> "$out/runs.tsv"
  done
done
# NCCL's own account of its init (its "Init timings" line) for the default
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV "$bin" solve --matrix "$matrix_dir/spd/fv1.mtx" --precond jacobi --gpus "$gpus" \
  > "$out/nccl_debug.log" 2>&1
cat "$out/runs.tsv"
