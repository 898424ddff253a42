// Conjugate gradients (Hestenes & Stiefel 1952), optionally Jacobi-preconditioned, on the operator interface.
// Fused path: scalars stay on the device, three launches per iteration, the residual read every few iterations;
// Thrust path: one Thrust algorithm per vector step with host scalars (the reference).
#include <chrono>
#include <cmath>
#include <cstring>

#include "cg_persistent.hpp"
#include "iteration_runner.hpp"
#include "solver.hpp"
#include "thrust_ops.hpp"
#include "vector_ops.hpp"

namespace spcg {

ColumnStatus from_device_status(int status) {
  switch (status) {
    case kConverged: return ColumnStatus::converged;
    case kMaxIterations: return ColumnStatus::max_iterations;
    case kBreakdown: return ColumnStatus::breakdown;
    case kNonFinite: return ColumnStatus::non_finite;
    case kPrecondNotPositive: return ColumnStatus::precond_not_positive;
    default: return ColumnStatus::running;
  }
}

namespace {

// Copies the device residual history (squared norms) into the monitor's history of `column`.
void take_history(const std::vector<double>& h, int iterations, Monitor& mon, int column) {
  if (h.empty() || iterations <= 0) return;
  auto& hist = const_cast<std::vector<std::vector<std::pair<int, double>>>&>(mon.history());
  hist[column].clear();
  for (int i = 0; i <= std::min<int>(iterations, static_cast<int>(h.size()) - 1); ++i)
    hist[column].emplace_back(i, std::sqrt(h[i]));
}

// Small systems: the whole loop in one cooperative launch per monitor interval (kernels/solver_ops/cg_persistent.cu).
void cg_persistent(const PersistentCgView& view, const double* dinv, const double* b, double* x, const SolveOptions& o,
                   cudaStream_t s, KernelTimer& timer, Monitor& mon, int column, SolveResult& res) {
  const int64_t n = view.rows;
  // One allocation for everything (r, p, q x2, partial sums, piece sums, barrier counter, state, history): at
  // this size each cudaMalloc/cudaFree pair costs about as much as a CG iteration.
  constexpr int64_t state_slots = (sizeof(CgScalars) + sizeof(double) - 1) / sizeof(double);
  const int64_t history_slots = o.keep_history ? o.stop.max_iterations + 1 : 0;
  const int64_t vectors = 6 * n + persistent_cg_partials(view, dinv != nullptr);
  DeviceArray<double> work(vectors + 1 + state_slots + history_slots, "persistent CG workspace");
  CgScalars* state = reinterpret_cast<CgScalars*>(work.data() + vectors + 1);
  double* history = history_slots ? work.data() + vectors + 1 + state_slots : nullptr;
  CgScalars hsc{};
  hsc.tol2 = mon.tolerance(column) * mon.tolerance(column);
  hsc.max_iterations = o.stop.max_iterations;
  hsc.history = history;
  hsc.history_capacity = static_cast<int>(history_slots);
  CHECK_CUDA(cudaMemcpyAsync(state, &hsc, sizeof hsc, cudaMemcpyHostToDevice, s));
  PersistentCgProblem P;
  P.a = view, P.dinv = dinv, P.b = b, P.x = x;
  for (int i = 0; i < 2; ++i) P.r[i] = work.data() + i * n, P.p[i] = work.data() + (2 + i) * n, P.q[i] = work.data() + (4 + i) * n;
  P.partials = work.data() + 6 * n;
  P.barrier = reinterpret_cast<unsigned int*>(work.data() + vectors);
  P.state = state;
  const int batch = std::max(1, o.monitor_every > 0 ? o.monitor_every : o.stop.max_iterations);
  const double iteration_bytes = 12.0 * view.nnz + (dinv ? 96.0 : 80.0) * n;
  bool start = true;
  int done_before = 0;
  while (true) {
    timer.run("cg-persistent", iteration_bytes * batch, [&] { launch_persistent_cg(P, start, batch, s); });
    CHECK_CUDA(cudaMemcpyAsync(&hsc, state, sizeof hsc, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    timer.collect();
    res.operator_applies += hsc.iteration - done_before + (start ? 1 : 0);
    res.operator_columns += hsc.iteration - done_before + (start ? 1 : 0);
    done_before = hsc.iteration;
    start = false;
    mon.observe(column, hsc.iteration, std::sqrt(hsc.rr));
    if (hsc.done) break;
  }
  if (mon.status(column) == ColumnStatus::running || hsc.status != kConverged)
    mon.finish(column, from_device_status(hsc.status), hsc.iteration);
  if (history) {
    std::vector<double> h(static_cast<size_t>(std::min<int64_t>(hsc.iteration + 1, history_slots)));
    CHECK_CUDA(cudaMemcpy(h.data(), history, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
    take_history(h, hsc.iteration, mon, column);
  }
  res.used_persistent = true;
}

// One right-hand side; b and x are contiguous n-vectors on the device.
void cg_single(const LinearOperator& A, const PreconditionerOp* M, const double* b, double* x, const SolveOptions& o,
               cudaStream_t s, KernelTimer& timer, Monitor& mon, int column, SolveResult& res) {
  const int64_t n = A.rows();
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  if (M && !dinv && o.vector_ops == VectorOps::fused) return pcg_general(A, *M, b, x, 1, o, s, timer, mon, column, res);
  if (o.vector_ops == VectorOps::fused && o.persistent != Switch::off) {
    const PersistentCgMatrix* small = A.persistent_cg_matrix();
    const PersistentCgView view = small ? small->view() : PersistentCgView{};
    if (persistent_cg_suits(view, dinv != nullptr)) return cg_persistent(view, dinv, b, x, o, s, timer, mon, column, res);
    if (o.persistent == Switch::on)
      throw UsageError("the persistent CG was asked for, but this operator keeps no layout for it (kernel auto, n <= " +
                       std::to_string(PersistentCgLimits::max_rows) + ")");
  }
  const double spmv_bytes = A.bytes_per_apply(1);
  DeviceArray<double> r(n, "CG residual"), p(n, "CG direction"), q(n, "CG A*p"), z(M ? n : 0, "CG z");
  double* zr = M ? z.data() : r.data();  // z = r without a preconditioner
  const double update_bytes = (dinv ? 64.0 : 48.0) * n;

  // r = b - A x
  timer.run("residual", spmv_bytes + 16.0 * n, [&] {
    CHECK_CUDA(cudaMemcpyAsync(r.data(), b, n * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, x, 1.0, r.data(), 1, s);
  });
  ++res.operator_applies, ++res.operator_columns;
  const double tol = mon.tolerance(column);

  if (o.vector_ops == VectorOps::thrust) {
    auto dot = [&](const char* name, const double* u, const double* v) {
      double d = 0;
      timer.run(name, 16.0 * n, [&] { d = thrust_dot(u, v, n, s); });
      return d;
    };
    // z = M^-1 r: Jacobi as one Thrust transform (the reference), any other M through its apply
    auto precondition = [&] {
      if (dinv) timer.run("precond", 24.0 * n, [&] { thrust_mul(dinv, r.data(), z.data(), n, s); });
      else if (M) timer.run("precond", M->bytes_per_apply(1), [&] { M->apply(r.data(), z.data(), 1, s); });
    };
    if (M) M->reserve(1);
    precondition();
    timer.run("copy", 16.0 * n, [&] { thrust_copy(zr, p.data(), n, s); });
    double rz = dot("dot", r.data(), zr), rr = M ? dot("dot", r.data(), r.data()) : rz;
    int it = 0;
    if (mon.observe(column, it, std::sqrt(rr))) return;
    while (true) {
      timer.run("spmv", spmv_bytes, [&] { A.apply(1.0, p.data(), 0.0, q.data(), 1, s); });
      ++res.operator_applies, ++res.operator_columns;
      const double pq = dot("dot", p.data(), q.data());                  // p' A p
      if (!(pq > 0) || !std::isfinite(rz / pq)) {                         // not SPD (or NaN): stop honestly
        mon.finish(column, std::isfinite(pq) ? ColumnStatus::breakdown : ColumnStatus::non_finite, it);
        return;
      }
      const double alpha = rz / pq;                                       // alpha = r'z / p'Ap
      timer.run("axpy", 24.0 * n, [&] { thrust_axpy(alpha, p.data(), x, n, s); });          // x += alpha p
      timer.run("axpy", 24.0 * n, [&] { thrust_axpy(-alpha, q.data(), r.data(), n, s); });  // r -= alpha A p
      precondition();                                                     // z = M^-1 r
      const double rz_new = dot("dot", r.data(), zr);
      rr = M ? dot("dot", r.data(), r.data()) : rz_new;
      ++it;
      if (mon.observe(column, it, std::sqrt(rr))) return;
      if (M && !(rz_new > 0)) {  // r'M^-1 r <= 0 with r != 0: M is not positive definite
        mon.finish(column, std::isfinite(rz_new) ? ColumnStatus::precond_not_positive : ColumnStatus::non_finite, it);
        return;
      }
      timer.run("xpby", 24.0 * n, [&] { thrust_xpby(zr, rz_new / rz, p.data(), n, s); });  // p = z + beta p
      rz = rz_new;
    }
  }

  // Fused path.
  ReductionWorkspace ws(reduction_blocks(n), 2);
  DeviceArray<CgScalars> dsc(1, "CG scalars");
  DeviceArray<double> history(o.keep_history ? o.stop.max_iterations + 1 : 0, "residual history");
  CgScalars hsc{};
  hsc.tol2 = tol * tol;
  hsc.max_iterations = o.stop.max_iterations;
  hsc.history = history.data();
  hsc.history_capacity = static_cast<int>(history.size());
  CHECK_CUDA(cudaMemcpyAsync(dsc.data(), &hsc, sizeof hsc, cudaMemcpyHostToDevice, s));
  timer.run("cg-start", (dinv ? 40.0 : 24.0) * n, [&] { launch_cg_start(n, r.data(), dinv, z.data(), p.data(), dsc.data(), ws, s); });

  const bool use_graph = o.graph == Switch::on || (o.graph == Switch::automatic && !timer.enabled());
  IterationRunner runner(s, use_graph, timer);
  res.used_graph = use_graph;
  const int batch = std::max(1, o.monitor_every > 0 ? std::min(o.check_every, o.monitor_every) : o.check_every);
  bool fused_dot = true;
  auto iteration = [&](KernelTimer& t) {
    // q = A p, with p'q fused into the kernel's epilogue where the kernel has one
    t.run("spmv", spmv_bytes, [&] {
      fused_dot = A.apply_with_dot(p.data(), q.data(), ws.sink(&dsc.data()->pq), s);
      if (!fused_dot) A.apply(1.0, p.data(), 0.0, q.data(), 1, s);
    });
    if (!fused_dot) t.run("dot", 16.0 * n, [&] { launch_dot(p.data(), q.data(), n, ws, &dsc.data()->pq, s); });
    // alpha = r'z / p'q; x += alpha p; r -= alpha q; z = M^-1 r; rr, rz; beta = rz_new / rz
    t.run("update-xr", update_bytes, [&] { launch_cg_update_xr(n, x, r.data(), p.data(), q.data(), dinv, z.data(), dsc.data(), ws, s); });
    // p = z + beta p
    t.run("update-p", 24.0 * n, [&] { launch_cg_update_p(n, p.data(), zr, dsc.data(), s); });
  };
  int last_reported = -1;
  while (true) {
    CHECK_CUDA(cudaMemcpyAsync(&hsc, dsc.data(), sizeof hsc, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    timer.collect();
    if (hsc.iteration != last_reported) {
      mon.observe(column, hsc.iteration, std::sqrt(hsc.rr));
      last_reported = hsc.iteration;
    }
    if (hsc.done) break;
    runner.run([&](KernelTimer& t) {
      for (int i = 0; i < batch; ++i) iteration(t);
    });
    res.operator_applies += batch, res.operator_columns += batch;
  }
  // (operator_applies counts what ran: the SpMVs of a batch after convergence ran too, as no-op iterations.)
  if (mon.status(column) == ColumnStatus::running)
    mon.finish(column, hsc.status == kConverged ? ColumnStatus::converged : from_device_status(hsc.status), hsc.iteration);
  if (history.size()) take_history(history.download(), hsc.iteration, mon, column);
}

}  // namespace

SolveResult solve_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                     const SolveOptions& o) {
  SolveFrame frame("cg", B, o, A.ranks());
  const cudaStream_t stream = frame.stream();
  SolveResult& res = frame.result();
  Monitor& mon = frame.monitor();
  KernelTimer& timer = frame.timer();
  const int k = B.cols;
  const int64_t n = B.rows;
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  if (A.ranks() && ((M && !dinv) || o.vector_ops != VectorOps::fused))
    throw UsageError("on several GPUs cg runs the fused kernels with no preconditioner or jacobi");
  // one column: several GPUs take the fused recurrence with its sums over the ranks; one GPU picks its path
  auto one_column = [&](const double* b, double* x, int column) {
    if (A.ranks()) cg_recurrences(A, dinv, b, x, 1, o, stream, timer, mon, column, res);
    else cg_single(A, M, b, x, o, stream, timer, mon, column, res);
  };
  DeviceArray<double> bcol(k > 1 ? n : 0, "column of B"), xcol(k > 1 ? n : 0, "column of X");
  for (int j = 0; j < k; ++j) {
    NvtxRange range("cg-column");
    if (k == 1) {
      one_column(B.data(), X.data(), 0);
      continue;
    }
    // Columns of the row-major blocks are strided: gather, solve, scatter.
    CHECK_CUDA(cudaMemcpy2DAsync(bcol.data(), sizeof(double), B.data() + j, k * sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaMemcpy2DAsync(xcol.data(), sizeof(double), X.data() + j, k * sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
    one_column(bcol.data(), xcol.data(), j);
    CHECK_CUDA(cudaMemcpy2DAsync(X.data() + j, k * sizeof(double), xcol.data(), sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
  }
  return frame.finish();
}

}  // namespace spcg
