#pragma once
// The fused CG steps with their scalars on the device (no host synchronisation per iteration): one recurrence,
// k recurrences of multi-cg on n x k row-major blocks, and PCG with a general preconditioner applied between the
// steps. kernels/solver_ops/cg_ops.cu.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/solver_ops/vector_ops.hpp"

namespace spcg {

// Scalars of one CG recurrence, resident on the device.
struct CgScalars {
  double rz = 0;      // r . z (z = M^-1 r; z = r without a preconditioner)
  double rr = 0;      // r . r  (stopping test uses the unpreconditioned residual)
  double pq = 0;      // p . A p
  double beta = 0;
  double alpha = 0;   // persistent CG: the step of the last checked iterate, carried into the next launch
  double tol2 = 0;    // stop when rr <= tol2
  int iteration = 0;
  int max_iterations = 0;
  int done = 0;       // set once status != running; every later update is a no-op
  int status = 0;     // CgStatus
  double* history = nullptr;  // rr after each iteration, when not null
  int history_capacity = 0;
};
// kPrecondNotPositive: r'M^-1 r <= 0 with r != 0, so M is not positive definite and CG's theory is void.
enum CgStatus : int { kRunning = 0, kConverged = 1, kMaxIterations = 2, kBreakdown = 3, kNonFinite = 4, kPrecondNotPositive = 5 };

// Start of CG: z = dinv .* r (or z = r), p = z (p null: not written), s.rz = r.z, s.rr = r.r, status by tolerance.
// rank_sums (several GPUs): rr, rz written there instead, finished by launch_multi_cg_finish(start, 1, ...).
// restart: from a true residual put back mid-solve, the iteration count kept (several GPUs: MultiCgStep::restart).
void launch_cg_start(int64_t n, const double* r, const double* dinv, double* z, double* p, CgScalars* s,
                     const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums = nullptr,
                     bool restart = false);
// alpha = rz / pq; x += alpha p; r -= alpha q; z = dinv .* r; rr, rz reduced; beta = rz_new / rz; status.
// rank_sums: as launch_cg_start's (launch_multi_cg_finish(update_xr, 1, ...) after the sum over ranks).
void launch_cg_update_xr(int64_t n, double* x, double* r, const double* p, const double* q, const double* dinv, double* z,
                         CgScalars* s, const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums = nullptr);
// p = z + beta p (z = r without a preconditioner).
void launch_cg_update_p(int64_t n, double* p, const double* z, const CgScalars* s, cudaStream_t stream);

// Block forms (n x k row-major), one CG recurrence per column, scalars in arrays of k.
// Several GPUs (rank_sums not null): a step's kernel writes this rank's totals to rank_sums (k values for pq;
// 2k for start and update-xr: rr in [0, k), rz in [k, 2k)) instead of finishing the columns; the caller sums
// them over the ranks and then runs launch_multi_cg_finish, which finishes the columns as the last block would.
struct MultiCgScalars {
  DeviceArray<CgScalars> s;  // k entries
};
void launch_multi_cg_start(int64_t n, int k, const double* r, const double* dinv, double* z, double* p, CgScalars* s,
                           const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums = nullptr);
void launch_multi_cg_pq(int64_t n, int k, const double* p, const double* q, CgScalars* s, const ReductionWorkspace& ws,
                        cudaStream_t stream, double* rank_sums = nullptr);
void launch_multi_cg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q,
                               const double* dinv, double* z, CgScalars* s, const ReductionWorkspace& ws,
                               cudaStream_t stream, double* rank_sums = nullptr);
// The steps whose totals cross the ranks: multi-cg's (start, pq, update-xr) and the general PCG's (cg's start, its
// update-xr that keeps rz, its r'z).
// restart: start's totals from a true residual put back mid-solve (the iteration count kept).
enum class MultiCgStep { start = 0, pq = 1, update_xr = 2, pcg_update_xr = 3, pcg_rz = 4, restart = 5 };
// Totals a step's kernel writes per column on several GPUs: p'q and r'z one; rr and rz two.
constexpr int rank_totals_per_column(MultiCgStep step) {
  return step == MultiCgStep::pq || step == MultiCgStep::pcg_rz ? 1 : 2;
}
void launch_multi_cg_finish(MultiCgStep step, int k, const double* sums, CgScalars* s, cudaStream_t stream);
void launch_multi_cg_update_p(int64_t n, int k, double* p, const double* z, const CgScalars* s, cudaStream_t stream);

// PCG with a general preconditioner, k recurrences (k = 1: cg): the caller applies z = M^-1 r before rz, so any
// preconditioner (a polynomial, a V-cycle) fits between the fused steps. Its start is cg's without z or p
// (launch_cg_start / launch_multi_cg_start with p null: rr, and rz = rr as beta's first denominator; P = 0).
// rank_sums (several GPUs): as the multi-cg steps', finished by launch_multi_cg_finish(pcg_update_xr / pcg_rz, k,
// ...) after the sum over the ranks.
// alpha = rz / pq; x += alpha p; r -= alpha q; rr reduced; iteration += 1 and the status by rr (rz kept).
void launch_pcg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q, CgScalars* s,
                          const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums = nullptr);
// rz_new = r.z per running column; beta = rz_new / rz, rz = rz_new; rz_new <= 0 stops the column.
void launch_pcg_rz(int64_t n, int k, const double* r, const double* z, CgScalars* s, const ReductionWorkspace& ws,
                   cudaStream_t stream, double* rank_sums = nullptr);

}  // namespace spcg
