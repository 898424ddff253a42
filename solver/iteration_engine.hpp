#pragma once
// The iteration engine every solver runs on: what cg, multi-cg, the general PCG, block CG and auto's trial
// share, so that each of them is its list of steps (issue #32). It owns
//   - the frame of a solve: its stream, the result, ||b_j||, the monitor (stopping rule, per-column status) and
//     the kernel timer;
//   - the batch rule: device-resident recurrences run check_every iterations (monitor_every when that is
//     smaller) between two host reads of their scalars, replayed from a CUDA graph unless kernels are timed one
//     by one or the reductions cross ranks;
//   - the reduction policy: on one GPU a step's kernel finishes its own dot products (the last block to finish
//     sums the partials in block order); on several GPUs it writes this rank's totals instead, and the policy
//     sums them over the ranks in rank order and finishes the step. The solvers never test for ranks.
#include <cuda_runtime.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "kernels/kernel_timer.hpp"
#include "solver/monitor.hpp"
#include "spcg/solve_types.hpp"
#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {

class Communicator;

class CudaStream {
 public:
  CudaStream() { CHECK_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(s_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Sums of a solve's dot products: the identity on one GPU, a sum over the ranks (rank order, so a rank count
// repeats bit for bit) on several.
class ReductionPolicy {
 public:
  explicit ReductionPolicy(Communicator* ranks) : ranks_(ranks) {}
  bool over_ranks() const { return ranks_ != nullptr; }
  Communicator* communicator() const { return ranks_; }
  // Where a fused step's kernel writes this rank's totals (2k values at most): null on one GPU, where the kernel
  // finishes the step itself.
  double* step_totals(int k);
  // Where a dot product belongs: `one_gpu` on one GPU, this rank's totals on several (finish_step then sums it).
  double* dot_target(double* one_gpu) { return ranks_ ? step_totals(1) : one_gpu; }
  // After a step that wrote step_totals(): the sum over the ranks, then the columns finished as the last block
  // would have (one GPU: nothing to do).
  void finish_step(KernelTimer& t, MultiCgStep step, int k, CgScalars* scalars, cudaStream_t s);
  // A step's totals (count values this rank wrote) summed over the ranks in place, timed as the sum; one GPU:
  // nothing to do.
  void sum_step(KernelTimer& t, double* totals, size_t count, cudaStream_t s);
  // Device values summed over the ranks in place (one GPU: nothing to do).
  void sum(double* values, size_t count, cudaStream_t s);
  // The host waits for the stream; on several GPUs through the communicator (its timeout, its errors).
  void wait(cudaStream_t s) const;

 private:
  Communicator* ranks_;
  DeviceArray<double> totals_;
};

// The column norms ||B_j|| (n x k row-major), summed over the ranks by the policy.
std::vector<double> column_norms(const DeviceBlock& B, cudaStream_t s, ReductionPolicy& sums);

class IterationEngine {
 public:
  // B: the right-hand sides (this rank's rows on several GPUs); ranks: null on one GPU.
  IterationEngine(const char* solver, const DeviceBlock& B, const SolveOptions& o, Communicator* ranks);
  // A recurrence without a right-hand-side block of its own (auto's trial): the tolerances come from b_norms.
  IterationEngine(const char* solver, const std::vector<double>& b_norms, const SolveOptions& o, Communicator* ranks);
  IterationEngine(const IterationEngine&) = delete;
  IterationEngine& operator=(const IterationEngine&) = delete;

  const SolveOptions& options() const { return options_; }
  cudaStream_t stream() const { return stream_; }
  SolveResult& result() { return result_; }
  Monitor& monitor() { return monitor_; }
  KernelTimer& timer() { return timer_; }
  ReductionPolicy& reductions() { return reductions_; }
  const std::vector<double>& b_norms() const { return b_norms_; }
  // Restarts the solve's clock (after workspaces a solver allocates up front).
  void start_clock() { start_ = std::chrono::steady_clock::now(); }

  // The device scalars of k recurrences for the monitor's columns first_column..: each column's tolerance and
  // the iteration limit; with a residual history on the device where one recurrence keeps it (k = 1, one GPU,
  // keep_history: the fused kernels write rr after every iteration).
  struct Recurrences {
    DeviceArray<CgScalars> scalars;
    DeviceArray<double> history;
    int k = 0, first_column = 0;
    int first_iteration = 0;  // where the count starts (a recurrence taking over another's column)
  };
  // first_iteration > 0: the columns' counts go on from there (their recurrence restarts from b - A x).
  Recurrences recurrences(int k, int first_column, int first_iteration = 0);
  // A recurrence that can put the true residual back is asked when its own residual says column j converged,
  // or when it broke down (a rounded copy of A, or a recurred p'Ap, may break down where A would not): it gives
  // ||b_j - A x_j||, and restarts from that residual when it lies above the tolerance (restarted: the column runs
  // on). The monitor then judges the true norm, so no column converges on a drifted recurrence. Not asked at the
  // iteration of a (re)start, whose residual is the true one: a breakdown there is final.
  // When restarts from the true residual stop paying: a restart whose true residual is not below `progress` x the
  // smallest at an earlier restart is unproductive, and `unproductive_limit` of them in a row end the column
  // stagnated. Near the rounding floor each restart's recurrence claims again within a few iterations while
  // b - A x stays put; a recurrence that merely drifted is brought down by its restart (poisson2d:4096's
  // Jacobi-CG: 1.5x the tolerance at its first claim, converged at the second); mixed precision's restarts on an
  // ill-conditioned system take off less than half a time (their FP32 rounding times the condition number) and
  // still get there, so a tenth off counts as progress.
  struct RestartRule {
    static constexpr double progress = 0.9;
    static constexpr int unproductive_limit = 3;
  };
  // How long a batch runs near convergence: this share of the iterations the slowest running column's rate since
  // the last read says it still needs (at least one, at most check_every). Half, because that rate lags a Krylov
  // method's speeding up: AMG-PCG on 27-point 256^3 read at iteration 8 asked for 8 more and converged at 14. A read
  // costs tens of microseconds, an iteration run past convergence a whole iteration.
  struct BatchRule {
    static constexpr double share_of_needed = 0.5;
  };
  struct Confirmation {
    double true_norm = 0;
    bool restarted = false;
  };
  using ConfirmConverged = std::function<Confirmation(int column)>;
  // A recurrence's confirmation once its start step from the true residual has run (scalars: its one column's on
  // the device): their rr is the true residual's, and it restarted where that lies above the tolerance (counted
  // as a residual replacement).
  Confirmation confirmation_after_restart(const CgScalars* scalars);
  // Runs them to the end: reads their scalars, reports new residuals to the monitor, runs another batch of
  // iteration(t) until every column is done, then gives each column its final status (and the device history).
  void run(Recurrences& rec, const std::function<void(KernelTimer&)>& iteration, const ConfirmConverged& confirm = {});
  // Whether cg runs Chronopoulos & Gear's recurrence (one sum an iteration): asked for, or auto where the sums
  // cross ranks (SolveOptions::recurrence).
  bool one_reduction_cg() const;

  // Waits for the stream, then fills the result: the wall time since the clock started, the kernel table, the
  // timing overhead, per-column status / iterations / residuals and the history.
  SolveResult finish();

 private:
  int batch() const;
  bool graphs() const;

  SolveOptions options_;
  CudaStream stream_;
  ReductionPolicy reductions_;
  SolveResult result_;
  std::vector<double> b_norms_;
  Monitor monitor_;
  KernelTimer timer_;
  std::chrono::steady_clock::time_point start_;
};

// Copies a device residual history (squared norms, one per iteration) into the monitor's history of `column`,
// from iteration `first` on (the entries before it stay: a recurrence that took the column over).
void take_history(const std::vector<double>& squared, int iterations, Monitor& mon, int column, int first = 0);

}  // namespace spcg
