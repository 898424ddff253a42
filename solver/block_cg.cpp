// block-cg: breakdown-free block CG (O'Leary 1980; Ji & Li, "Breakdown-free version of the block conjugate
// gradient method", 2017). The search block is A-orthonormalised every iteration by Cholesky-QR in the A inner
// product, with a pivoted Cholesky of the equilibrated W'AW that drops directions at a small A-angle to the kept
// ones (solver/small_dense.cpp): a duplicate or dependent right-hand side, or one that has converged, leaves the
// block instead of breaking it; a second pass (CholQR2) when W'AW is ill-conditioned. Pivoting on W'AW rather
// than W'W: H100, 42 SuiteSparse files x none/Jacobi at k = 16, 0.55x multi-cg's iterations instead of 0.71x
// (docs/perf-notes.md, "Pivoting on W'AW (an A-orthonormal P), kept"). Converged columns are frozen (their alpha columns are zeroed) while their
// directions stay in the Krylov space of the others. The running columns go on as multi-cg from the current X
// when W'AW or P'AP is not numerically positive definite, or when the block stalls (no new best residual in
// SolveOptions::stagnation_window iterations, near the target or with a block that has lost rank).
// The A-orthonormal block is kept implicit, P = W T (T from the Cholesky factor, m x r), so no pass writes P:
// every product with P is a product with W and a small matrix, and one Gram pass gives all the k x k data:
//   R = B - A X;  W = M^-1 R
//   loop: V = A W                                                      (Q = A P = V T)
//         [W, M^-1 V]' [V, R]        -> T = chol(W'V)^-1 (P = W T),  P'Q = T'(W'V)T = I,  P'R = T'(W'R)
//         alpha = (P'Q)^-1 P'R;  X += W (T alpha);  R -= V (T alpha)
//         Q'Z = T'(V'M^-1 R - V'M^-1 V T alpha)                       (Z = M^-1 R for the new R, no pass)
//         beta = -(P'Q)^-1 Q'Z;  W = Z(:, act) + W (T beta(:, act))
// P'Q is I up to rounding; it is still formed and solved with (an SPD check for free). beta needs only G and
// alpha, so for m, k <= 16 the X and R updates, the norms and the next W are one pass on tensor cores
// (launch_block_step); W keeps the columns running before the new norms are known, so a column that converges
// leaves W one step later (its alpha column is zeroed meanwhile). Wider blocks: R's update, then a combine that
// also pays the deferred X += W (T alpha).
// Dense n x m passes through our streaming kernels (kernels/solver_ops/block_ops.cu) for k <= 32, cuBLAS beyond; the
// small k x k work on the host.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "block_ops.hpp"
#include "iteration_runner.hpp"
#include "small_dense.hpp"
#include "solver.hpp"
#include "vector_ops.hpp"

namespace spcg {
namespace {

class Blas {
 public:
  explicit Blas(cudaStream_t s) {
    CHECK_CUBLAS(cublasCreate(&h_));
    CHECK_CUBLAS(cublasSetStream(h_, s));
    CHECK_CUBLAS(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
  }
  ~Blas() { cublasDestroy(h_); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // Row-major blocks are column-major transposes: U (n x a) is Uc (a x n, ld a).
  // C (a x b, col-major, leading dimension ldc, device) = U' V for U n x a, V n x b.
  void gram(const double* U, int a, const double* V, int b, int64_t n, double* C, int ldc) {
    if (a == 0 || b == 0) return;
    const double one = 1, zero = 0;
    CHECK_CUBLAS(cublasDgemm(h_, CUBLAS_OP_N, CUBLAS_OP_T, a, b, static_cast<int>(n), &one, U, a, V, b, &zero, C, ldc));
  }
  // Y (n x b) = beta Y + U (n x a) * M (a x b, device col-major).
  void update(double* Y, int b, const double* U, int a, const double* M, double beta, int64_t n) {
    const double one = 1;
    // Yc (b x n) = M' (b x a) Uc (a x n) + beta Yc
    CHECK_CUBLAS(cublasDgemm(h_, CUBLAS_OP_T, CUBLAS_OP_N, b, static_cast<int>(n), a, &one, M, a, U, a, &beta, Y, b));
  }

 private:
  cublasHandle_t h_ = nullptr;
};

// The n x m dense steps of block CG: our streaming kernels (kernels/solver_ops/block_ops.cu) up to 32 right-hand sides,
// cuBLAS beyond (row scalings then go through a scratch block). Small matrices travel host <-> device through
// one staging buffer on the solver's stream.
class DenseSteps {
 public:
  DenseSteps(int k, int64_t n, cudaStream_t s)
      : s_(s), n_(n), own_(k <= kBlockOpsMaxColumns), small_(static_cast<size_t>(6) * k * k, "block-cg small"),
        readback_(static_cast<size_t>(6) * k * k, "block-cg readback"), sel_(k, "block-cg column map") {
    if (own_) {
      ws_ = std::make_unique<BlockOpsWorkspace>(k);
    } else {
      blas_ = std::make_unique<Blas>(s);
      scratch_ = DeviceArray<double>(static_cast<size_t>(n) * k, "block-cg scratch");
    }
  }
  // [U1, diag(d) U2]' [V1, V2, V3] as a host matrix.
  Small gram(const GramInputs& g) {
    const int a = g.a1 + g.a2, b = g.b1 + g.b2 + g.b3;
    Small G(a, b);
    if (a == 0 || b == 0) return G;
    if (own_) {
      launch_block_gram(n_, g, small_.data(), *ws_, s_);
    } else {
      double* out = small_.data();
      const double* U2 = g.U2;
      if (g.a2 && g.u2_row_scale) {
        launch_row_scale(n_, g.a2, g.u2_row_scale, g.U2, scratch_.data(), s_);
        U2 = scratch_.data();
      }
      const std::pair<const double*, int> right[] = {{g.V1, g.b1}, {g.V2, g.b2}, {g.V3, g.b3}};
      size_t col = 0;
      for (const auto& [Vb, bb] : right) {
        blas_->gram(g.U1, g.a1, Vb, bb, n_, out + col * a, a);
        blas_->gram(U2, g.a2, Vb, bb, n_, out + col * a + g.a1, a);
        col += bb;
      }
    }
    read_back(small_.data(), G.a);
    return G;
  }
  // Y (n x b) = diag(d) C(:, cols) + U (n x a) M; C (ldc columns) and d optional. Y must not overlap U or C.
  // With X and A2 (a x k): also X += U A2, in the same pass over U.
  void combine(double* Y, int b, const double* U, int a, const Small& M, const double* C = nullptr, int ldc = 0,
               const std::vector<int>& cols = {}, const double* d = nullptr, double* X = nullptr, int k = 0,
               const Small* A2 = nullptr) {
    if (own_) {
      upload(M);
      if (X) upload(*A2, static_cast<size_t>(M.rows) * std::max(M.cols, 1));  // after M in the staging buffer
      bool first_columns = true;  // C(:, cols) is C's first b columns: read as rows, no column map
      for (size_t c = 0; c < cols.size(); ++c) first_columns &= cols[c] == static_cast<int>(c);
      if (C && !first_columns)
        CHECK_CUDA(cudaMemcpyAsync(sel_.data(), cols.data(), cols.size() * sizeof(int), cudaMemcpyHostToDevice, s_));
      launch_block_combine(n_, Y, b, U, a, small_.data(), C, ldc, C && !first_columns ? sel_.data() : nullptr, C ? d : nullptr, s_, X, k,
                           X ? small_.data() + static_cast<size_t>(M.rows) * std::max(M.cols, 1) : nullptr);
    } else {
      if (X) {
        upload(*A2);
        blas_->update(X, k, U, a, small_.data(), 1.0, n_);
        CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused
        if (b == 0) return;
      }
      double beta = 0.0;
      if (C) {  // cuBLAS: scale, gather by a selection product, then accumulate
        const double* Z = C;
        if (d) {
          launch_row_scale(n_, ldc, d, C, scratch_.data(), s_);
          Z = scratch_.data();
        }
        Small S(ldc, b);
        for (int c = 0; c < b; ++c) S(cols[c], c) = 1.0;
        upload(S);
        blas_->update(Y, b, Z, ldc, small_.data(), 0.0, n_);
        CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused
        beta = 1.0;
      }
      if (a > 0) {
        upload(M);
        blas_->update(Y, b, U, a, small_.data(), beta, n_);
      } else if (!C) {
        CHECK_CUDA(cudaMemsetAsync(Y, 0, static_cast<size_t>(n_) * b * sizeof(double), s_));
      }
    }
    // The uploads above come from pageable memory, which the driver copies out before returning, and the
    // kernels that read the staging buffer run in stream order: no wait here (the next Gram read-back waits).
    if (!own_) CHECK_CUDA(cudaStreamSynchronize(s_));
  }
  bool fuses(int m, int k) const { return own_ && m <= kBlockStepMaxColumns && k <= kBlockStepMaxColumns; }
  // One pass (fuses(m, k)): X += W Ta; R -= V Ta; Wn = diag(d) R(:, act) + W Tb(:, act); returns ||R(:, c)||^2.
  std::vector<double> step(double* X, double* R, int k, const double* W, const double* V, int m, const Small& Ta,
                           const Small& Tb, const std::vector<int>& act, const double* d, double* Wn,
                           DeviceArray<double>& norms) {
    std::vector<double> rr(k);
    std::vector<int> pos(k, -1);
    bool in_order = static_cast<int>(act.size()) == k;
    for (size_t c = 0; c < act.size(); ++c) {
      pos[act[c]] = static_cast<int>(c);
      in_order &= act[c] == static_cast<int>(c);
    }
    upload(Ta);
    upload(Tb, Ta.a.size());
    CHECK_CUDA(cudaMemcpyAsync(sel_.data(), pos.data(), pos.size() * sizeof(int), cudaMemcpyHostToDevice, s_));
    launch_block_step(n_, m, k, W, V, R, X, d, small_.data(), small_.data() + Ta.a.size(), sel_.data(),
                      static_cast<int>(act.size()), in_order, Wn, norms.data(), *ws_, s_);
    read_back(norms.data(), rr);
    return rr;
  }
  // X += W A (unless X is null: the caller owes it); R -= V A; returns ||R(:, c)||^2.
  std::vector<double> update_xr(double* X, double* R, int k, const double* W, const double* V, int m, const Small& A,
                                DeviceArray<double>& norms, const ReductionWorkspace& rws) {
    std::vector<double> rr(k);
    upload(A);
    if (own_) {
      launch_block_update_xr(n_, k, m, X, R, W, V, small_.data(), norms.data(), *ws_, s_);
    } else {
      if (X) blas_->update(X, k, W, m, small_.data(), 1.0, n_);
      Small neg = A;
      for (double& v : neg.a) v = -v;
      CHECK_CUDA(cudaStreamSynchronize(s_));
      upload(neg);
      blas_->update(R, k, V, m, small_.data(), 1.0, n_);
      launch_column_dots(n_, k, R, R, rws, norms.data(), s_);
    }
    read_back(norms.data(), rr);
    return rr;
  }

 private:
  void upload(const Small& M, size_t offset = 0) {
    CHECK_CUDA(cudaMemcpyAsync(small_.data() + offset, M.a.data(), M.a.size() * sizeof(double), cudaMemcpyHostToDevice, s_));
  }
  // dst (host) = src (device, dst.size() entries) through the page-locked buffer, after the stream's work.
  void read_back(const double* src, std::vector<double>& dst) {
    if (dst.size() > readback_.size()) throw Error("block-cg: read-back larger than its buffer");
    if (dst.empty()) return;
    CHECK_CUDA(cudaMemcpyAsync(readback_.data(), src, dst.size() * sizeof(double), cudaMemcpyDeviceToHost, s_));
    CHECK_CUDA(cudaStreamSynchronize(s_));
    std::copy(readback_.data(), readback_.data() + dst.size(), dst.begin());
  }
  cudaStream_t s_;
  int64_t n_;
  bool own_;
  DeviceArray<double> small_;
  PinnedArray<double> readback_;
  DeviceArray<int> sel_;
  DeviceArray<double> scratch_;
  std::unique_ptr<BlockOpsWorkspace> ws_;
  std::unique_ptr<Blas> blas_;
};

struct BlockCgTuning {
  // A direction is dependent when the squared sine of its angle to the span of the kept ones in the A inner
  // product (the pivot of the equilibrated W'AW) is below this: far above the rounding of a duplicate or
  // combined right-hand side in the Gram pass (~1e-15), and low enough that directions of an ill-conditioned
  // block are kept (1e-12 made block CG stall on bcsstk04 without a preconditioner; docs/perf-notes.md,
  // "The multi-cg fallback was a bug in the Cholesky-QR factor"). A pivot below -drop means W'AW is indefinite.
  static constexpr double drop = 1e-13;
  static constexpr double stall_progress = 0.9;  // a new best residual must be below this times the last
  static constexpr double stall_near_target = 1e3;  // a full-rank block stalls only below this times rtol
  // With P = W T implicit, P'AP = T'(W'AW)T carries relative errors ~ cond(W'AW) eps: above this the block is
  // formed (P = W T) and A-orthonormalised again (CholQR2).
  static constexpr double second_pass_cond = 1e6;
};

}  // namespace

SolveResult solve_block_cg(const LinearOperator& A, const double* dinv, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o, cudaStream_t) {
  CudaStream s;
  SolveResult res;
  res.solver = "block-cg";
  const int k = B.cols;
  const int64_t n = B.rows;
  const std::vector<double> bn = column_norms(B, s);
  Monitor mon(o.stop, bn, o.monitor_every, o.keep_history);
  KernelTimer timer(o.time_kernels, s);
  DenseSteps dense(k, n, s);
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock R(n, k, "block-cg R"), V(n, k, "block-cg V"), W1(n, k, "block-cg W"), W2(n, k, "block-cg W'");
  double* W = W1.data();      // n x m, the unorthonormalised search block; P = W T
  double* spare = W2.data();  // the next W is formed here, then the two swap
  int m = 0, r = 0;           // columns of W and of P
  Small T;                    // m x r
  DeviceArray<double> norms(k, "block-cg norms");
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  const double nk = double(n) * k;

  timer.run("residual", A.bytes_per_apply(k) + 16.0 * nk, [&] {  // R = B - A X
    CHECK_CUDA(cudaMemcpyAsync(R.data(), B.data(), B.size() * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, X.data(), 1.0, R.data(), k, s);
  });
  res.operator_applies = 1, res.operator_columns = k;
  auto observe = [&](const std::vector<double>& rr, int it) {
    for (int j = 0; j < k; ++j) mon.observe(j, it, std::sqrt(rr[j]));
  };
  auto active_columns = [&] {
    std::vector<int> a;
    for (int j = 0; j < k; ++j)
      if (mon.status(j) == ColumnStatus::running) a.push_back(j);
    return a;
  };
  auto fail_active = [&](ColumnStatus st, int it) {
    for (int j : active_columns()) mon.finish(j, st, it);
  };
  // X += W Ta is deferred from the update into the next combine, which reads W anyway (one pass over W
  // fewer per iteration); it is owed while x_owed is set, and paid before anything reads X.
  Small owed_Ta;
  bool x_owed = false;
  auto pay_x = [&] {
    if (!x_owed) return;
    timer.run("update-x", 8.0 * n * (m + 2 * k), [&] {
      dense.combine(nullptr, 0, W, m, Small(m, 0), nullptr, 0, {}, nullptr, X.data(), k, &owed_Ta);
    });
    x_owed = false;
  };
  // The running columns go on as independent CG recurrences (multi-cg) from the current X; their statuses and
  // iteration counts (it + multi-cg's) come from that solve.
  auto finish_with_multi_cg = [&](int it, const std::string& reason) {
    res.fallback_reason = reason;
    pay_x();
    const std::vector<int> cols = active_columns();
    const int a = static_cast<int>(cols.size());
    DeviceBlock Bs(n, a, "block-cg fallback B"), Xs(n, a, "block-cg fallback X");
    auto copy_column = [&](double* dst, int dst_cols, int dst_col, const double* src, int src_cols, int src_col) {
      CHECK_CUDA(cudaMemcpy2DAsync(dst + dst_col, dst_cols * sizeof(double), src + src_col, src_cols * sizeof(double),
                                   sizeof(double), static_cast<size_t>(n), cudaMemcpyDeviceToDevice, s));
    };
    for (int c = 0; c < a; ++c) {
      copy_column(Bs.data(), a, c, B.data(), k, cols[c]);
      copy_column(Xs.data(), a, c, X.data(), k, cols[c]);
    }
    SolveOptions so = o;
    so.stop.max_iterations = std::max(0, o.stop.max_iterations - it);
    so.keep_history = false;
    const SolveResult sub = solve_multi_cg(A, dinv, Bs, Xs, so, s);
    for (int c = 0; c < a; ++c) copy_column(X.data(), k, cols[c], Xs.data(), a, c);
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int c = 0; c < a; ++c) {
      const ColumnResult& cr = sub.columns[c];
      mon.observe(cols[c], it + cr.iterations, cr.recursive_residual);
      mon.finish(cols[c], cr.status, it + cr.iterations);
    }
    res.operator_applies += sub.operator_applies, res.operator_columns += sub.operator_columns;
    for (const KernelStat& ks : sub.kernels) timer.add("fallback-" + ks.name, ks);
    res.fallback_columns = a;
  };
  // W = M^-1 R(:, act) + W_old Tb, formed in the spare block (Tb empty: no W_old term); the owed X += W_old Ta
  // in the same pass.
  auto form_w = [&](const std::vector<int>& act, const Small& Tb) {
    const int m_new = static_cast<int>(act.size());
    const bool with_x = x_owed && Tb.rows == m && m > 0;
    if (x_owed && !with_x) pay_x();
    timer.run("combine", 8.0 * n * (Tb.rows + 2 * m_new + (dinv ? 1 : 0) + (with_x ? 2 * k : 0)), [&] {
      dense.combine(spare, m_new, W, Tb.rows, Tb, R.data(), k, act, dinv, with_x ? X.data() : nullptr, k,
                    with_x ? &owed_Ta : nullptr);
    });
    x_owed = false;
    std::swap(W, spare);
    m = m_new;
  };
  // Stall watch: the largest relative residual among the running columns must reach a new best (below
  // stall_progress x the last) at least once every o.stagnation_window iterations. A full-rank block counts as
  // stalled only near its target (best within stall_near_target x rtol): there multi-cg finishes the columns in a
  // few iterations (bcsstk03: 26), while far from it the block is in CG's usual rise and plateau (bcsstk21
  // without a preconditioner stays above its starting residual for ~900 iterations, then block CG converges in
  // ~1900 where multi-cg from there needs ~14000; a block of rank 1 from duplicated right-hand sides is CG
  // itself). A rank-deficient block, with fewer kept directions than running columns that were independent at
  // the start, stalls anywhere: those directions were lost to rounding (docs/perf-notes.md, "The stall watch cut
  // block CG off in CG's initial rise").
  double best_worst = std::numeric_limits<double>::infinity();
  int best_at = 0;
  std::vector<bool> dependent_at_start(k, false);  // dropped by the first Cholesky: deflated, not lost
  auto rank_deficient = [&] {
    int independent = 0;
    for (int j : active_columns()) independent += !dependent_at_start[j];
    return r < independent;
  };
  auto stalled = [&](int it) {
    if (o.stagnation_window <= 0) return false;
    double worst = 0;
    for (int j : active_columns()) worst = std::max(worst, mon.residual(j) / std::max(bn[j], 1e-300));
    if (worst < BlockCgTuning::stall_progress * best_worst) best_worst = worst, best_at = it;
    return it - best_at >= o.stagnation_window &&
           (best_worst <= BlockCgTuning::stall_near_target * o.stop.rtol || rank_deficient());
  };
  auto stall_note = [&] {
    return "no progress in " + std::to_string(o.stagnation_window) + " iterations (largest relative residual of the running columns, " +
           (rank_deficient() ? "block of rank " + std::to_string(r) + ")" : "near the target)");
  };
  int it = 0;
  {
    std::vector<double> rr(k);
    timer.run("norms", 8.0 * nk, [&] { launch_column_dots(n, k, R.data(), R.data(), ws, norms.data(), s); });
    CHECK_CUDA(cudaMemcpyAsync(rr.data(), norms.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    observe(rr, 0);
  }
  std::vector<int> act = active_columns();
  std::vector<int> cols_of_w;  // the right-hand side of each column of W
  if (!act.empty()) {
    form_w(act, Small(0, static_cast<int>(act.size())));  // W = M^-1 R(:, act)
    cols_of_w = act;
  }
  while (!mon.all_done()) {
    // V = A W, then one Gram pass [W, M^-1 V]' [V, R]: W'AW = W'V for T as well as the products of the step.
    // T such that P = W T is A-orthonormal (P'AP = I): pivoted Cholesky of the equilibrated W'AW; RHS columns
    // whose direction was dropped are deflated, and a negative pivot means A is not positive definite on the
    // block. When W'AW is ill-conditioned, P = W T is formed and the pass repeats on it (CholQR2 in the A inner
    // product; the SpMM is redone).
    Small G, WtAW;
    bool second_pass = false, failed = false, indefinite = false;
    for (;;) {
      timer.run("spmm", A.bytes_per_apply(m), [&] { A.apply(1.0, W, 0.0, V.data(), m, s); });  // V = A W
      ++res.operator_applies, res.operator_columns += m;
      const GramInputs gin{W, m, V.data(), m, dinv, V.data(), m, R.data(), k};
      timer.run("gram", 8.0 * n * (2 * m + k + (dinv ? 1 : 0)), [&] { G = dense.gram(gin); });
      WtAW = sub(G, 0, 0, m, m);
      for (int i = 0; i < m; ++i)
        for (int j = 0; j < i; ++j) WtAW(i, j) = WtAW(j, i) = 0.5 * (WtAW(i, j) + WtAW(j, i));
      for (double v : WtAW.a) failed |= !std::isfinite(v);
      if (failed) break;
      // W columns of right-hand sides that stopped running in the last step (the one-pass step forms W before
      // it knows the new norms) stay out of P, as if W had been formed without them.
      std::vector<bool> stopped(m, false);
      if (!second_pass)
        for (int c = 0; c < m; ++c) stopped[c] = mon.status(cols_of_w[c]) != ColumnStatus::running;
      const Orth o = pivoted_cholqr(WtAW, second_pass ? 0.0 : BlockCgTuning::drop, stopped);
      if (o.negative_diagonal || o.rejected_pivot < -BlockCgTuning::drop) {
        indefinite = true;
        break;
      }
      if (second_pass) {
        failed = static_cast<int>(o.kept.size()) != r;
        T = o.T;
        break;
      }
      std::vector<bool> kept(m, false);
      for (int c : o.kept) kept[c] = true;
      for (int c = 0; c < m; ++c)
        if (!kept[c] && !stopped[c]) {
          mon.mark_deflated(cols_of_w[c]);
          if (it == 0) dependent_at_start[cols_of_w[c]] = true;
        }
      r = static_cast<int>(o.kept.size());
      T = o.T;
      if (r == 0 || o.pivot_ratio < BlockCgTuning::second_pass_cond) break;
      timer.run("orth", 8.0 * n * (m + r), [&] { dense.combine(spare, r, W, m, T); });  // P = W T, formed
      std::swap(W, spare);
      m = r;
      second_pass = true;
    }
    if (failed) {
      fail_active(ColumnStatus::non_finite, it);
      break;
    }
    if (indefinite) {
      finish_with_multi_cg(it, "W'AW of the block is not positive definite");
      break;
    }
    if (r == 0) {  // every remaining direction was dependent, yet columns run: the recurrence lost them
      finish_with_multi_cg(it, "every direction of the block dropped while columns still run");
      break;
    }
    // G = [W'V W'R; V'M^-1 V  V'M^-1 R]
    Small PtQ = tmatmul(T, matmul(sub(G, 0, 0, m, m), T));  // P'AP = T' W'V T (= I up to rounding)
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < i; ++j) PtQ(i, j) = PtQ(j, i) = 0.5 * (PtQ(i, j) + PtQ(j, i));
    Small alpha = tmatmul(T, sub(G, 0, m, m, k));  // alpha = (P'AP)^-1 P'R, frozen columns zeroed
    if (!spd_solve(PtQ, alpha)) {  // P'AP not SPD: A is not SPD on this subspace, or rounding
      bool finite = true;
      for (double v : PtQ.a) finite &= std::isfinite(v);
      if (finite) finish_with_multi_cg(it, "P'AP of the block lost positive definiteness");
      else fail_active(ColumnStatus::non_finite, it);
      break;
    }
    for (int j = 0; j < k; ++j)
      if (mon.status(j) != ColumnStatus::running)
        for (int i = 0; i < r; ++i) alpha(i, j) = 0.0;
    owed_Ta = matmul(T, alpha);  // P alpha = W (T alpha)
    const Small& Ta = owed_Ta;
    // Q'Z for the new R: T'(V'M^-1 R_old - V'M^-1 V Ta), so beta needs no pass over the new R
    Small VtZ = sub(G, m, m, m, k);
    const Small VtDVTa = matmul(sub(G, m, 0, m, m), Ta);
    for (size_t i = 0; i < VtZ.a.size(); ++i) VtZ.a[i] -= VtDVTa.a[i];
    Small beta = tmatmul(T, VtZ);  // beta = -(P'AP)^-1 Q'Z
    spd_solve(PtQ, beta);
    for (double& v : beta.a) v = -v;
    if (dense.fuses(m, k)) {
      // One pass: X += W Ta, R -= V Ta, ||R(:, j)||^2, and the next W = Z(:, act) + W T beta(:, act) for the
      // columns running now. A column that converges in this step leaves W one step later (its alpha column
      // is zeroed meanwhile): the search block is formed before the new norms are known.
      pay_x();
      act = active_columns();
      std::vector<double> rr;
      timer.run("step", 8.0 * n * (2 * m + 4 * k + static_cast<double>(act.size()) + (dinv ? 1 : 0)), [&] {
        rr = dense.step(X.data(), R.data(), k, W, V.data(), m, Ta, matmul(T, beta), act, dinv, spare, norms);
      });
      std::swap(W, spare);
      m = static_cast<int>(act.size());
      cols_of_w = act;
      ++it;
      observe(rr, it);
      if (!mon.all_done() && stalled(it)) {
        finish_with_multi_cg(it, stall_note());
        break;
      }
      continue;
    }
    std::vector<double> rr;
    // R -= V Ta; ||R(:, j)||^2; X += W Ta is owed (paid by the next combine)
    timer.run("update-r", 8.0 * n * (m + 2 * k), [&] {
      rr = dense.update_xr(nullptr, R.data(), k, nullptr, V.data(), m, owed_Ta, norms, ws);
    });
    x_owed = true;
    ++it;
    observe(rr, it);
    if (mon.all_done()) break;
    if (stalled(it)) {
      finish_with_multi_cg(it, stall_note());
      break;
    }
    act = active_columns();
    Small beta_act(r, static_cast<int>(act.size()));
    for (size_t c = 0; c < act.size(); ++c)
      for (int i = 0; i < r; ++i) beta_act(i, static_cast<int>(c)) = beta(i, act[c]);
    form_w(act, matmul(T, beta_act));  // W = Z(:, act) + W T beta(:, act)
    cols_of_w = act;
  }
  pay_x();
  finish_result(res, mon, bn, timer, t0, s);
  return res;
}

}  // namespace spcg
