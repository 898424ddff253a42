#pragma once
// A CG recurrence's status after its residual rr = r'r of this iteration (device code; cg_ops.cu and
// cg_one_reduction.cu): the history entry, then non-finite, converged, or out of iterations, in that order.
#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {
namespace {

__device__ inline void set_status(CgScalars* s, double rr) {
  if (s->history && s->iteration < s->history_capacity) s->history[s->iteration] = rr;
  if (!isfinite(rr)) s->status = kNonFinite;
  else if (rr <= s->tol2) s->status = kConverged;
  else if (s->iteration >= s->max_iterations) s->status = kMaxIterations;
  s->done = s->status != kRunning;
}

}  // namespace
}  // namespace spcg
