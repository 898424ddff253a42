#pragma once
// Vector kernels for the solvers: deterministic dot products and the fused CG updates that keep the scalars on
// the device (no host synchronisation per iteration). Block (n x k, row-major) variants serve multi-cg.
#include <cuda_runtime.h>

#include <cstdint>

#include "blas1.hpp"
#include "device_array.hpp"
#include "linear_operator.hpp"

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

// Reduction workspace: partials for up to `capacity` blocks (x `width` values) plus results.
struct ReductionWorkspace {
  DeviceArray<double> partials;
  DeviceArray<unsigned int> counter;
  int capacity = 0, width = 0;
  ReductionWorkspace() = default;
  ReductionWorkspace(int capacity_blocks, int values_per_block);
  DotSink sink(double* result) const;
};
int reduction_blocks(int64_t n);  // the grid size the fused vector kernels use

// result = a . b (deterministic: fixed grid, fixed-order combine).
void launch_dot(const double* a, const double* b, int64_t n, const ReductionWorkspace& ws, double* result, cudaStream_t s);

// Start of CG: z = dinv .* r (or z = r), p = z, s.rz = r.z, s.rr = r.r, status by tolerance.
// rank_sums (several GPUs): rr, rz written there instead, finished by launch_multi_cg_finish(start, 1, ...).
void launch_cg_start(int64_t n, const double* r, const double* dinv, double* z, double* p, CgScalars* s,
                     const ReductionWorkspace& ws, cudaStream_t stream, double* rank_sums = nullptr);
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
enum class MultiCgStep { start = 0, pq = 1, update_xr = 2 };
void launch_multi_cg_finish(MultiCgStep step, int k, const double* sums, CgScalars* s, cudaStream_t stream);
void launch_multi_cg_update_p(int64_t n, int k, double* p, const double* z, const CgScalars* s, cudaStream_t stream);

// PCG with a general preconditioner, k recurrences (k = 1: cg): the caller applies z = M^-1 r between
// update_xr and rz, so any preconditioner (a polynomial, a V-cycle) fits between the fused steps.
// start: p = z; rr = r.r, rz = r.z per column; a column with rz <= 0 (and rr above its tolerance) stops.
void launch_pcg_start(int64_t n, int k, const double* r, const double* z, double* p, CgScalars* s,
                      const ReductionWorkspace& ws, cudaStream_t stream);
// alpha = rz / pq; x += alpha p; r -= alpha q; rr reduced; iteration += 1 and the status by rr (rz kept).
void launch_pcg_update_xr(int64_t n, int k, double* x, double* r, const double* p, const double* q, CgScalars* s,
                          const ReductionWorkspace& ws, cudaStream_t stream);
// rz_new = r.z per running column; beta = rz_new / rz, rz = rz_new; rz_new <= 0 stops the column.
void launch_pcg_rz(int64_t n, int k, const double* r, const double* z, CgScalars* s, const ReductionWorkspace& ws,
                   cudaStream_t stream);

// out[j] = sum_i a(i, j) * b(i, j) for n x k row-major blocks (deterministic).
void launch_column_dots(int64_t n, int k, const double* a, const double* b, const ReductionWorkspace& ws, double* out,
                        cudaStream_t s);
// y = a .* x elementwise (Jacobi), over count entries where a is indexed by row (count = n * k, row = i / k).
void launch_row_scale(int64_t n, int k, const double* dinv, const double* x, double* y, cudaStream_t s);

// Lanczos on D^-1/2 A D^-1/2 with its scalars on the device (coeffs: 2 per step; solver/spectrum.cpp), around
// w = A t: w = d .* w, coeffs[2j] = w . u; then w -= coeffs[2j] u + sqrt(coeffs[2j - 1]) u_prev,
// coeffs[2j + 1] = w . w; then u_next = w / sqrt(coeffs[2j + 1]), t = d .* u_next. d null: D = I.
void launch_lanczos_scale_dot(int64_t n, double* w, const double* u, const double* d, const ReductionWorkspace& ws,
                              double* coeffs, int j, cudaStream_t s);
void launch_lanczos_orthogonalize(int64_t n, double* w, const double* u, const double* u_prev, const ReductionWorkspace& ws,
                                  double* coeffs, int j, cudaStream_t s);
void launch_lanczos_next(int64_t n, const double* w, const double* d, const double* coeffs, int j, double* u_next,
                         double* t, cudaStream_t s);

// out[i] = inputs[0][i] + inputs[1][i] + ... in rank order (inputs: a device array of `ranks` device pointers).
void launch_sum_over_ranks(const double* const* inputs, int ranks, size_t count, double* out, cudaStream_t s);

// out[i * k + j] = x[rows[i] * k + j], i < count, j < k: rows of an n x k row-major block.
void launch_gather(const int32_t* rows, int64_t count, const double* x, double* out, cudaStream_t s, int k = 1);

}  // namespace spcg
