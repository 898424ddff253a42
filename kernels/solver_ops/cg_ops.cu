// The fused CG steps (one recurrence, k recurrences of multi-cg, and PCG with a general preconditioner between
// them): every step one launch whose last block finishes the step's scalars on the device (or, on several GPUs,
// writes this rank's totals for the engine's sum over the ranks), so an iteration needs no host round trip.
// Work mapping and reductions: reductions.cuh.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_module.cuh"
#include "kernels/solver_ops/cg_ops.hpp"
#include "kernels/solver_ops/cg_status.cuh"
#include "kernels/solver_ops/reductions.cuh"

namespace spcg {
namespace {

// The column tails of the multi-cg steps, run by the last block of a fused kernel on one GPU, or by
// multi_cg_finish_kernel after the totals were summed over the ranks (several GPUs).
__device__ void start_column(CgScalars* c, double rr, double rz, bool keep_iteration = false) {
  c->rr = rr;
  c->rz = rz;
  if (!keep_iteration) c->iteration = 0;  // (a restart from the true residual goes on counting)
  c->status = kRunning;
  set_status(c, c->rr);
}

// alpha = rz / pq, and whether the column takes a step with it (running, p'Ap > 0, alpha finite).
__device__ bool column_step(const CgScalars& c, double* alpha) {
  const double a = c.rz / c.pq;
  const bool ok = !c.done && c.pq > 0 && isfinite(a);
  *alpha = ok ? a : 0.0;
  return ok;
}

// The general PCG's r'z: beta = rz_new / rz, or the column stops when r'M^-1 r <= 0 (M not positive definite).
__device__ void rz_column(CgScalars* c, double rz) {
  if (c->done) return;
  if (!(rz > 0) || !isfinite(rz)) {  // (an infinite r'z would make beta infinite, and p = z + beta 0 NaN)
    c->status = isfinite(rz) ? kPrecondNotPositive : kNonFinite;
    c->done = 1;
    return;
  }
  c->beta = rz / c->rz;
  c->rz = rz;
}

__device__ void update_column(CgScalars* c, bool stepped, double rr, double rz, bool keep_rz) {
  if (c->done) return;
  if (!stepped) {  // p'Ap <= 0 (not SPD) or NaN: stopped, never updated with it
    c->status = isfinite(c->pq) ? kBreakdown : kNonFinite;
    c->done = 1;
    return;
  }
  if (!keep_rz) {  // keep_rz: z = M^-1 r comes later (launch_pcg_rz)
    c->beta = rz / c->rz;
    c->rz = rz;
  }
  c->rr = rr;
  c->iteration += 1;
  set_status(c, c->rr);
}

__global__ void cg_start_kernel(int64_t n, const double* __restrict__ r, const double* __restrict__ dinv,
                                double* __restrict__ z, double* __restrict__ p, CgScalars* s, double* partials,
                                unsigned* counter, double* rank_sums, bool restart) {
  double v[2] = {0, 0};
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double ri = r[i], zi = dinv ? dinv[i] * ri : ri;
    if (dinv) z[i] = zi;
    if (p) p[i] = zi;
    v[0] += ri * ri;
    v[1] += ri * zi;
  }
  double out[2];
  if (multi_epilogue<2>(partials, counter, v, out) && threadIdx.x == 0) {
    if (rank_sums) rank_sums[0] = out[0], rank_sums[1] = out[1];
    else start_column(s, out[0], out[1], restart);
  }
}

__global__ void cg_update_xr_kernel(int64_t n, double* __restrict__ x, double* __restrict__ r, const double* __restrict__ p,
                                    const double* __restrict__ q, const double* __restrict__ dinv, double* __restrict__ z,
                                    CgScalars* s, double* partials, unsigned* counter, bool keep_rz,
                                    double* rank_sums) {
  if (*(volatile int*)&s->done) return;
  const double pq = s->pq, rz = s->rz;
  const double alpha = rz / pq;
  if (!(pq > 0) || !isfinite(alpha)) {  // p'Ap <= 0: not SPD (or NaN): stop, never update with it
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      s->status = isfinite(pq) ? kBreakdown : kNonFinite;
      s->done = 1;
    }
    return;
  }
  constexpr int U = VectorTuning::unroll;
  double v[2] = {0, 0};
  double xv[U], pv[U], rv[U], qv[U], dv[U];
  unrolled_grid_loop<U>(
      n, [&](int64_t i, int u) { xv[u] = x[i], pv[u] = p[i], rv[u] = r[i], qv[u] = q[i], dv[u] = dinv ? dinv[i] : 1.0; },
      [&](int64_t i, int u) {
        x[i] = fma(alpha, pv[u], xv[u]);
        const double ri = fma(-alpha, qv[u], rv[u]);
        r[i] = ri;
        const double zi = dv[u] * ri;
        if (dinv) z[i] = zi;
        v[0] += ri * ri;
        v[1] += ri * zi;
      });
  double out[2];
  if (multi_epilogue<2>(partials, counter, v, out) && threadIdx.x == 0) {
    if (rank_sums) rank_sums[0] = out[0], rank_sums[1] = out[1];
    else update_column(s, true, out[0], out[1], keep_rz);
  }
}

// r.z for one recurrence, then beta = rz_new / rz (or the status when r'M^-1 r <= 0). rank_sums: the total there.
__global__ void pcg_rz1_kernel(int64_t n, const double* __restrict__ r, const double* __restrict__ z, CgScalars* s,
                               double* partials, unsigned* counter, double* rank_sums) {
  if (*(volatile int*)&s->done) return;
  constexpr int U = VectorTuning::unroll;
  double v[1] = {0}, rv[U], zv[U];
  unrolled_grid_loop<U>(n, [&](int64_t i, int u) { rv[u] = r[i], zv[u] = z[i]; },
                        [&](int64_t, int u) { v[0] += rv[u] * zv[u]; });
  double out[1];
  if (multi_epilogue<1>(partials, counter, v, out) && threadIdx.x == 0) {
    if (rank_sums) rank_sums[0] = out[0];
    else rz_column(s, out[0]);
  }
}

__global__ void cg_update_p_kernel(int64_t n, double* __restrict__ p, const double* __restrict__ z, const CgScalars* s) {
  if (*(volatile const int*)&s->done) return;
  const double beta = s->beta;
  constexpr int U = VectorTuning::unroll;
  double pv[U], zv[U];
  unrolled_grid_loop<U>(n, [&](int64_t i, int u) { pv[u] = p[i], zv[u] = z[i]; },
                        [&](int64_t i, int u) { p[i] = fma(beta, pv[u], zv[u]); });
}

// p null: not written (the general PCG's start, whose first direction is z = M^-1 r itself). rank_sums: write the
// totals there instead of finishing the columns.
__global__ void multi_cg_start_kernel(int64_t n, int k, const double* __restrict__ r, const double* __restrict__ dinv,
                                      double* __restrict__ z, double* __restrict__ p, CgScalars* s, double* partials,
                                      unsigned* counter, double* rank_sums) {
  extern __shared__ double smem[];
  __shared__ double red[2 * VectorTuning::max_width];  // rr in [0, k), rz in [k, 2k)
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double vrr = 0, vrz = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const double ri = r[t], zi = dinv ? dinv[t / k] * ri : ri;
    if (dinv) z[t] = zi;
    if (p) p[t] = zi;
    vrr += ri * ri;
    vrz += ri * zi;
  }
  if (!two_column_totals(k, vrr, vrz, smem, partials, counter, red)) return;
  if (rank_sums) {
    if (threadIdx.x < 2 * k) rank_sums[threadIdx.x] = red[threadIdx.x];
  } else if (threadIdx.x < k) {
    start_column(s + threadIdx.x, red[threadIdx.x], red[k + threadIdx.x]);
  }
  if (threadIdx.x == 0) *counter = 0;
}

__global__ void multi_cg_pq_kernel(int64_t n, int k, const double* __restrict__ p, const double* __restrict__ q,
                                   CgScalars* s, double* partials, unsigned* counter, double* rank_sums) {
  extern __shared__ double smem[];
  __shared__ double out[VectorTuning::max_width];
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double v = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) v += p[t] * q[t];
  smem[threadIdx.x] = v;
  if (column_epilogue<VectorTuning::max_width>(partials, counter, k, smem, out) && threadIdx.x < k) {
    if (rank_sums) rank_sums[threadIdx.x] = out[threadIdx.x];
    else s[threadIdx.x].pq = out[threadIdx.x];
  }
}

__global__ void multi_cg_update_xr_kernel(int64_t n, int k, double* __restrict__ x, double* __restrict__ r,
                                          const double* __restrict__ p, const double* __restrict__ q,
                                          const double* __restrict__ dinv, double* __restrict__ z, CgScalars* s,
                                          double* partials, unsigned* counter, bool keep_rz, double* rank_sums) {
  extern __shared__ double smem[];
  __shared__ double alpha[VectorTuning::max_width];
  __shared__ int active[VectorTuning::max_width];
  if (threadIdx.x < k) active[threadIdx.x] = column_step(s[threadIdx.x], &alpha[threadIdx.x]);
  __syncthreads();
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double vrr = 0, vrz = 0;
  const int col = threadIdx.x % k;  // fixed per thread: stride is a multiple of k
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    if (!active[col]) continue;  // converged / broken-down columns are frozen
    const double a = alpha[col];
    x[t] = fma(a, p[t], x[t]);
    const double ri = fma(-a, q[t], r[t]);
    r[t] = ri;
    const double zi = dinv ? dinv[t / k] * ri : ri;
    if (dinv) z[t] = zi;
    vrr += ri * ri;
    vrz += ri * zi;
  }
  __shared__ double red[2 * VectorTuning::max_width];  // rr in [0, k), rz in [k, 2k)
  if (!two_column_totals(k, vrr, vrz, smem, partials, counter, red)) return;
  if (rank_sums) {
    if (threadIdx.x < 2 * k) rank_sums[threadIdx.x] = red[threadIdx.x];
  } else if (threadIdx.x < k) {
    update_column(s + threadIdx.x, active[threadIdx.x], red[threadIdx.x], red[k + threadIdx.x], keep_rz);
  }
  if (threadIdx.x == 0) *counter = 0;
}

// The columns' tails of one step from totals summed over the ranks (sums: pq or the general PCG's rz in [0, k),
// or rr in [0, k) and rz in [k, 2k)), as the step's last block finishes them on one GPU. The scalars are those
// every rank holds, so every rank decides alike.
__global__ void multi_cg_finish_kernel(MultiCgStep step, int k, const double* __restrict__ sums, CgScalars* s) {
  const int j = threadIdx.x;
  if (j >= k) return;
  CgScalars* c = s + j;
  double alpha;
  switch (step) {
    case MultiCgStep::start: start_column(c, sums[j], sums[k + j]); break;
    case MultiCgStep::restart: start_column(c, sums[j], sums[k + j], /*keep_iteration=*/true); break;
    case MultiCgStep::pq: if (!c->done) c->pq = sums[j]; break;
    case MultiCgStep::update_xr: update_column(c, column_step(*c, &alpha), sums[j], sums[k + j], false); break;
    case MultiCgStep::pcg_update_xr: update_column(c, column_step(*c, &alpha), sums[j], sums[k + j], true); break;
    case MultiCgStep::pcg_rz: rz_column(c, sums[j]); break;
  }
}

__global__ void pcg_rz_kernel(int64_t n, int k, const double* __restrict__ r, const double* __restrict__ z, CgScalars* s,
                              double* partials, unsigned* counter, double* rank_sums) {
  extern __shared__ double smem[];
  __shared__ double out[VectorTuning::max_width];
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double v = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) v += r[t] * z[t];
  smem[threadIdx.x] = v;
  if (!column_epilogue<VectorTuning::max_width>(partials, counter, k, smem, out) || threadIdx.x >= k) return;
  if (rank_sums) rank_sums[threadIdx.x] = out[threadIdx.x];
  else rz_column(s + threadIdx.x, out[threadIdx.x]);
}

__global__ void multi_cg_update_p_kernel(int64_t n, int k, double* __restrict__ p, const double* __restrict__ z,
                                         const CgScalars* s) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const CgScalars& c = s[t % k];
    if (!c.done) p[t] = fma(c.beta, p[t], z[t]);
  }
}

}  // namespace

void launch_cg_start(int64_t n, const double* r, const double* dinv, double* z, double* p, CgScalars* sc,
                     const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums, bool restart) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  cg_start_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(n, r, dinv, z, p, sc, const_cast<double*>(ws.partials.data()),
                                                                const_cast<unsigned*>(ws.counter.data()), rank_sums, restart);
  CHECK_LAUNCH("cg-start");
}

void launch_cg_update_xr(int64_t n, double* x, double* r, const double* p, const double* q, const double* dinv, double* z,
                         CgScalars* sc, const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  cg_update_xr_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(
      n, x, r, p, q, dinv, z, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), false,
      rank_sums);
  CHECK_LAUNCH("update-xr");
}

void launch_cg_update_p(int64_t n, double* p, const double* z, const CgScalars* sc, cudaStream_t stream) {
  cg_update_p_kernel<<<reduction_blocks(std::max<int64_t>(n, 1)), VectorTuning::threads, 0, stream>>>(n, p, z, sc);
  CHECK_LAUNCH("update-p");
}

void launch_multi_cg_start(int64_t n, int k, const double* r, const double* dinv, double* z, double* p, CgScalars* sc,
                           const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_start_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, r, dinv, z, p, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()),
      rank_sums);
  CHECK_LAUNCH("multi-cg-start");
}

void launch_multi_cg_pq(int64_t n, int k, const double* p, const double* q, CgScalars* sc, const ReductionWorkspace& ws,
                        cudaStream_t stream, double* rank_sums) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_pq_kernel<<<blocks, threads, threads * sizeof(double), stream>>>(
      n, k, p, q, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), rank_sums);
  CHECK_LAUNCH("multi-cg-pq");
}

void launch_multi_cg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q,
                               const double* dinv, double* z, CgScalars* sc, const ReductionWorkspace& ws,
                               cudaStream_t stream, double* rank_sums) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_update_xr_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, x, r, p, q, dinv, z, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()),
      false, rank_sums);
  CHECK_LAUNCH("multi-cg-update-xr");
}

void launch_multi_cg_finish(MultiCgStep step, int k, const double* sums, CgScalars* sc, cudaStream_t stream) {
  multi_cg_finish_kernel<<<1, std::max(32, k), 0, stream>>>(step, k, sums, sc);
  CHECK_LAUNCH("multi-cg-finish");
}

void launch_pcg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q, CgScalars* sc,
                          const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums) {
  if (k == 1) {  // the one-vector kernel: its final reduction runs on the whole last block
    const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
    cg_update_xr_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(
        n, x, r, p, q, nullptr, nullptr, sc, const_cast<double*>(ws.partials.data()),
        const_cast<unsigned*>(ws.counter.data()), true, rank_sums);
    CHECK_LAUNCH("pcg-update-xr");
    return;
  }
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_update_xr_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, x, r, p, q, nullptr, nullptr, sc, const_cast<double*>(ws.partials.data()),
      const_cast<unsigned*>(ws.counter.data()), true, rank_sums);
  CHECK_LAUNCH("pcg-update-xr");
}

void launch_pcg_rz(int64_t n, int k, const double* r, const double* z, CgScalars* sc, const ReductionWorkspace& ws,
                   cudaStream_t stream, double* rank_sums) {
  if (k == 1) {
    const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
    pcg_rz1_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(n, r, z, sc, const_cast<double*>(ws.partials.data()),
                                                                 const_cast<unsigned*>(ws.counter.data()), rank_sums);
    CHECK_LAUNCH("pcg-rz");
    return;
  }
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  pcg_rz_kernel<<<blocks, threads, threads * sizeof(double), stream>>>(
      n, k, r, z, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), rank_sums);
  CHECK_LAUNCH("pcg-rz");
}

void launch_multi_cg_update_p(int64_t n, int k, double* p, const double* z, const CgScalars* sc, cudaStream_t stream) {
  const int threads = block_threads(k);
  multi_cg_update_p_kernel<<<block_grid(n, k), threads, 0, stream>>>(n, k, p, z, sc);
  CHECK_LAUNCH("multi-cg-update-p");
}

}  // namespace spcg

SPCG_KERNEL_MODULE(cg_ops)
