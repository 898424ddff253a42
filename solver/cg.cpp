// Conjugate gradients (Hestenes & Stiefel 1952), optionally Jacobi-preconditioned, on the operator interface.
// Fused path: scalars stay on the device, three launches per iteration, the residual read every few iterations;
// one-reduction path: Chronopoulos & Gear's recurrence, one sum an iteration (several GPUs);
// Thrust path: one Thrust algorithm per vector step with host scalars (the reference).
#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/solver_ops/cg_ops.hpp"
#include "kernels/solver_ops/cg_one_reduction.hpp"
#include "kernels/solver_ops/cg_persistent.hpp"
#include "kernels/solver_ops/thrust_ops.hpp"
#include "solver/solver.hpp"

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

// Small systems: the whole loop in one cooperative launch per monitor interval (kernels/solver_ops/cg_persistent.cu).
// Its claim of convergence is confirmed by b - A x (A: the operator the view was made from); where that lies above
// the tolerance the column is left running and its iteration count returned, for the fused recurrence to take over
// from b - A x (else -1: the column is finished).
int cg_persistent(IterationEngine& e, const LinearOperator& A, const PersistentCgView& view, const double* dinv,
                  const double* b, double* x, int column) {
  const SolveOptions& o = e.options();
  const cudaStream_t s = e.stream();
  KernelTimer& timer = e.timer();
  Monitor& mon = e.monitor();
  SolveResult& res = e.result();
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
    const bool claim = hsc.status == kConverged && hsc.iteration > 0;  // (at the start: b - A x itself)
    double norm = std::sqrt(hsc.rr);
    if (claim) {  // the true residual decides (a drifted recursive residual is never reported converged)
      DeviceArray<double> r(static_cast<size_t>(n), "CG true residual");
      if (n) CHECK_CUDA(cudaMemcpyAsync(r.data(), b, n * sizeof(double), cudaMemcpyDeviceToDevice, s));
      A.apply(-1.0, x, 1.0, r.data(), 1, s);
      res.operator_applies += 1, res.operator_columns += 1;
      const ReductionWorkspace ws(reduction_blocks(std::max<int64_t>(n, 1)), 1);
      DeviceArray<double> rr(1, "CG true r'r");
      launch_dot(r.data(), r.data(), n, ws, rr.data(), s);
      double h = 0;
      CHECK_CUDA(cudaMemcpyAsync(&h, rr.data(), sizeof h, cudaMemcpyDeviceToHost, s));
      CHECK_CUDA(cudaStreamSynchronize(s));
      norm = std::sqrt(h);
    }
    mon.observe(column, hsc.iteration, norm);
    // (a claim that does not stand at the limit, or when interrupted, is finished by the monitor as such)
    if (claim && norm > mon.tolerance(column) && mon.status(column) == ColumnStatus::running) {
      res.residual_replacements += 1;
      if (history) {
        std::vector<double> h(static_cast<size_t>(std::min<int64_t>(hsc.iteration, history_slots)));
        CHECK_CUDA(cudaMemcpy(h.data(), history, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
        take_history(h, hsc.iteration - 1, mon, column);
      }
      res.used_persistent = true;
      return hsc.iteration;
    }
    if (hsc.done || mon.status(column) == ColumnStatus::interrupted) break;  // (an interrupt: between launches)
  }
  if (mon.status(column) == ColumnStatus::running || hsc.status != kConverged)
    mon.finish(column, from_device_status(hsc.status), hsc.iteration);
  if (history) {
    std::vector<double> h(static_cast<size_t>(std::min<int64_t>(hsc.iteration + 1, history_slots)));
    CHECK_CUDA(cudaMemcpy(h.data(), history, h.size() * sizeof(double), cudaMemcpyDeviceToHost));
    take_history(h, hsc.iteration, mon, column);
  }
  res.used_persistent = true;
  return -1;
}

// The reference path (--vector-ops thrust): one Thrust algorithm per vector step, scalars on the host.
void cg_thrust(IterationEngine& e, const LinearOperator& A, const PreconditionerOp* M, const double* b, double* x,
               int column) {
  const cudaStream_t s = e.stream();
  KernelTimer& timer = e.timer();
  Monitor& mon = e.monitor();
  SolveResult& res = e.result();
  const int64_t n = A.rows();
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  const double spmv_bytes = A.bytes_per_apply(1);
  DeviceArray<double> r(n, "CG residual"), p(n, "CG direction"), q(n, "CG A*p"), z(M ? n : 0, "CG z");
  double* zr = M ? z.data() : r.data();  // z = r without a preconditioner

  // r = b - A x
  timer.run("residual", spmv_bytes + 16.0 * n, [&] {
    CHECK_CUDA(cudaMemcpyAsync(r.data(), b, n * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, x, 1.0, r.data(), 1, s);
  });
  ++res.operator_applies, ++res.operator_columns;
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

// Chronopoulos & Gear's CG (kernels/solver_ops/cg_one_reduction.hpp): one sum of r'r, r'u and w'u an iteration,
// where the classic recurrence needs p'Ap, then r'r and r'z. Its recursive residual drifts further from b - A x
// than the classic one's, so where it says converged the engine asks for the true residual, which replaces it
// (a restart) when it still lies above the tolerance.
void cg_one_reduction(IterationEngine& e, const LinearOperator& A, const double* dinv, const double* b, double* x,
                      int column) {
  using Totals = OneReductionTotals;
  const cudaStream_t s = e.stream();
  KernelTimer& timer = e.timer();
  ReductionPolicy& sums = e.reductions();
  SolveResult& res = e.result();
  const int64_t n = A.rows();
  const LinearOperator& Ai = iteration_operator(A);  // mixed precision: the products on A's FP32 copy
  const double spmv_bytes = Ai.bytes_per_apply(1);
  DeviceArray<double> r(n, "CG residual"), u(dinv ? n : 0, "CG M^-1 r"), w(n, "CG A u"), p(n, "CG direction"),
      sv(n, "CG A p"), totals(Totals::count, "CG totals");
  double* ur = dinv ? u.data() : r.data();  // u = r without a preconditioner
  ReductionWorkspace ws(reduction_blocks(n), 2);
  IterationEngine::Recurrences rec = e.recurrences(1, column);
  CgScalars* sc = rec.scalars.data();
  // the step's sums: over the ranks (one GPU: as they are), then alpha and beta, or the status
  auto finish = [&](KernelTimer& t, bool start) {
    sums.sum_step(t, totals.data(), Totals::count, s);
    t.run("finish", 0.0, [&] { launch_cg_one_reduction_finish(totals.data(), sc, start, s); });
  };
  // w = A u, with w'u fused into the product's epilogue where it has one
  auto product = [&](KernelTimer& t) {
    bool fused = true;
    t.run("spmv", spmv_bytes, [&] { fused = apply_with_dot(Ai, ur, w.data(), ws.sink(totals.data() + Totals::wu), s); });
    if (!fused) t.run("dot", 16.0 * n, [&] { launch_dot(ur, w.data(), n, ws, totals.data() + Totals::wu, s); });
  };
  // (re)start from the true residual: r = b - A x; u = M^-1 r; p = s = 0; w = A u; the status by r'r
  auto start = [&] {
    timer.run("residual", A.bytes_per_apply(1) + 16.0 * n, [&] {
      if (n) CHECK_CUDA(cudaMemcpyAsync(r.data(), b, n * sizeof(double), cudaMemcpyDeviceToDevice, s));
      A.apply(-1.0, x, 1.0, r.data(), 1, s);
    });
    timer.run("cg-start", (dinv ? 48.0 : 24.0) * n, [&] {
      launch_cg_one_reduction_start(n, r.data(), dinv, u.data(), p.data(), sv.data(), ws, totals.data(), s);
    });
    product(timer);
    finish(timer, true);
    res.operator_applies += 2, res.operator_columns += 2;
  };
  start();
  res.used_one_reduction = true;
  e.run(
      rec,
      [&](KernelTimer& t) {
        // p = u + beta p; s = w + beta s; x += alpha p; r -= alpha s; u = M^-1 r; r'r, r'u
        t.run("update", (dinv ? 96.0 : 72.0) * n, [&] {
          launch_cg_one_reduction_update(n, x, r.data(), ur, w.data(), p.data(), sv.data(), dinv, sc, ws,
                                         totals.data(), s);
        });
        product(t);        // w = A u; w'u
        finish(t, false);  // beta = r'u / r'u_old; p'Ap = w'u - beta r'u / alpha_old; alpha = r'u / p'Ap
      },
      [&](int) {
        start();  // the true residual: its r'r decides, and it is the recurrence's new start when too large
        return e.confirmation_after_restart(sc);
      });
}

// One right-hand side (b and x contiguous n-vectors): a general M through the PCG steps, the reference path,
// the one-launch persistent CG where the operator keeps its layout, else the fused recurrence.
void cg_column(IterationEngine& e, const LinearOperator& A, const PreconditionerOp* M, const double* b, double* x,
               int column) {
  const SolveOptions& o = e.options();
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  if (o.vector_ops == VectorOps::thrust) return cg_thrust(e, A, M, b, x, column);
  if (M && !dinv) {
    if (o.recurrence == CgRecurrence::one_reduction) throw UsageError(one_reduction_refusal(M->report().kind));
    return pcg_general(e, A, *M, b, x, 1, column);
  }
  if (e.one_reduction_cg()) return cg_one_reduction(e, A, dinv, b, x, column);
  if (o.persistent != Switch::off) {
    const bool fp32_copy = &iteration_operator(A) != &A;  // mixed precision iterates on its FP32 copy: not this
    const PersistentCgMatrix* small = fp32_copy ? nullptr : persistent_cg_layout(A);
    const PersistentCgView view = small ? small->view() : PersistentCgView{};
    if (persistent_cg_suits(view, dinv != nullptr)) {
      const int unconfirmed = cg_persistent(e, A, view, dinv, b, x, column);
      if (unconfirmed < 0) return;
      return cg_recurrences(e, A, dinv, b, x, 1, column, unconfirmed);  // from b - A x, the count going on
    }
    if (o.persistent == Switch::on)
      throw UsageError("the persistent CG was asked for, but " +
                       std::string(fp32_copy ? "mixed precision iterates on an FP32 copy (--precision double keeps it)"
                                             : "this operator keeps no layout for it (kernel auto, n <= " +
                                                   std::to_string(PersistentCgLimits::max_rows) + ")"));
  }
  cg_recurrences(e, A, dinv, b, x, 1, column);
}

}  // namespace

SolveResult solve_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                     const SolveOptions& o) {
  IterationEngine e("cg", B, o, ranks_of(A));
  require_distributed(e, M);
  const int k = B.cols;
  const int64_t n = B.rows;
  const cudaStream_t stream = e.stream();
  DeviceArray<double> bcol(k > 1 ? n : 0, "column of B"), xcol(k > 1 ? n : 0, "column of X");
  for (int j = 0; j < k; ++j) {
    NvtxRange range("cg-column");
    if (k == 1) {
      cg_column(e, A, M, B.data(), X.data(), 0);
      continue;
    }
    // Columns of the row-major blocks are strided: gather, solve, scatter.
    CHECK_CUDA(cudaMemcpy2DAsync(bcol.data(), sizeof(double), B.data() + j, k * sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
    CHECK_CUDA(cudaMemcpy2DAsync(xcol.data(), sizeof(double), X.data() + j, k * sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
    cg_column(e, A, M, bcol.data(), xcol.data(), j);
    CHECK_CUDA(cudaMemcpy2DAsync(X.data() + j, k * sizeof(double), xcol.data(), sizeof(double), sizeof(double), n,
                                 cudaMemcpyDeviceToDevice, stream));
  }
  return e.finish();
}

}  // namespace spcg
