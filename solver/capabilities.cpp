// What runs on several GPUs, and the one refusal for what does not (declared in spcg/solve_types.hpp and
// spcg/spcg.hpp; the iteration engine asks require_distributed for the preconditioner object it is handed).
#include <string>

#include "solver/iteration_engine.hpp"
#include "solver/preconditioner.hpp"
#include "solver/solver.hpp"
#include "spcg/spcg.hpp"

namespace spcg {

std::string several_gpus_refusal(Preconditioner p) {
  if (runs_on_several_gpus(p)) return {};
  return "on several GPUs the preconditioner is " + several_gpus_names<Preconditioner>() + " (" + name_of(p) +
         " is not distributed)";
}

std::string several_gpus_refusal(VectorOps v) {
  if (runs_on_several_gpus(v)) return {};
  return std::string("on several GPUs the vector operations are fused (") + name_of(v) + " keeps its scalars on one host)";
}

std::string one_reduction_refusal(Preconditioner p) {
  if (p == Preconditioner::none || p == Preconditioner::jacobi || p == Preconditioner::automatic) return {};
  return std::string("the one-reduction recurrence runs with Jacobi or no preconditioner, not ") + name_of(p);
}

std::string several_gpus_refusal(const SolverOptions& o) {
  if (!runs_on_several_gpus(o.solver)) return std::string("on several GPUs ") + name_of(o.solver) + " is not distributed";
  if (std::string why = several_gpus_refusal(o.precond); !why.empty()) return why;
  if (std::string why = several_gpus_refusal(o.iteration.vector_ops); !why.empty()) return why;
  if (!o.kernel.is_auto()) return "on several GPUs the kernel is auto (each rank picks its own for its local block)";
  if (o.backend == Backend::host) return "on several GPUs the backend is gpu (the host backend is one process)";
  if (o.iteration.interrupted)
    return "on several GPUs a solve cannot take an interrupt hook (every rank would have to answer it alike)";
  return {};
}

void require_distributed(IterationEngine& e, const PreconditionerOp* M) {
  if (!e.reductions().over_ranks()) return;
  std::string why = several_gpus_refusal(e.options().vector_ops);
  // a preconditioner applied between the fused steps: its kind must be distributed (its applies then span the ranks)
  if (why.empty() && M && !M->inverse_diagonal()) why = several_gpus_refusal(M->report().kind);
  if (!why.empty()) throw UsageError(why);
}

}  // namespace spcg
