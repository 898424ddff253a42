#pragma once
// What every Solver sets up alike (one GPU or a rank), in one place: the operator's options from the solver's, and
// when a solve times each kernel with events.
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernels/linear_operator.hpp"
#include "spcg/spcg.hpp"

namespace spcg {

struct KernelTimingRule {
  // timing auto: per-kernel CUDA events from this many rows (of the whole system) on. Below it an iteration is
  // tens of microseconds and the events' few microseconds each would distort what they measure; above it they
  // cost under 2 % and the kernel table is worth having.
  static constexpr int64_t per_kernel_events_from_rows = 200000;
};

inline OperatorOptions operator_options(const SolverOptions& o) {
  OperatorOptions oo;
  oo.deterministic = o.iteration.deterministic;
  oo.autotune = !oo.deterministic;  // a timed trial may pick another kernel (another sum order) on another run
  oo.expected_k = o.solver == SolverKind::cg ? 1 : std::max(1, o.expected_columns);
  return oo;
}

// What CG cannot solve is refused before a solve, naming the first offending row (MatrixRefusedError: an
// asymmetry or a non-positive diagonal may be overridden with check_matrix off; a non-square matrix or a NaN
// may not). `st` are the statistics of the whole matrix, or of one rank's diagonal block (a principal block of
// a symmetric A is symmetric, and e_i' A e_i > 0 for SPD A): then `first_row` is its first global row and
// `block` names it in the message ("the diagonal block of rows 101..200").
void check_matrix(const MatrixStats& st, const SolverOptions& o, int64_t first_row = 0, const std::string& block = "");

inline bool times_each_kernel(const SolverOptions& o, int64_t global_rows) {
  return o.timing == KernelTiming::kernels ||
         (o.timing == KernelTiming::automatic && global_rows >= KernelTimingRule::per_kernel_events_from_rows);
}

}  // namespace spcg
