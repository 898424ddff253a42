// multi-cg: k independent CG recurrences (pseudo-block CG) sharing one SpMM per iteration, so A is read once
// for all k directions. Scalars stay on the device per column; a converged or broken-down column is frozen
// (its updates become no-ops) while the others go on.
#include <chrono>
#include <cmath>

#include "iteration_runner.hpp"
#include "solver.hpp"
#include "vector_ops.hpp"

namespace spcg {

SolveResult solve_multi_cg(const LinearOperator& A, const double* dinv, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o) {
  const int k = B.cols;
  const int64_t n = B.rows;
  if (k > 128) throw UsageError("multi-cg supports at most 128 right-hand sides per solve");
  SolveFrame frame("multi-cg", B, o);
  const cudaStream_t s = frame.stream();
  SolveResult& res = frame.result();
  Monitor& mon = frame.monitor();
  KernelTimer& timer = frame.timer();
  const double spmm_bytes = A.bytes_per_apply(k);
  DeviceBlock R(n, k, "multi-cg residual"), P(n, k, "multi-cg directions"), Q(n, k, "multi-cg A*P");
  DeviceArray<double> Z(dinv ? n * k : 0, "multi-cg z");
  double* zr = dinv ? Z.data() : R.data();
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  DeviceArray<CgScalars> dsc(k, "multi-cg scalars");
  std::vector<CgScalars> hsc(k);
  for (int j = 0; j < k; ++j) {
    const double tol = mon.tolerance(j);
    hsc[j].tol2 = tol * tol;
    hsc[j].max_iterations = o.stop.max_iterations;
  }
  dsc.upload(hsc);
  // R = B - A X
  timer.run("residual", spmm_bytes + 16.0 * n * k, [&] {
    CHECK_CUDA(cudaMemcpyAsync(R.data(), B.data(), B.size() * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, X.data(), 1.0, R.data(), k, s);
  });
  res.operator_applies = 1, res.operator_columns = k;
  timer.run("cg-start", (dinv ? 40.0 : 24.0) * n * k,
            [&] { launch_multi_cg_start(n, k, R.data(), dinv, Z.data(), P.data(), dsc.data(), ws, s); });
  const bool use_graph = o.graph == Switch::on || (o.graph == Switch::automatic && !timer.enabled());
  res.used_graph = use_graph;
  IterationRunner runner(s, use_graph, timer);
  const int batch = std::max(1, o.monitor_every > 0 ? std::min(o.check_every, o.monitor_every) : o.check_every);
  auto iteration = [&](KernelTimer& t) {
    t.run("spmm", spmm_bytes, [&] { A.apply(1.0, P.data(), 0.0, Q.data(), k, s); });             // Q = A P
    t.run("dot", 16.0 * n * k, [&] { launch_multi_cg_pq(n, k, P.data(), Q.data(), dsc.data(), ws, s); });  // p_j'q_j
    t.run("update-xr", (dinv ? 64.0 : 48.0) * n * k, [&] {  // x_j += a_j p_j; r_j -= a_j q_j; rr_j, rz_j
      launch_multi_cg_update_xr(n, k, X.data(), R.data(), P.data(), Q.data(), dinv, Z.data(), dsc.data(), ws, s);
    });
    t.run("update-p", 24.0 * n * k, [&] { launch_multi_cg_update_p(n, k, P.data(), zr, dsc.data(), s); });  // p_j = z_j + b_j p_j
  };
  std::vector<int> last(k, -1);
  while (true) {
    CHECK_CUDA(cudaMemcpyAsync(hsc.data(), dsc.data(), k * sizeof(CgScalars), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    timer.collect();
    bool all_done = true;
    for (int j = 0; j < k; ++j) {
      if (hsc[j].iteration != last[j]) mon.observe(j, hsc[j].iteration, std::sqrt(hsc[j].rr)), last[j] = hsc[j].iteration;
      all_done &= hsc[j].done != 0;
    }
    if (all_done) break;
    runner.run([&](KernelTimer& t) {
      for (int i = 0; i < batch; ++i) iteration(t);
    });
    res.operator_applies += batch, res.operator_columns += int64_t{batch} * k;
  }
  for (int j = 0; j < k; ++j)
    if (mon.status(j) == ColumnStatus::running)
      mon.finish(j, hsc[j].status == kConverged ? ColumnStatus::converged : from_device_status(hsc[j].status),
                 hsc[j].iteration);
  return frame.finish();
}

}  // namespace spcg
