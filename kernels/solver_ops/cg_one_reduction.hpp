#pragma once
// CG with one sum an iteration (Chronopoulos & Gear 1989, the s-step form with s = 1; the recurrence of PETSc's
// KSPPIPECG without the overlap, Ghysels & Vanroose 2014 section 2): kernels/solver_ops/cg_one_reduction.cu.
// Besides x, r, p it keeps u = M^-1 r (M: Jacobi's diagonal, or none: u is r), w = A u and s = A p, so that
// r'r, r'u and w'u are all known after the one product w = A u and are summed together:
//   beta = gamma / gamma_old,  p'Ap = delta - beta gamma / alpha_old,  alpha = gamma / p'Ap
// (gamma = r'u, delta = w'u). Each step writes this rank's totals (r'r, r'u, w'u) to `totals`; the caller sums
// them (over the ranks on several GPUs; nothing to do on one) and runs launch_cg_one_reduction_finish.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {

// Where the steps write their totals: r'r, r'u (start and update), w'u (the product's fused dot).
struct OneReductionTotals {
  static constexpr int rr = 0, ru = 1, wu = 2, count = 3;
};

// (Re)start from r: u = dinv .* r (dinv null: u is r and is not written), p = s = 0; r'r and r'u into totals.
void launch_cg_one_reduction_start(int64_t n, const double* r, const double* dinv, double* u, double* p, double* s,
                                   const ReductionWorkspace& ws, double* totals, cudaStream_t stream);
// One step with the scalars' alpha and beta: p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s;
// u = dinv .* r; r'r and r'u into totals. A finished recurrence (done) is left as it is.
void launch_cg_one_reduction_update(int64_t n, double* x, double* r, double* u, const double* w, double* p, double* s,
                                    const double* dinv, const CgScalars* sc, const ReductionWorkspace& ws,
                                    double* totals, cudaStream_t stream);
// The scalars from the summed totals. start: the status by r'r at the current iteration (kept: a restart goes on
// counting), alpha = r'u / w'u, beta = 0. Otherwise: iteration + 1, the status by r'r, then alpha and beta as
// above. r'u <= 0 stops the recurrence as kPrecondNotPositive, p'Ap <= 0 as kBreakdown (kNonFinite for NaN).
void launch_cg_one_reduction_finish(const double* totals, CgScalars* sc, bool start, cudaStream_t stream);

}  // namespace spcg
