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

namespace spcg {

struct SolveOptions {
  StopRule stop;
  std::string precond = "none";      // none | jacobi
  std::string vector_ops = "fused";  // fused | thrust
  int check_every = 8;               // fused path: iterations between host reads of the residual
  std::string graph = "auto";        // auto | on | off: replay the fused iteration batch from a CUDA graph
  std::string persistent = "auto";   // auto | on | off: small systems run CG in one cooperative launch
  bool time_kernels = true;          // per-kernel events (off: phases only)
  bool deterministic = false;
  int monitor_every = 0;             // --monitor N
  bool keep_history = false;
  // block-cg: the running columns go on as multi-cg when the largest relative residual among them has not
  // fallen below 0.9 x its best for this many iterations (0: never), when the block has lost rank or is near
  // the target (far from it, a full-rank block is in CG's usual rise and plateau)
  int stagnation_window = 200;
};

struct ColumnResult {
  ColumnStatus status = ColumnStatus::running;
  int iterations = 0;
  double b_norm = 0;
  double recursive_residual = 0;  // the solver's own ||r||
  double true_residual = 0;       // ||b - A x|| recomputed at the end
};

struct SolveResult {
  std::string solver;
  std::vector<ColumnResult> columns;
  std::vector<KernelStat> kernels;
  double solve_ms = 0;          // wall time of the iteration (device synchronised)
  double timing_overhead_ms = 0;  // estimated device time added by the per-kernel events
  int64_t operator_applies = 0;   // SpMV / SpMM calls
  int64_t operator_columns = 0;   // sum of the block widths of those calls
  bool used_graph = false;
  bool used_persistent = false;     // CG ran as one cooperative kernel (small system)
  int fallback_columns = 0;         // block-cg: columns finished by multi-cg (the block recurrence broke down or stalled)
  std::string fallback_reason;      // block-cg: why, when fallback_columns > 0
  std::vector<std::vector<std::pair<int, double>>> history;
  bool all_converged() const;
};

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
SolveResult solve(const std::string& solver, const LinearOperator& A, const double* dinv, const DeviceBlock& B,
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
