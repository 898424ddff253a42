#include <cmath>

#include "solver/iteration_engine.hpp"
#include "solver/solver.hpp"

namespace spcg {

std::vector<double> true_residual_norms(const LinearOperator& A, const DeviceBlock& B, const DeviceBlock& X,
                                        cudaStream_t s) {
  DeviceBlock R(B.rows, B.cols, "true residual");
  if (B.size()) CHECK_CUDA(cudaMemcpyAsync(R.data(), B.data(), B.size() * sizeof(double), cudaMemcpyDeviceToDevice, s));
  A.apply(-1.0, X.data(), 1.0, R.data(), B.cols, s);
  ReductionPolicy sums(ranks_of(A));
  return column_norms(R, s, sums);
}

SolveResult solve(SolverKind solver, const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B,
                  DeviceBlock& X, const SolveOptions& o) {
  SolveResult r;
  switch (solver) {
    case SolverKind::cg: r = solve_cg(A, M, B, X, o); break;
    case SolverKind::multi_cg: r = solve_multi_cg(A, M, B, X, o); break;
    case SolverKind::block_cg: r = solve_block_cg(A, M, B, X, o); break;
  }
  const std::vector<double> t = true_residual_norms(A, B, X);
  for (size_t j = 0; j < r.columns.size(); ++j) r.columns[j].true_residual = t[j];
  return r;
}

}  // namespace spcg
