#pragma once
// Solvers over the operator interface: cg, multi-cg (k independent recurrences sharing one SpMM), block-cg
// (breakdown-free block CG). They see only LinearOperator and device blocks, never the storage format.
#include <cuda_runtime.h>

#include <chrono>
#include <string>
#include <vector>

#include "device_array.hpp"
#include "iteration_runner.hpp"
#include "kernel_timer.hpp"
#include "linear_operator.hpp"
#include "monitor.hpp"
#include "preconditioner.hpp"
#include "spcg/solve_types.hpp"

namespace spcg {

// Inverse diagonal for Jacobi; throws InputError naming the first zero or negative diagonal entry.
std::vector<double> jacobi_inverse_diagonal(const CsrMatrix& a);

// X holds the initial guess on entry and the solution on exit (n x k, row-major). M: the preconditioner
// (nullptr: none); Jacobi's inverse diagonal goes into the fused kernels, any other M is applied between them. B must be finite (checked by the caller). Each solver runs on a
// stream of its own (SolveFrame): B and X must be complete when it is called (a synchronous copy, or the
// caller's stream synchronised), and X is complete when it returns.
SolveResult solve_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                     const SolveOptions& o);
SolveResult solve_multi_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o);
SolveResult solve_block_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o);
// One of the three, then the true residual ||b_j - A x_j|| of every column.
SolveResult solve(SolverKind solver, const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B,
                  DeviceBlock& X, const SolveOptions& o);

// PCG with a general preconditioner on k columns at once (multi-cg's recurrences; k = 1 for cg): B and X are
// n x k row-major, the monitor's columns first_column.. first_column + k - 1.
void pcg_general(const LinearOperator& A, const PreconditionerOp& M, const double* B, double* X, int k,
                 const SolveOptions& o, cudaStream_t s, KernelTimer& timer, Monitor& mon, int first_column,
                 SolveResult& res);

// Jacobi-preconditioned (dinv: the inverse diagonal) or plain CG, k recurrences on the fused kernels (cg: k = 1
// per column; multi-cg): B and X are n x k row-major, the monitor's columns first_column.. first_column + k - 1.
// On several GPUs (A.ranks()) every step's totals are summed over the ranks in rank order.
void cg_recurrences(const LinearOperator& A, const double* dinv, const double* B, double* X, int k, const SolveOptions& o,
                    cudaStream_t s, KernelTimer& timer, Monitor& mon, int first_column, SolveResult& res);

// What cg, multi-cg and block-cg set up alike: their own stream, the result, ||b_j||, the monitor (stopping
// rule and per-column status) and the kernel timer; finish() is their common end.
class SolveFrame {
 public:
  // ranks: several GPUs (B: this rank's rows), so ||b_j|| is summed over them; null: one GPU.
  SolveFrame(const char* solver, const DeviceBlock& B, const SolveOptions& o, Communicator* ranks = nullptr);
  cudaStream_t stream() const { return stream_; }
  SolveResult& result() { return result_; }
  Monitor& monitor() { return monitor_; }
  KernelTimer& timer() { return timer_; }
  const std::vector<double>& b_norms() const { return b_norms_; }
  // Restarts the solve's clock (after workspaces a solver allocates up front, as the solvers did before the frame).
  void start_clock() { start_ = std::chrono::steady_clock::now(); }
  // Waits for the stream, then fills the result: the wall time since the clock started, the kernel table,
  // the timing overhead, per-column status / iterations / residuals and the history.
  SolveResult finish();

 private:
  CudaStream stream_;
  SolveResult result_;
  std::vector<double> b_norms_;
  Monitor monitor_;
  KernelTimer timer_;
  std::chrono::steady_clock::time_point start_;
};

// ||B_j - A X_j|| per column, on the device (one SpMM + column dots), summed over A.ranks() on several GPUs.
std::vector<double> true_residual_norms(const LinearOperator& A, const DeviceBlock& B, const DeviceBlock& X,
                                        cudaStream_t s = 0);
// ||B_j||; ranks: B holds this rank's rows of the block, the squares are summed over the ranks.
std::vector<double> column_norms(const DeviceBlock& B, cudaStream_t s = 0, Communicator* ranks = nullptr);
ColumnStatus from_device_status(int status);  // CgStatus -> ColumnStatus

}  // namespace spcg
