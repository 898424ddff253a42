// multi-cg: k independent CG recurrences (pseudo-block CG) sharing one SpMM per iteration, so A is read once
// for all k directions. Scalars stay on the device per column; a converged or broken-down column is frozen
// (its updates become no-ops) while the others go on. Each recurrence is its list of steps; the iteration
// engine runs them in batches and owns the sums (over the ranks on several GPUs).
#include <cmath>

#include "solver/solver.hpp"
#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {

void pcg_general(IterationEngine& e, const LinearOperator& A, const PreconditionerOp& M, const double* B, double* X,
                 int k, int first_column) {
  require_distributed(e, &M);
  const int64_t n = A.rows();
  const cudaStream_t s = e.stream();
  KernelTimer& timer = e.timer();
  ReductionPolicy& sums = e.reductions();
  M.reserve(k);
  // mixed precision (one recurrence): q = A p on A's FP32 copy, the true residual on A itself
  const LinearOperator& Ai = k == 1 ? iteration_operator(A) : A;
  const double spmm_bytes = Ai.bytes_per_apply(k), precond_bytes = M.bytes_per_apply(k), nk = double(n) * k;
  DeviceArray<double> R(n * k, "pcg residual"), P(n * k, "pcg directions"), Q(n * k, "pcg A*P"), Z(n * k, "pcg M^-1 R");
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  IterationEngine::Recurrences rec = e.recurrences(k, first_column);
  CgScalars* sc = rec.scalars.data();
  double* totals = sums.step_totals(k);  // null on one GPU: each step's kernel finishes its sums itself
  // (re)start from the true residual: R = B - A X; rr and the status by it; P = 0, so that the next iteration's
  // direction is z itself (p = z + beta 0). No M^-1 R here: each iteration begins with it, so M runs once an
  // iteration and never for a claim the true residual confirms (before, one V-cycle at the start and one in the
  // last iteration went unused: 16 for AMG-PCG's 14 iterations). restart: the iteration count goes on.
  auto start = [&](bool restart) {
    timer.run("residual", A.bytes_per_apply(k) + 16.0 * nk, [&] {
      if (n) CHECK_CUDA(cudaMemcpyAsync(R.data(), B, n * k * sizeof(double), cudaMemcpyDeviceToDevice, s));
      A.apply(-1.0, X, 1.0, R.data(), k, s);
    });
    e.result().operator_applies += 1, e.result().operator_columns += k;
    timer.run("cg-start", 16.0 * nk, [&] {  // rr_j = r_j'r_j (rz_j too, beta's first denominator); P = 0
      if (n) CHECK_CUDA(cudaMemsetAsync(P.data(), 0, n * k * sizeof(double), s));
      if (k == 1) launch_cg_start(n, R.data(), nullptr, nullptr, nullptr, sc, ws, s, totals, restart);
      else launch_multi_cg_start(n, k, R.data(), nullptr, nullptr, nullptr, sc, ws, s, totals);
    });
    sums.finish_step(timer, restart ? MultiCgStep::restart : MultiCgStep::start, k, sc, s);
  };
  start(false);
  double* pq = sums.dot_target(&sc->pq);  // k = 1: where p'q goes
  // One recurrence's claims are confirmed by the true residual b - A X, which decides, and restarts the recurrence
  // from itself when it lies above the tolerance (as cg's, below): the recursive residual of a long or
  // ill-conditioned PCG drifts from the true one, which alone may say converged. (k > 1: the columns share the
  // block's steps, and restarting one would restart all; their claims stand on the recursive residual.)
  IterationEngine::ConfirmConverged confirm;
  if (k == 1)
    confirm = [&](int) {
      start(true);
      return e.confirmation_after_restart(sc);
    };
  e.run(rec, [&](KernelTimer& t) {
    t.run("precond", precond_bytes, [&] { M.apply(R.data(), Z.data(), k, s); });                        // Z = M^-1 R
    t.run("rz", 16.0 * nk, [&] { launch_pcg_rz(n, k, R.data(), Z.data(), sc, ws, s, totals); });          // b_j = rz_new / rz
    sums.finish_step(t, MultiCgStep::pcg_rz, k, sc, s);
    t.run("update-p", 24.0 * nk, [&] {  // p_j = z_j + b_j p_j
      if (k == 1) launch_cg_update_p(n, P.data(), Z.data(), sc, s);
      else launch_multi_cg_update_p(n, k, P.data(), Z.data(), sc, s);
    });
    if (k == 1) {  // q = A p with p'q fused into the kernel's epilogue where it has one
      bool fused_dot = true;
      t.run("spmv", spmm_bytes, [&] { fused_dot = apply_with_dot(Ai, P.data(), Q.data(), ws.sink(pq), s); });
      if (!fused_dot) t.run("dot", 16.0 * nk, [&] { launch_dot(P.data(), Q.data(), n, ws, pq, s); });
    } else {
      t.run("spmm", spmm_bytes, [&] { A.apply(1.0, P.data(), 0.0, Q.data(), k, s); });                     // Q = A P
      t.run("dot", 16.0 * nk, [&] { launch_multi_cg_pq(n, k, P.data(), Q.data(), sc, ws, s, totals); });  // p_j'q_j
    }
    sums.finish_step(t, MultiCgStep::pq, k, sc, s);
    t.run("update-xr", 48.0 * nk, [&] {  // a_j = rz_j / p_j'q_j; x_j += a_j p_j; r_j -= a_j q_j; rr_j
      launch_pcg_update_xr(n, k, X, R.data(), P.data(), Q.data(), sc, ws, s, totals);
    });
    sums.finish_step(t, MultiCgStep::pcg_update_xr, k, sc, s);
  }, confirm);
}

void cg_recurrences(IterationEngine& e, const LinearOperator& A, const double* dinv, const double* B, double* X, int k,
                    int first_column, int first_iteration) {
  if (first_iteration > 0 && k != 1) throw Error("cg_recurrences: a count that goes on is one column's");
  const int64_t n = A.rows();
  const cudaStream_t s = e.stream();
  ReductionPolicy& sums = e.reductions();
  // mixed precision (one recurrence): the products on A's FP32 copy, the true residual on A itself
  const LinearOperator& Ai = k == 1 ? iteration_operator(A) : A;
  const double spmm_bytes = Ai.bytes_per_apply(k);
  DeviceArray<double> R(n * k, "cg residual"), P(n * k, "cg directions"), Q(n * k, "cg A*P"), Z(dinv ? n * k : 0, "cg z");
  double* zr = dinv ? Z.data() : R.data();  // z = r without a preconditioner
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  IterationEngine::Recurrences rec = e.recurrences(k, first_column, first_iteration);
  CgScalars* sc = rec.scalars.data();
  double* totals = sums.step_totals(k);  // null on one GPU: each step's kernel finishes its sums itself
  auto residual = [&] {
    e.timer().run("residual", A.bytes_per_apply(k) + 16.0 * n * k, [&] {  // R = B - A X
      if (n) CHECK_CUDA(cudaMemcpyAsync(R.data(), B, n * k * sizeof(double), cudaMemcpyDeviceToDevice, s));
      A.apply(-1.0, X, 1.0, R.data(), k, s);
    });
    e.result().operator_applies += 1, e.result().operator_columns += k;
  };
  // z = M^-1 r; p = z; rr, rz. k = 1 takes the one-vector kernels (several loads in flight per thread; the block
  // forms' thread-per-entry mapping streams ~30 % slower at k = 1). restart: the iteration count goes on.
  auto start = [&](bool restart) {
    e.timer().run("cg-start", (dinv ? 40.0 : 24.0) * n * k, [&] {
      if (k == 1) launch_cg_start(n, R.data(), dinv, Z.data(), P.data(), sc, ws, s, totals, restart);
      else launch_multi_cg_start(n, k, R.data(), dinv, Z.data(), P.data(), sc, ws, s, totals);
    });
    sums.finish_step(e.timer(), restart ? MultiCgStep::restart : MultiCgStep::start, k, sc, s);
  };
  residual();
  start(first_iteration > 0);  // (a restart keeps the count)
  double* pq = sums.dot_target(&sc->pq);  // k = 1: where p'q goes
  // Every claim of one recurrence is confirmed by the true residual b - A x (FP64 A), which decides and restarts
  // the recurrence from itself when it lies above the tolerance: a rounded copy's claims (mixed precision), and an
  // FP64 recursive residual that drifted from the true one over many iterations (poisson2d:4096's Jacobi-CG: 7706
  // iterations, the true residual 1.5e-8 where the recursive one claimed 1e-8). One product a solve where none is
  // needed.
  IterationEngine::ConfirmConverged confirm;
  if (k == 1)
    confirm = [&](int) {
      residual();
      start(true);
      return e.confirmation_after_restart(sc);
    };
  e.run(
      rec,
      [&](KernelTimer& t) {
        if (k == 1) {  // q = A p, with p'q fused into the kernel's epilogue where it has one
          bool fused_dot = true;
          t.run("spmv", spmm_bytes, [&] { fused_dot = apply_with_dot(Ai, P.data(), Q.data(), ws.sink(pq), s); });
          if (!fused_dot) t.run("dot", 16.0 * n, [&] { launch_dot(P.data(), Q.data(), n, ws, pq, s); });
        } else {
          t.run("spmm", spmm_bytes, [&] { Ai.apply(1.0, P.data(), 0.0, Q.data(), k, s); });                     // Q = A P
          t.run("dot", 16.0 * n * k, [&] { launch_multi_cg_pq(n, k, P.data(), Q.data(), sc, ws, s, totals); });  // p_j'q_j
        }
        sums.finish_step(t, MultiCgStep::pq, k, sc, s);
        t.run("update-xr", (dinv ? 64.0 : 48.0) * n * k, [&] {  // a_j = rz_j / p_j'q_j; x_j += a_j p_j; r_j -= a_j q_j; rr_j, rz_j
          if (k == 1) launch_cg_update_xr(n, X, R.data(), P.data(), Q.data(), dinv, Z.data(), sc, ws, s, totals);
          else launch_multi_cg_update_xr(n, k, X, R.data(), P.data(), Q.data(), dinv, Z.data(), sc, ws, s, totals);
        });
        sums.finish_step(t, MultiCgStep::update_xr, k, sc, s);
        t.run("update-p", 24.0 * n * k, [&] {  // p_j = z_j + b_j p_j
          if (k == 1) launch_cg_update_p(n, P.data(), zr, sc, s);
          else launch_multi_cg_update_p(n, k, P.data(), zr, sc, s);
        });
      },
      confirm);
}

SolveResult solve_multi_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o) {
  const int k = B.cols;
  if (k > 128) throw UsageError("multi-cg supports at most 128 right-hand sides per solve");
  IterationEngine e("multi-cg", B, o, ranks_of(A));
  const double* dinv = M ? M->inverse_diagonal() : nullptr;
  if (M && !dinv) pcg_general(e, A, *M, B.data(), X.data(), k, 0);
  else cg_recurrences(e, A, dinv, B.data(), X.data(), k, 0);
  return e.finish();
}

}  // namespace spcg
