#include <cmath>

#include "communicator.hpp"
#include "solver.hpp"
#include "vector_ops.hpp"

namespace spcg {

std::vector<double> column_norms(const DeviceBlock& B, cudaStream_t s, Communicator* ranks) {
  const int k = B.cols;
  std::vector<double> out(k, 0.0);
  if (k == 0 || (B.rows == 0 && !ranks)) return out;
  ReductionWorkspace ws(reduction_blocks(int64_t{B.rows} * k), k);
  DeviceArray<double> d(k, "column norms");
  launch_column_dots(B.rows, k, B.data(), B.data(), ws, d.data(), s);
  if (ranks) ranks->allreduce_sum(d.data(), static_cast<size_t>(k), s);
  CHECK_CUDA(cudaMemcpyAsync(out.data(), d.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s));
  wait_for_stream(s, ranks);
  for (double& v : out) v = std::sqrt(v);
  return out;
}

std::vector<double> true_residual_norms(const LinearOperator& A, const DeviceBlock& B, const DeviceBlock& X,
                                        cudaStream_t s) {
  DeviceBlock R(B.rows, B.cols, "true residual");
  if (B.size()) CHECK_CUDA(cudaMemcpyAsync(R.data(), B.data(), B.size() * sizeof(double), cudaMemcpyDeviceToDevice, s));
  A.apply(-1.0, X.data(), 1.0, R.data(), B.cols, s);
  return column_norms(R, s, A.ranks());
}

SolveFrame::SolveFrame(const char* solver, const DeviceBlock& B, const SolveOptions& o, Communicator* ranks)
    : b_norms_(column_norms(B, stream_, ranks)),
      monitor_(o.stop, b_norms_, o.monitor_every, o.keep_history),
      timer_(o.time_kernels, stream_),
      start_(std::chrono::steady_clock::now()) {
  monitor_.print = o.progress;
  result_.solver = solver;
}

SolveResult SolveFrame::finish() {
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  timer_.collect();
  result_.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  result_.kernels = timer_.stats();
  if (timer_.enabled()) result_.timing_overhead_ms = timer_.events_recorded() * event_overhead_ms();
  for (int j = 0; j < monitor_.columns(); ++j)
    result_.columns.push_back({monitor_.status(j), monitor_.iterations(j), b_norms_[j], monitor_.residual(j), 0});
  result_.history = monitor_.history();
  return std::move(result_);
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
