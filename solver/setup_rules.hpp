#pragma once
// What a Solver and a RankSolver set up alike, in one place: the operator's options from the solver's, and
// when a solve times each kernel with events.
#include <algorithm>
#include <cstdint>

#include "linear_operator.hpp"
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

inline bool times_each_kernel(const SolverOptions& o, int64_t global_rows) {
  return o.timing == KernelTiming::kernels ||
         (o.timing == KernelTiming::automatic && global_rows >= KernelTimingRule::per_kernel_events_from_rows);
}

}  // namespace spcg
