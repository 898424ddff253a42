#pragma once
// Solvers over the operator interface: cg, multi-cg (k independent recurrences sharing one SpMM), block-cg
// (breakdown-free block CG). They see only LinearOperator and device blocks, never the storage format.
#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <vector>

#include "device_array.hpp"
#include "kernel_timer.hpp"
#include "linear_operator.hpp"
#include "monitor.hpp"
#include "spcg/solve_types.hpp"

namespace spcg {

// Inverse diagonal for Jacobi; throws InputError naming the first zero or negative diagonal entry.
std::vector<double> jacobi_inverse_diagonal(const CsrMatrix& a);

// X holds the initial guess on entry and the solution on exit (n x k, row-major). dinv: device inverse
// diagonal (nullptr without a preconditioner). B must be finite (checked by the caller).
SolveResult solve_cg(const LinearOperator& A, const double* dinv, const DeviceBlock& B, DeviceBlock& X,
                     const SolveOptions& o, cudaStream_t s = 0);
SolveResult solve_multi_cg(const LinearOperator& A, const double* dinv, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o, cudaStream_t s = 0);
SolveResult solve_block_cg(const LinearOperator& A, const double* dinv, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o, cudaStream_t s = 0);
SolveResult solve(SolverKind solver, const LinearOperator& A, const double* dinv, const DeviceBlock& B,
                  DeviceBlock& X, const SolveOptions& o, cudaStream_t s = 0);

// ||B_j - A X_j|| per column, on the device (one SpMM + column dots).
std::vector<double> true_residual_norms(const LinearOperator& A, const DeviceBlock& B, const DeviceBlock& X,
                                        cudaStream_t s = 0);
std::vector<double> column_norms(const DeviceBlock& B, cudaStream_t s = 0);
ColumnStatus from_device_status(int status);  // CgStatus -> ColumnStatus
// The common end of every solver: waits for the stream, then fills res with the wall time since `start`, the
// kernel table, the timing overhead, per-column status/iterations/residuals and the residual history.
void finish_result(SolveResult& res, const Monitor& mon, const std::vector<double>& b_norms, KernelTimer& timer,
                   std::chrono::steady_clock::time_point start, cudaStream_t s);

}  // namespace spcg
