// Vector kernels of the solvers. Work mapping: grid-stride loops over a fixed grid of reduction_blocks(n)
// blocks, so per-block partial sums have a fixed count and order; the last block to finish combines them in
// index order (deterministic, one launch per fused step). Bytes per call are in the solver's report.
#include <algorithm>
#include <cmath>

#include "device_utils.cuh"
#include "vector_ops.hpp"

namespace spcg {
namespace {

struct VectorTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;
  static constexpr int max_width = 128;  // column sums per block (multi-cg k)
  static constexpr int unroll = 4;       // CG updates: independent rows per thread per step (loads in flight)
};

// Grid-stride loop over [0, n) with U elements per thread per step: load(i, u) for all of them first, then
// use(i, u), so U independent rows' loads are in flight per thread (what the CG updates need to stream).
template <int U, class Load, class Use>
__device__ __forceinline__ void unrolled_grid_loop(int64_t n, Load&& load, Use&& use) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < n; base += U * stride) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < n) load(base + u * stride, u);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < n) use(base + u * stride, u);
  }
}

__global__ void scale_kernel(double beta, double* __restrict__ y, size_t count) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x)
    y[i] = beta == 0.0 ? 0.0 : beta * y[i];
}

// Block sums of W values (thread 0 gets them), then the last block combines partials in order into out[0..W).
template <int W>
__device__ bool multi_epilogue(double* partials, unsigned* counter, double (&v)[W], double* out) {
#pragma unroll
  for (int w = 0; w < W; ++w) {
    const double s = dev::block_sum(v[w]);
    if (threadIdx.x == 0) partials[blockIdx.x * W + w] = s;
  }
  if (!dev::last_block_arrives(counter)) return false;
#pragma unroll
  for (int w = 0; w < W; ++w) {
    double s = 0;
    for (unsigned b0 = threadIdx.x; b0 < gridDim.x; b0 += 4 * blockDim.x) {  // 4 loads in flight per pass
      double v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const unsigned b = b0 + u * blockDim.x;
        v[u] = b < gridDim.x ? __ldcg(partials + b * W + w) : 0.0;
      }
      s += (v[0] + v[1]) + (v[2] + v[3]);
    }
    s = dev::block_sum(s);
    if (threadIdx.x == 0) out[w] = s;
  }
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  return true;
}

__global__ void dot_kernel(const double* __restrict__ a, const double* __restrict__ b, int64_t n, DotSink sink) {
  constexpr int U = VectorTuning::unroll;
  double v = 0, av[U], bv[U];
  unrolled_grid_loop<U>(n, [&](int64_t i, int u) { av[u] = a[i], bv[u] = b[i]; },
                        [&](int64_t, int u) { v += av[u] * bv[u]; });
  dev::dot_epilogue(sink, v);
}

// Lanczos on S = D^-1/2 A D^-1/2 (solver/spectrum.cpp), three kernels a step around w = A t, the scalars on the
// device (coeffs[2j] = alpha_j, coeffs[2j + 1] = beta_{j+1}^2) so that the steps run without a host round trip.
// w = d .* w (d null: unchanged); coeffs[2j] = w . u.
__global__ void lanczos_scale_dot_kernel(int64_t n, double* __restrict__ w, const double* __restrict__ u,
                                         const double* __restrict__ d, DotSink sink) {
  double v = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double wi = d ? d[i] * w[i] : w[i];
    w[i] = wi;
    v += wi * u[i];
  }
  dev::dot_epilogue(sink, v);
}
// w -= alpha_j u + beta_j u_prev; coeffs[2j + 1] = w . w.
__global__ void lanczos_orthogonalize_kernel(int64_t n, double* __restrict__ w, const double* __restrict__ u,
                                             const double* __restrict__ u_prev, const double* __restrict__ coeffs, int j,
                                             DotSink sink) {
  const double alpha = coeffs[2 * j], beta = j > 0 ? sqrt(coeffs[2 * j - 1]) : 0.0;
  double v = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double wi = w[i] - alpha * u[i] - beta * u_prev[i];
    w[i] = wi;
    v += wi * wi;
  }
  dev::dot_epilogue(sink, v);
}
// u_next = w / beta_{j+1}; t = d .* u_next (the next step's operand; d null: t = u_next).
__global__ void lanczos_next_kernel(int64_t n, const double* __restrict__ w, const double* __restrict__ d,
                                    const double* __restrict__ coeffs, int j, double* __restrict__ u_next,
                                    double* __restrict__ t) {
  const double inv_beta = 1.0 / sqrt(coeffs[2 * j + 1]);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double ui = w[i] * inv_beta;
    u_next[i] = ui;
    t[i] = d ? d[i] * ui : ui;
  }
}

// out[i] = sum over r of inputs[r][i], in rank order (the in-process communicator's allreduce).
__global__ void sum_over_ranks_kernel(const double* const* __restrict__ inputs, int ranks, size_t count,
                                      double* __restrict__ out) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    double s = inputs[0][i];
    for (int r = 1; r < ranks; ++r) s += inputs[r][i];
    out[i] = s;
  }
}

// out[i] = x[rows[i]] (the distributed operator's send buffer).
__global__ void gather_kernel(const int32_t* __restrict__ rows, int64_t count, int k, const double* __restrict__ x,
                              double* __restrict__ out) {
  const int64_t total = count * k;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x)
    out[t] = x[int64_t{rows[t / k]} * k + t % k];
}

__device__ void set_status(CgScalars* s, double rr) {
  if (s->history && s->iteration < s->history_capacity) s->history[s->iteration] = rr;
  if (!isfinite(rr)) s->status = kNonFinite;
  else if (rr <= s->tol2) s->status = kConverged;
  else if (s->iteration >= s->max_iterations) s->status = kMaxIterations;
  s->done = s->status != kRunning;
}

// The column tails of the multi-cg steps, run by the last block of a fused kernel on one GPU, or by
// multi_cg_finish_kernel after the totals were summed over the ranks (several GPUs).
__device__ void start_column(CgScalars* c, double rr, double rz, bool z_given) {
  c->rr = rr;
  c->rz = rz;
  c->iteration = 0;
  c->status = kRunning;
  set_status(c, c->rr);
  if (z_given && !c->done && !(c->rz > 0)) {
    c->status = isfinite(c->rz) ? kPrecondNotPositive : kNonFinite;
    c->done = 1;
  }
}

// alpha = rz / pq, and whether the column takes a step with it (running, p'Ap > 0, alpha finite).
__device__ bool column_step(const CgScalars& c, double* alpha) {
  const double a = c.rz / c.pq;
  const bool ok = !c.done && c.pq > 0 && isfinite(a);
  *alpha = ok ? a : 0.0;
  return ok;
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
                                unsigned* counter, double* rank_sums) {
  double v[2] = {0, 0};
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double ri = r[i], zi = dinv ? dinv[i] * ri : ri;
    if (dinv) z[i] = zi;
    p[i] = zi;
    v[0] += ri * ri;
    v[1] += ri * zi;
  }
  double out[2];
  if (multi_epilogue<2>(partials, counter, v, out) && threadIdx.x == 0) {
    if (rank_sums) rank_sums[0] = out[0], rank_sums[1] = out[1];
    else start_column(s, out[0], out[1], false);
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

// r.z for one recurrence, then beta = rz_new / rz (or the status when r'M^-1 r <= 0).
__global__ void pcg_rz1_kernel(int64_t n, const double* __restrict__ r, const double* __restrict__ z, CgScalars* s,
                               double* partials, unsigned* counter) {
  if (*(volatile int*)&s->done) return;
  constexpr int U = VectorTuning::unroll;
  double v[1] = {0}, rv[U], zv[U];
  unrolled_grid_loop<U>(n, [&](int64_t i, int u) { rv[u] = r[i], zv[u] = z[i]; },
                        [&](int64_t, int u) { v[0] += rv[u] * zv[u]; });
  double out[1];
  if (multi_epilogue<1>(partials, counter, v, out) && threadIdx.x == 0) {
    if (!(out[0] > 0)) {  // r' M^-1 r <= 0 for r != 0: M is not positive definite
      s->status = isfinite(out[0]) ? kPrecondNotPositive : kNonFinite;
      s->done = 1;
      return;
    }
    s->beta = out[0] / s->rz;
    s->rz = out[0];
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

// ---- block (multi-cg) forms: thread t of a row-stride loop handles entry (i, j) = (t / k, t % k). ----
// Column sums: each block accumulates k partial sums in shared memory (atomic-free: one owner per column slot).
template <int MaxK>
__device__ bool column_epilogue(double* partials, unsigned* counter, int k, double* smem, double* out) {
  // smem holds blockDim.x values; thread t contributed to column t % k (blockDim.x is a multiple of k).
  __syncthreads();
  if (threadIdx.x < k) {
    double sum = 0;
    for (int t = threadIdx.x; t < blockDim.x; t += k) sum += smem[t];
    partials[int64_t{blockIdx.x} * k + threadIdx.x] = sum;
  }
  if (!dev::last_block_arrives(counter)) return false;
  if (threadIdx.x < k) {
    double sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(partials + int64_t{b} * k + threadIdx.x);
    out[threadIdx.x] = sum;
  }
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  return true;
}

// Threads per block for the block kernels: a multiple of k, at most 1024 (k <= 128 -> >= 128 threads).
inline int block_threads(int k) { return std::max(1, 1024 / k) * k; }

__global__ void column_dots_kernel(int64_t n, int k, const double* __restrict__ a, const double* __restrict__ b,
                                   double* partials, unsigned* counter, double* out) {
  extern __shared__ double smem[];
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double v = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) v += a[t] * b[t];
  smem[threadIdx.x] = v;
  column_epilogue<VectorTuning::max_width>(partials, counter, k, smem, out);
}

// Per-column sums of two values per thread (thread t belongs to column t % k; blockDim.x is a multiple of k):
// block partials go to partials[block][2k], and the last block to arrive writes the grid totals to
// red[0..k) (first value) and red[k..2k) (second), in block order. Returns true in the last block only; the
// caller resets *counter when done with it.
__device__ bool two_column_totals(int k, double v1, double v2, double* smem, double* partials, unsigned* counter,
                                  double* red) {
  double* s1 = smem;
  double* s2 = smem + blockDim.x;
  s1[threadIdx.x] = v1;
  s2[threadIdx.x] = v2;
  __syncthreads();
  if (threadIdx.x < 2 * k) {
    const double* src = threadIdx.x < k ? s1 : s2;
    double sum = 0;
    for (int t = threadIdx.x % k; t < blockDim.x; t += k) sum += src[t];
    partials[int64_t{blockIdx.x} * 2 * k + threadIdx.x] = sum;
  }
  if (!dev::last_block_arrives(counter)) return false;
  if (threadIdx.x < 2 * k) {
    double sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(partials + int64_t{b} * 2 * k + threadIdx.x);
    red[threadIdx.x] = sum;
  }
  __syncthreads();
  return true;
}

// z_given: z = M^-1 r was applied by the caller (general preconditioner): read, not formed, and a column whose
// r'z <= 0 stops (M not positive definite). rank_sums: write the totals there instead of finishing the columns.
__global__ void multi_cg_start_kernel(int64_t n, int k, const double* __restrict__ r, const double* __restrict__ dinv,
                                      double* __restrict__ z, double* __restrict__ p, CgScalars* s, double* partials,
                                      unsigned* counter, bool z_given, double* rank_sums) {
  extern __shared__ double smem[];
  __shared__ double red[2 * VectorTuning::max_width];  // rr in [0, k), rz in [k, 2k)
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double vrr = 0, vrz = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const double ri = r[t], zi = z_given ? z[t] : dinv ? dinv[t / k] * ri : ri;
    if (dinv && !z_given) z[t] = zi;
    p[t] = zi;
    vrr += ri * ri;
    vrz += ri * zi;
  }
  if (!two_column_totals(k, vrr, vrz, smem, partials, counter, red)) return;
  if (rank_sums) {
    if (threadIdx.x < 2 * k) rank_sums[threadIdx.x] = red[threadIdx.x];
  } else if (threadIdx.x < k) {
    start_column(s + threadIdx.x, red[threadIdx.x], red[k + threadIdx.x], z_given);
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

// The columns' tails of one step from totals summed over the ranks (sums: pq in [0, k), or rr in [0, k) and
// rz in [k, 2k)). The scalars are those every rank holds, so every rank decides alike.
__global__ void multi_cg_finish_kernel(int step, int k, const double* __restrict__ sums, CgScalars* s, bool z_given) {
  const int j = threadIdx.x;
  if (j >= k) return;
  CgScalars* c = s + j;
  switch (step) {
    case 0: start_column(c, sums[j], sums[k + j], z_given); break;
    case 1: if (!c->done) c->pq = sums[j]; break;
    case 2: {
      double alpha;
      const bool stepped = column_step(*c, &alpha);
      update_column(c, stepped, sums[j], sums[k + j], false);
      break;
    }
  }
}

__global__ void pcg_rz_kernel(int64_t n, int k, const double* __restrict__ r, const double* __restrict__ z, CgScalars* s,
                              double* partials, unsigned* counter) {
  extern __shared__ double smem[];
  __shared__ double out[VectorTuning::max_width];
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double v = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) v += r[t] * z[t];
  smem[threadIdx.x] = v;
  if (!column_epilogue<VectorTuning::max_width>(partials, counter, k, smem, out) || threadIdx.x >= k) return;
  CgScalars* c = s + threadIdx.x;
  if (c->done) return;
  const double rz = out[threadIdx.x];
  if (!(rz > 0)) {  // r' M^-1 r <= 0 for r != 0: M is not positive definite
    c->status = isfinite(rz) ? kPrecondNotPositive : kNonFinite;
    c->done = 1;
    return;
  }
  c->beta = rz / c->rz;
  c->rz = rz;
}

__global__ void multi_cg_update_p_kernel(int64_t n, int k, double* __restrict__ p, const double* __restrict__ z,
                                         const CgScalars* s) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const CgScalars& c = s[t % k];
    if (!c.done) p[t] = fma(c.beta, p[t], z[t]);
  }
}

__global__ void row_scale_kernel(int64_t n, int k, const double* __restrict__ dinv, const double* __restrict__ x,
                                 double* __restrict__ y) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) y[t] = dinv[t / k] * x[t];
}

int block_grid(int64_t n, int k) {
  return grid_stride_blocks(n * k, block_threads(k), VectorTuning::blocks_per_sm / 2 + 1);
}

__global__ void fill_kernel(double value, double* __restrict__ y, size_t count) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x)
    y[i] = value;
}

// SplitMix64 is a counter: its (e+1)-th output is mix(seed + (e+1) * golden), so every entry is made on its own.
__global__ void fill_splitmix_kernel(uint64_t seed, uint64_t first, double* __restrict__ y, size_t count) {
  for (size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x; e < count; e += size_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + (first + uint64_t{e} + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    y[e] = __dsub_rn(__dmul_rn(2.0, u), 1.0);  // the host's 2u - 1, unfused
  }
}

}  // namespace

void launch_fill(double value, double* y, size_t count, cudaStream_t s) {
  if (count == 0) return;
  fill_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads, 0, s>>>(
      value, y, count);
  CHECK_LAUNCH("fill");
}

void launch_fill_splitmix_uniform(uint64_t seed, double* y, size_t count, cudaStream_t s, uint64_t first) {
  if (count == 0) return;
  fill_splitmix_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads,
                         0, s>>>(seed, first, y, count);
  CHECK_LAUNCH("fill random");
}

void launch_scale(double beta, double* y, size_t count, cudaStream_t s) {
  if (count == 0) return;
  if (beta == 1.0) return;
  scale_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads, 0, s>>>(
      beta, y, count);
  CHECK_LAUNCH("scale");
}

int reduction_blocks(int64_t n) { return grid_stride_blocks(n, VectorTuning::threads, VectorTuning::blocks_per_sm); }

ReductionWorkspace::ReductionWorkspace(int capacity_blocks, int values_per_block)
    : partials(static_cast<size_t>(capacity_blocks) * values_per_block, "reduction partials"),
      counter(1, "reduction counter"),
      capacity(capacity_blocks),
      width(values_per_block) {
  counter.zero();  // complete before any stream's kernel reads it (DeviceArray::zero)
}

DotSink ReductionWorkspace::sink(double* result) const {
  return DotSink{const_cast<double*>(partials.data()), const_cast<unsigned*>(counter.data()), result, capacity};
}

void launch_dot(const double* a, const double* b, int64_t n, const ReductionWorkspace& ws, double* result, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  dot_kernel<<<blocks, VectorTuning::threads, 0, s>>>(a, b, n, ws.sink(result));
  CHECK_LAUNCH("dot");
}

void launch_cg_start(int64_t n, const double* r, const double* dinv, double* z, double* p, CgScalars* sc,
                     const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  cg_start_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(n, r, dinv, z, p, sc, const_cast<double*>(ws.partials.data()),
                                                                const_cast<unsigned*>(ws.counter.data()), rank_sums);
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

void launch_column_dots(int64_t n, int k, const double* a, const double* b, const ReductionWorkspace& ws, double* out,
                        cudaStream_t s) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  column_dots_kernel<<<blocks, threads, threads * sizeof(double), s>>>(
      n, k, a, b, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), out);
  CHECK_LAUNCH("column-dots");
}

void launch_multi_cg_start(int64_t n, int k, const double* r, const double* dinv, double* z, double* p, CgScalars* sc,
                           const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_start_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, r, dinv, z, p, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), false,
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
  multi_cg_finish_kernel<<<1, std::max(32, k), 0, stream>>>(static_cast<int>(step), k, sums, sc, false);
  CHECK_LAUNCH("multi-cg-finish");
}

void launch_pcg_start(int64_t n, int k, const double* r, const double* z, double* p, CgScalars* sc,
                      const ReductionWorkspace& ws, cudaStream_t stream) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_start_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, r, nullptr, const_cast<double*>(z), p, sc, const_cast<double*>(ws.partials.data()),
      const_cast<unsigned*>(ws.counter.data()), true, nullptr);
  CHECK_LAUNCH("pcg-start");
}

void launch_pcg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q, CgScalars* sc,
                          const ReductionWorkspace& ws, cudaStream_t stream) {
  if (k == 1) {  // the one-vector kernel: its final reduction runs on the whole last block
    const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
    cg_update_xr_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(
        n, x, r, p, q, nullptr, nullptr, sc, const_cast<double*>(ws.partials.data()),
        const_cast<unsigned*>(ws.counter.data()), true, nullptr);
    CHECK_LAUNCH("pcg-update-xr");
    return;
  }
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  multi_cg_update_xr_kernel<<<blocks, threads, 2 * threads * sizeof(double), stream>>>(
      n, k, x, r, p, q, nullptr, nullptr, sc, const_cast<double*>(ws.partials.data()),
      const_cast<unsigned*>(ws.counter.data()), true, nullptr);
  CHECK_LAUNCH("pcg-update-xr");
}

void launch_pcg_rz(int64_t n, int k, const double* r, const double* z, CgScalars* sc, const ReductionWorkspace& ws,
                   cudaStream_t stream) {
  if (k == 1) {
    const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
    pcg_rz1_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(n, r, z, sc, const_cast<double*>(ws.partials.data()),
                                                                 const_cast<unsigned*>(ws.counter.data()));
    CHECK_LAUNCH("pcg-rz");
    return;
  }
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  pcg_rz_kernel<<<blocks, threads, threads * sizeof(double), stream>>>(
      n, k, r, z, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()));
  CHECK_LAUNCH("pcg-rz");
}

void launch_multi_cg_update_p(int64_t n, int k, double* p, const double* z, const CgScalars* sc, cudaStream_t stream) {
  const int threads = block_threads(k);
  multi_cg_update_p_kernel<<<block_grid(n, k), threads, 0, stream>>>(n, k, p, z, sc);
  CHECK_LAUNCH("multi-cg-update-p");
}

void launch_row_scale(int64_t n, int k, const double* dinv, const double* x, double* y, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  row_scale_kernel<<<block_grid(n, k), block_threads(k), 0, s>>>(n, k, dinv, x, y);
  CHECK_LAUNCH("row-scale");
}

void launch_lanczos_scale_dot(int64_t n, double* w, const double* u, const double* d, const ReductionWorkspace& ws,
                              double* coeffs, int j, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  lanczos_scale_dot_kernel<<<blocks, VectorTuning::threads, 0, s>>>(n, w, u, d, ws.sink(coeffs + 2 * j));
  CHECK_LAUNCH("lanczos-scale-dot");
}
void launch_lanczos_orthogonalize(int64_t n, double* w, const double* u, const double* u_prev, const ReductionWorkspace& ws,
                                  double* coeffs, int j, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  lanczos_orthogonalize_kernel<<<blocks, VectorTuning::threads, 0, s>>>(n, w, u, u_prev, coeffs, j,
                                                                        ws.sink(coeffs + 2 * j + 1));
  CHECK_LAUNCH("lanczos-orthogonalize");
}
void launch_lanczos_next(int64_t n, const double* w, const double* d, const double* coeffs, int j, double* u_next,
                         double* t, cudaStream_t s) {
  lanczos_next_kernel<<<reduction_blocks(std::max<int64_t>(n, 1)), VectorTuning::threads, 0, s>>>(n, w, d, coeffs, j,
                                                                                                 u_next, t);
  CHECK_LAUNCH("lanczos-next");
}

void launch_sum_over_ranks(const double* const* inputs, int ranks, size_t count, double* out, cudaStream_t s) {
  if (count == 0 || ranks == 0) return;
  sum_over_ranks_kernel<<<reduction_blocks(static_cast<int64_t>(count)), VectorTuning::threads, 0, s>>>(inputs, ranks,
                                                                                                       count, out);
  CHECK_LAUNCH("sum-over-ranks");
}

void launch_gather(const int32_t* rows, int64_t count, const double* x, double* out, cudaStream_t s, int k) {
  if (count == 0 || k == 0) return;
  gather_kernel<<<reduction_blocks(count * k), VectorTuning::threads, 0, s>>>(rows, count, k, x, out);
  CHECK_LAUNCH("gather");
}

}  // namespace spcg
