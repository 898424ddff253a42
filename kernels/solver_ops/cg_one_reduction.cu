// CG with one sum an iteration (Chronopoulos & Gear, "s-step iterative methods for symmetric linear systems",
// J. Comput. Appl. Math. 25, 1989; as in Ghysels & Vanroose, Parallel Computing 40, 2014, algorithm 2): the
// vector steps of kernels/solver_ops/cg_one_reduction.hpp. Work mapping: a grid-stride loop over the rows on the
// fixed grid of reduction_blocks(n), four rows in flight per thread (reductions.cuh); the totals are summed in
// block order by the last block to arrive (deterministic), and one thread finishes the scalars.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_check.hpp"
#include "kernels/solver_ops/cg_one_reduction.hpp"
#include "kernels/solver_ops/cg_status.cuh"
#include "kernels/solver_ops/reductions.cuh"

namespace spcg {
namespace {

using Totals = OneReductionTotals;

__global__ void one_reduction_start_kernel(int64_t n, const double* __restrict__ r, const double* __restrict__ dinv,
                                           double* __restrict__ u, double* __restrict__ p, double* __restrict__ s,
                                           double* partials, unsigned* counter, double* totals) {
  double v[2] = {0, 0};
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double ri = r[i], ui = dinv ? dinv[i] * ri : ri;
    if (dinv) u[i] = ui;
    p[i] = 0.0, s[i] = 0.0;  // beta = 0 multiplies them: zeros, not whatever the memory held (0 x NaN is NaN)
    v[0] += ri * ri;
    v[1] += ri * ui;
  }
  double out[2];
  if (multi_epilogue<2>(partials, counter, v, out) && threadIdx.x == 0) totals[Totals::rr] = out[0], totals[Totals::ru] = out[1];
}

__global__ void one_reduction_update_kernel(int64_t n, double* __restrict__ x, double* r, double* u,
                                            const double* __restrict__ w, double* __restrict__ p, double* __restrict__ s,
                                            const double* __restrict__ dinv, const CgScalars* sc, double* partials,
                                            unsigned* counter, double* totals) {
  // (r and u alias without a preconditioner: no __restrict__ on them; each thread reads its row before writing it)
  if (*(volatile const int*)&sc->done) return;
  const double alpha = sc->alpha, beta = sc->beta;
  constexpr int U = VectorTuning::unroll;
  double v[2] = {0, 0};
  double uv[U], wv[U], pv[U], sv[U], xv[U], rv[U], dv[U];
  unrolled_grid_loop<U>(
      n,
      [&](int64_t i, int k) {
        uv[k] = u[i], wv[k] = w[i], pv[k] = p[i], sv[k] = s[i], xv[k] = x[i], rv[k] = r[i];
        dv[k] = dinv ? dinv[i] : 1.0;
      },
      [&](int64_t i, int k) {
        const double pi = fma(beta, pv[k], uv[k]);  // p = u + beta p
        const double si = fma(beta, sv[k], wv[k]);  // s = w + beta s  (= A p)
        p[i] = pi, s[i] = si;
        x[i] = fma(alpha, pi, xv[k]);               // x += alpha p
        const double ri = fma(-alpha, si, rv[k]);   // r -= alpha s
        r[i] = ri;
        const double ui = dv[k] * ri;               // u = M^-1 r
        if (dinv) u[i] = ui;
        v[0] += ri * ri;
        v[1] += ri * ui;
      });
  double out[2];
  if (multi_epilogue<2>(partials, counter, v, out) && threadIdx.x == 0) totals[Totals::rr] = out[0], totals[Totals::ru] = out[1];
}

// alpha and beta of the next step from gamma = r'u and p'Ap, or the status that stops the recurrence.
__device__ void next_step(CgScalars* c, double gamma, double pq, double beta) {
  if (!(gamma > 0)) {  // r'M^-1 r <= 0 with r above its tolerance: M is not positive definite
    c->status = isfinite(gamma) ? kPrecondNotPositive : kNonFinite;
    c->done = 1;
    return;
  }
  const double alpha = gamma / pq;
  if (!(pq > 0) || !isfinite(alpha)) {  // p'Ap <= 0: A is not positive definite (or NaN): stop, never step with it
    c->status = isfinite(pq) ? kBreakdown : kNonFinite;
    c->done = 1;
    return;
  }
  c->rz = gamma, c->pq = pq, c->alpha = alpha, c->beta = beta;
}

__global__ void one_reduction_finish_kernel(const double* __restrict__ totals, CgScalars* c, bool start) {
  const double rr = totals[Totals::rr], gamma = totals[Totals::ru], delta = totals[Totals::wu];
  if (start) {
    c->status = kRunning, c->done = 0;
    c->rr = rr;
    set_status(c, rr);
    if (!c->done) next_step(c, gamma, delta, 0.0);  // p'Ap = u'Au for p = u
    return;
  }
  if (c->done) return;
  c->iteration += 1;
  c->rr = rr;
  set_status(c, rr);
  if (c->done) return;
  const double beta = gamma / c->rz;
  next_step(c, gamma, delta - beta * gamma / c->alpha, beta);  // p'Ap of p = u + beta p_old
}

}  // namespace

void launch_cg_one_reduction_start(int64_t n, const double* r, const double* dinv, double* u, double* p, double* s,
                                   const ReductionWorkspace& ws, double* totals, cudaStream_t stream) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  one_reduction_start_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(
      n, r, dinv, u, p, s, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), totals);
  CHECK_LAUNCH("one-reduction-start");
}

void launch_cg_one_reduction_update(int64_t n, double* x, double* r, double* u, const double* w, double* p, double* s,
                                    const double* dinv, const CgScalars* sc, const ReductionWorkspace& ws,
                                    double* totals, cudaStream_t stream) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  one_reduction_update_kernel<<<blocks, VectorTuning::threads, 0, stream>>>(
      n, x, r, u, w, p, s, dinv, sc, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()),
      totals);
  CHECK_LAUNCH("one-reduction-update");
}

void launch_cg_one_reduction_finish(const double* totals, CgScalars* sc, bool start, cudaStream_t stream) {
  one_reduction_finish_kernel<<<1, 1, 0, stream>>>(totals, sc, start);
  CHECK_LAUNCH("one-reduction-finish");
}

}  // namespace spcg
