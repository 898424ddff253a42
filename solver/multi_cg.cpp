// multi-cg: k independent CG recurrences (pseudo-block CG) sharing one SpMM per iteration, so A is read once
// for all k directions. Scalars stay on the device per column; a converged or broken-down column is frozen
// (its updates become no-ops) while the others go on.
#include <chrono>
#include <cmath>

#include "communicator.hpp"
#include "iteration_runner.hpp"
#include "solver.hpp"
#include "vector_ops.hpp"

namespace spcg {
namespace {

// The host side of k device-resident recurrences: read their scalars, report new residuals to the monitor
// (columns first_column..), run another batch of iterations until every column is done, then each column's
// final status.
void run_recurrences(const DeviceArray<CgScalars>& dsc, std::vector<CgScalars>& hsc, int k, int first_column,
                     cudaStream_t s, KernelTimer& timer, Monitor& mon, IterationRunner& runner, int batch,
                     const std::function<void(KernelTimer&)>& iteration, SolveResult& res,
                     Communicator* ranks = nullptr) {
  std::vector<int> last(k, -1);
  while (true) {
    CHECK_CUDA(cudaMemcpyAsync(hsc.data(), dsc.data(), k * sizeof(CgScalars), cudaMemcpyDeviceToHost, s));
    wait_for_stream(s, ranks);  // several GPUs: with the communicator's timeout
    timer.collect();
    bool all_done = true;
    for (int j = 0; j < k; ++j) {
      if (hsc[j].iteration != last[j])
        mon.observe(first_column + j, hsc[j].iteration, std::sqrt(hsc[j].rr)), last[j] = hsc[j].iteration;
      all_done &= hsc[j].done != 0;
    }
    if (all_done) break;
    runner.run([&](KernelTimer& t) {
      for (int i = 0; i < batch; ++i) iteration(t);
    });
    res.operator_applies += batch, res.operator_columns += int64_t{batch} * k;
  }
  for (int j = 0; j < k; ++j)
    if (mon.status(first_column + j) == ColumnStatus::running)
      mon.finish(first_column + j, from_device_status(hsc[j].status), hsc[j].iteration);
}

}  // namespace

void pcg_general(const LinearOperator& A, const PreconditionerOp& M, const double* B, double* X, int k,
                 const SolveOptions& o, cudaStream_t s, KernelTimer& timer, Monitor& mon, int first_column,
                 SolveResult& res) {
  const int64_t n = A.rows();
  M.reserve(k);
  const double spmm_bytes = A.bytes_per_apply(k), precond_bytes = M.bytes_per_apply(k), nk = double(n) * k;
  DeviceArray<double> R(n * k, "pcg residual"), P(n * k, "pcg directions"), Q(n * k, "pcg A*P"), Z(n * k, "pcg M^-1 R");
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  DeviceArray<CgScalars> dsc(k, "pcg scalars");
  std::vector<CgScalars> hsc(k);
  for (int j = 0; j < k; ++j) {
    const double tol = mon.tolerance(first_column + j);
    hsc[j].tol2 = tol * tol;
    hsc[j].max_iterations = o.stop.max_iterations;
  }
  dsc.upload(hsc);
  timer.run("residual", spmm_bytes + 16.0 * nk, [&] {  // R = B - A X
    CHECK_CUDA(cudaMemcpyAsync(R.data(), B, n * k * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, X, 1.0, R.data(), k, s);
  });
  res.operator_applies += 1, res.operator_columns += k;
  timer.run("precond", precond_bytes, [&] { M.apply(R.data(), Z.data(), k, s); });  // Z = M^-1 R
  timer.run("cg-start", 24.0 * nk, [&] { launch_pcg_start(n, k, R.data(), Z.data(), P.data(), dsc.data(), ws, s); });
  const bool use_graph = o.graph == Switch::on || (o.graph == Switch::automatic && !timer.enabled());
  res.used_graph = use_graph;
  IterationRunner runner(s, use_graph, timer);
  const int batch = std::max(1, o.monitor_every > 0 ? std::min(o.check_every, o.monitor_every) : o.check_every);
  auto iteration = [&](KernelTimer& t) {
    if (k == 1) {  // q = A p with p'q fused into the kernel's epilogue where it has one
      bool fused_dot = true;
      t.run("spmv", spmm_bytes, [&] {
        fused_dot = A.apply_with_dot(P.data(), Q.data(), ws.sink(&dsc.data()->pq), s);
        if (!fused_dot) A.apply(1.0, P.data(), 0.0, Q.data(), 1, s);
      });
      if (!fused_dot) t.run("dot", 16.0 * nk, [&] { launch_dot(P.data(), Q.data(), n, ws, &dsc.data()->pq, s); });
    } else {
      t.run("spmm", spmm_bytes, [&] { A.apply(1.0, P.data(), 0.0, Q.data(), k, s); });                   // Q = A P
      t.run("dot", 16.0 * nk, [&] { launch_multi_cg_pq(n, k, P.data(), Q.data(), dsc.data(), ws, s); });  // p_j'q_j
    }
    t.run("update-xr", 48.0 * nk, [&] {  // a_j = rz_j / p_j'q_j; x_j += a_j p_j; r_j -= a_j q_j; rr_j
      launch_pcg_update_xr(n, k, X, R.data(), P.data(), Q.data(), dsc.data(), ws, s);
    });
    t.run("precond", precond_bytes, [&] { M.apply(R.data(), Z.data(), k, s); });                       // Z = M^-1 R
    t.run("rz", 16.0 * nk, [&] { launch_pcg_rz(n, k, R.data(), Z.data(), dsc.data(), ws, s); });       // b_j = rz_new / rz
    t.run("update-p", 24.0 * nk, [&] {  // p_j = z_j + b_j p_j
      if (k == 1) launch_cg_update_p(n, P.data(), Z.data(), dsc.data(), s);
      else launch_multi_cg_update_p(n, k, P.data(), Z.data(), dsc.data(), s);
    });
  };
  run_recurrences(dsc, hsc, k, first_column, s, timer, mon, runner, batch, iteration, res);
}

void cg_recurrences(const LinearOperator& A, const double* dinv, const double* B, double* X, int k, const SolveOptions& o,
                    cudaStream_t s, KernelTimer& timer, Monitor& mon, int first_column, SolveResult& res) {
  const int64_t n = A.rows();
  Communicator* ranks = A.ranks();
  const double spmm_bytes = A.bytes_per_apply(k);
  DeviceArray<double> R(n * k, "multi-cg residual"), P(n * k, "multi-cg directions"), Q(n * k, "multi-cg A*P");
  DeviceArray<double> Z(dinv ? n * k : 0, "multi-cg z");
  double* zr = dinv ? Z.data() : R.data();
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  // several GPUs: each step's totals of this rank, summed over the ranks before the columns finish the step
  DeviceArray<double> rank_sums(ranks ? 2 * k : 0, "multi-cg rank sums");
  DeviceArray<CgScalars> dsc(k, "multi-cg scalars");
  auto over_ranks = [&](KernelTimer& t, MultiCgStep step, int values) {
    t.run("sum over ranks", 0.0, [&] {
      ranks->allreduce_sum(rank_sums.data(), static_cast<size_t>(values), s);
      launch_multi_cg_finish(step, k, rank_sums.data(), dsc.data(), s);
    });
  };
  std::vector<CgScalars> hsc(k);
  for (int j = 0; j < k; ++j) {
    const double tol = mon.tolerance(first_column + j);
    hsc[j].tol2 = tol * tol;
    hsc[j].max_iterations = o.stop.max_iterations;
  }
  dsc.upload(hsc);
  // R = B - A X
  timer.run("residual", spmm_bytes + 16.0 * n * k, [&] {
    if (n) CHECK_CUDA(cudaMemcpyAsync(R.data(), B, n * k * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, X, 1.0, R.data(), k, s);
  });
  res.operator_applies += 1, res.operator_columns += k;
  // k = 1 takes the one-vector kernels (several loads in flight per thread; the block forms' thread-per-entry
  // mapping streams ~30 % slower at k = 1)
  timer.run("cg-start", (dinv ? 40.0 : 24.0) * n * k, [&] {
    if (k == 1) launch_cg_start(n, R.data(), dinv, Z.data(), P.data(), dsc.data(), ws, s, rank_sums.data());
    else launch_multi_cg_start(n, k, R.data(), dinv, Z.data(), P.data(), dsc.data(), ws, s, rank_sums.data());
  });
  if (ranks) over_ranks(timer, MultiCgStep::start, 2 * k);
  // CUDA graphs: not across ranks (the stand-in group's sums wait on the host; NCCL's could be captured)
  const bool use_graph = !ranks && (o.graph == Switch::on || (o.graph == Switch::automatic && !timer.enabled()));
  res.used_graph = use_graph;
  IterationRunner runner(s, use_graph, timer);
  const int batch = std::max(1, o.monitor_every > 0 ? std::min(o.check_every, o.monitor_every) : o.check_every);
  double* pq1 = ranks ? rank_sums.data() : &dsc.data()->pq;  // k = 1: where p'q goes
  auto iteration = [&](KernelTimer& t) {
    if (k == 1) {  // q = A p with p'q fused into the kernel's epilogue where it has one
      bool fused_dot = true;
      t.run("spmv", spmm_bytes, [&] {
        fused_dot = A.apply_with_dot(P.data(), Q.data(), ws.sink(pq1), s);
        if (!fused_dot && !ranks) A.apply(1.0, P.data(), 0.0, Q.data(), 1, s);  // a rank's apply_with_dot made Q
      });
      if (!fused_dot) t.run("dot", 16.0 * n, [&] { launch_dot(P.data(), Q.data(), n, ws, pq1, s); });
    } else {
      t.run("spmm", spmm_bytes, [&] { A.apply(1.0, P.data(), 0.0, Q.data(), k, s); });  // Q = A P
      t.run("dot", 16.0 * n * k, [&] {  // p_j'q_j
        launch_multi_cg_pq(n, k, P.data(), Q.data(), dsc.data(), ws, s, rank_sums.data());
      });
    }
    if (ranks) over_ranks(t, MultiCgStep::pq, k);
    t.run("update-xr", (dinv ? 64.0 : 48.0) * n * k, [&] {  // x_j += a_j p_j; r_j -= a_j q_j; rr_j, rz_j
      if (k == 1) launch_cg_update_xr(n, X, R.data(), P.data(), Q.data(), dinv, Z.data(), dsc.data(), ws, s, rank_sums.data());
      else launch_multi_cg_update_xr(n, k, X, R.data(), P.data(), Q.data(), dinv, Z.data(), dsc.data(), ws, s, rank_sums.data());
    });
    if (ranks) over_ranks(t, MultiCgStep::update_xr, 2 * k);
    t.run("update-p", 24.0 * n * k, [&] {  // p_j = z_j + b_j p_j
      if (k == 1) launch_cg_update_p(n, P.data(), zr, dsc.data(), s);
      else launch_multi_cg_update_p(n, k, P.data(), zr, dsc.data(), s);
    });
  };
  run_recurrences(dsc, hsc, k, first_column, s, timer, mon, runner, batch, iteration, res, ranks);
}

SolveResult solve_multi_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o) {
  const int k = B.cols;
  if (k > 128) throw UsageError("multi-cg supports at most 128 right-hand sides per solve");
  SolveFrame frame("multi-cg", B, o, A.ranks());
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  if (M && !dinv) {
    if (A.ranks()) throw UsageError("on several GPUs the preconditioner is none or jacobi (this one is not distributed)");
    pcg_general(A, *M, B.data(), X.data(), k, o, frame.stream(), frame.timer(), frame.monitor(), 0, frame.result());
    return frame.finish();
  }
  cg_recurrences(A, dinv, B.data(), X.data(), k, o, frame.stream(), frame.timer(), frame.monitor(), 0, frame.result());
  return frame.finish();
}

}  // namespace spcg
