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
// The dense n x m passes are the device half's (kernels/solver_ops/block_steps.hpp: our streaming kernels for
// k <= 32, cuBLAS beyond); the small k x k work is on the host (solver/small_dense.hpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <numeric>
#include <string>

#include "kernels/solver_ops/block_steps.hpp"
#include "solver/small_dense.hpp"
#include "solver/solver.hpp"
#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {
namespace {

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

// One block CG solve. The state that lives across iterations is members; each method is a step of the
// recurrence in the file's header comment, and run() is its loop.
class BlockCg {
 public:
  BlockCg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X, const SolveOptions& o)
      : A_(A), M_(M), dinv_(M ? M->inverse_diagonal() : nullptr), general_(M && !dinv_ ? M : nullptr), B_(B), X_(X), o_(o), engine_("block-cg", B, o, ranks_of(A)), s_(engine_.stream()), mon_(engine_.monitor()),
        timer_(engine_.timer()), res_(engine_.result()), k_(B.cols), n_(B.rows), dense_(k_, n_, s_, engine_.reductions().communicator()),
        R_(n_, k_, "block-cg R"), V_(n_, k_, "block-cg V"), W1_(n_, k_, "block-cg W"), W2_(n_, k_, "block-cg W'"),
        W_(W1_.data()), spare_(W2_.data()), norms_(k_, "block-cg norms"), ws_(reduction_blocks(n_ * k_), 2 * k_),
        dependent_at_start_(k_, false), ZR_(general_ ? n_ : 0, k_, "block-cg M^-1 R"), ZV_(general_ ? n_ : 0, k_, "block-cg M^-1 V"),
        zr_norms_(general_ ? k_ : 0, "block-cg M^-1 R norms") {
    require_distributed(engine_, M);
    if (general_) general_->reserve(k_);
    engine_.start_clock();  // the dense steps' buffers (page-locked read-back included) are allocated outside the solve time
  }

  SolveResult run() {
    start();
    while (!mon_.all_done()) {
      const Orthonormalised orth = orthonormalise();
      if (orth == Orthonormalised::non_finite) {
        fail_active(ColumnStatus::non_finite);
        break;
      }
      if (orth == Orthonormalised::indefinite) {
        fall_back("W'AW of the block is not positive definite");
        break;
      }
      if (r_ == 0) {  // every remaining direction was dependent, yet columns run: the recurrence lost them
        fall_back("every direction of the block dropped while columns still run");
        break;
      }
      Small Ta, Tbeta;
      if (!coefficients(Ta, Tbeta)) break;
      if (!advance(Ta, Tbeta)) break;
    }
    pay_x();
    return engine_.finish();
  }

 private:
  enum class Orthonormalised { ok, non_finite, indefinite };

  // R = B - A X; the first residual norms; W = M^-1 R(:, running).
  void start() {
    const double nk = double(n_) * k_;
    timer_.run("residual", A_.bytes_per_apply(k_) + 16.0 * nk, [&] {
      CHECK_CUDA(cudaMemcpyAsync(R_.data(), B_.data(), B_.size() * sizeof(double), cudaMemcpyDeviceToDevice, s_));
      A_.apply(-1.0, X_.data(), 1.0, R_.data(), k_, s_);
    });
    res_.operator_applies = 1, res_.operator_columns = k_;
    std::vector<double> rr(k_);
    timer_.run("norms", 8.0 * nk, [&] { launch_column_dots(n_, k_, R_.data(), R_.data(), ws_, norms_.data(), s_); });
    engine_.reductions().sum(norms_.data(), static_cast<size_t>(k_), s_);
    CHECK_CUDA(cudaMemcpyAsync(rr.data(), norms_.data(), k_ * sizeof(double), cudaMemcpyDeviceToHost, s_));
    engine_.reductions().wait(s_);
    observe(rr);
    if (general_)  // Z = M^-1 R, kept up to date by Z -= (M^-1 V) Ta as R is by R -= V Ta
      timer_.run("precond", general_->bytes_per_apply(k_), [&] { general_->apply(R_.data(), ZR_.data(), k_, s_); });
    const std::vector<int> act = active_columns();
    if (!act.empty()) {
      form_w(act, Small(0, static_cast<int>(act.size())));  // W = M^-1 R(:, act)
      cols_of_w_ = act;
    }
  }

  // V = A W, then one Gram pass G = [W, M^-1 V]' [V, R]: W'AW = W'V for T as well as the products of the step.
  // T such that P = W T is A-orthonormal (P'AP = I): pivoted Cholesky of the equilibrated W'AW; RHS columns
  // whose direction was dropped are deflated, and a negative pivot means A is not positive definite on the
  // block. When W'AW is ill-conditioned, P = W T is formed and the pass repeats on it (CholQR2 in the A inner
  // product; the SpMM is redone).
  Orthonormalised orthonormalise() {
    bool second_pass = false;
    for (;;) {
      timer_.run("spmm", A_.bytes_per_apply(m_), [&] { A_.apply(1.0, W_, 0.0, V_.data(), m_, s_); });  // V = A W
      ++res_.operator_applies, res_.operator_columns += m_;
      if (general_)  // M^-1 V for the Gram pass (Jacobi scales V's rows inside it instead)
        timer_.run("precond", general_->bytes_per_apply(m_), [&] { general_->apply(V_.data(), ZV_.data(), m_, s_); });
      const GramInputs gin{W_, m_, general_ ? ZV_.data() : V_.data(), m_, dinv_, V_.data(), m_, R_.data(), k_};
      timer_.run("gram", 8.0 * n_ * (2 * m_ + k_ + (dinv_ ? 1 : 0)), [&] { G_ = dense_.gram(gin); });
      Small WtAW = sub(G_, 0, 0, m_, m_);
      for (int i = 0; i < m_; ++i)
        for (int j = 0; j < i; ++j) WtAW(i, j) = WtAW(j, i) = 0.5 * (WtAW(i, j) + WtAW(j, i));
      for (double v : WtAW.a)
        if (!std::isfinite(v)) return Orthonormalised::non_finite;
      // W columns of right-hand sides that stopped running in the last step (the one-pass step forms W before
      // it knows the new norms) stay out of P, as if W had been formed without them.
      std::vector<bool> stopped(m_, false);
      if (!second_pass)
        for (int c = 0; c < m_; ++c) stopped[c] = mon_.status(cols_of_w_[c]) != ColumnStatus::running;
      const Orth orth = pivoted_cholqr(WtAW, second_pass ? 0.0 : BlockCgTuning::drop, stopped);
      if (orth.negative_diagonal || orth.rejected_pivot < -BlockCgTuning::drop) return Orthonormalised::indefinite;
      if (second_pass) {
        T_ = orth.T;
        return static_cast<int>(orth.kept.size()) != r_ ? Orthonormalised::non_finite : Orthonormalised::ok;
      }
      std::vector<bool> kept(m_, false);
      for (int c : orth.kept) kept[c] = true;
      for (int c = 0; c < m_; ++c)
        if (!kept[c] && !stopped[c]) {
          mon_.mark_deflated(cols_of_w_[c]);
          if (it_ == 0) dependent_at_start_[cols_of_w_[c]] = true;
        }
      r_ = static_cast<int>(orth.kept.size());
      T_ = orth.T;
      if (r_ == 0 || orth.pivot_ratio < BlockCgTuning::second_pass_cond) return Orthonormalised::ok;
      timer_.run("orth", 8.0 * n_ * (m_ + r_), [&] { dense_.combine(spare_, r_, W_, m_, T_); });  // P = W T, formed
      std::swap(W_, spare_);
      m_ = r_;
      second_pass = true;
    }
  }

  // From G = [W'V W'R; V'M^-1 V  V'M^-1 R]: Ta = T alpha (P alpha = W Ta) and Tbeta = T beta, with
  //   alpha = (P'AP)^-1 P'R (frozen columns zeroed),  beta = -(P'AP)^-1 Q'Z,  Q'Z = T'(V'M^-1 R - V'M^-1 V Ta).
  // False when P'AP is not SPD (the columns then went on as multi-cg, or were marked non-finite).
  bool coefficients(Small& Ta, Small& Tbeta) {
    Small PtQ = tmatmul(T_, matmul(sub(G_, 0, 0, m_, m_), T_));  // P'AP = T' W'V T (= I up to rounding)
    for (int i = 0; i < r_; ++i)
      for (int j = 0; j < i; ++j) PtQ(i, j) = PtQ(j, i) = 0.5 * (PtQ(i, j) + PtQ(j, i));
    Small alpha = tmatmul(T_, sub(G_, 0, m_, m_, k_));  // P'R
    if (!spd_solve(PtQ, alpha)) {  // P'AP not SPD: A is not SPD on this subspace, or rounding
      bool finite = true;
      for (double v : PtQ.a) finite &= std::isfinite(v);
      if (finite) fall_back("P'AP of the block lost positive definiteness");
      else fail_active(ColumnStatus::non_finite);
      return false;
    }
    for (int j = 0; j < k_; ++j)
      if (mon_.status(j) != ColumnStatus::running)
        for (int i = 0; i < r_; ++i) alpha(i, j) = 0.0;
    Ta = matmul(T_, alpha);
    // Q'Z for the new R: T'(V'M^-1 R_old - V'M^-1 V Ta), so beta needs no pass over the new R
    Small VtZ = sub(G_, m_, m_, m_, k_);
    const Small VtDVTa = matmul(sub(G_, m_, 0, m_, m_), Ta);
    for (size_t i = 0; i < VtZ.a.size(); ++i) VtZ.a[i] -= VtDVTa.a[i];
    Small beta = tmatmul(T_, VtZ);
    spd_solve(PtQ, beta);
    for (double& v : beta.a) v = -v;
    Tbeta = matmul(T_, beta);
    return true;
  }

  // X += W Ta; R -= V Ta; the new norms; W = Z(:, running) + W Tbeta(:, running). False when the solve ended
  // here (every column done, or the block stalled and went on as multi-cg).
  bool advance(const Small& Ta, const Small& Tbeta) {
    if (dense_.fuses(m_, k_) && !general_) {
      // One pass: X += W Ta, R -= V Ta, ||R(:, j)||^2, and the next W for the columns running now. A column
      // that converges in this step leaves W one step later (its alpha column is zeroed meanwhile): the search
      // block is formed before the new norms are known.
      pay_x();
      const std::vector<int> act = active_columns();
      std::vector<double> rr;
      timer_.run("step", 8.0 * n_ * (2 * m_ + 4 * k_ + static_cast<double>(act.size()) + (dinv_ ? 1 : 0)), [&] {
        rr = dense_.step(X_.data(), R_.data(), k_, W_, V_.data(), m_, Ta, Tbeta, act, dinv_, spare_, norms_);
      });
      std::swap(W_, spare_);
      m_ = static_cast<int>(act.size());
      cols_of_w_ = act;
      ++it_;
      observe(rr);
      if (!mon_.all_done() && stalled()) {
        fall_back(stall_note());
        return false;
      }
      return true;
    }
    // R -= V Ta; ||R(:, j)||^2; X += W Ta is owed (paid by the next combine)
    owed_Ta_ = Ta;
    std::vector<double> rr;
    timer_.run("update-r", 8.0 * n_ * (m_ + 2 * k_), [&] {
      rr = dense_.update_xr(nullptr, R_.data(), k_, nullptr, V_.data(), m_, owed_Ta_, norms_, ws_);
    });
    x_owed_ = true;
    if (general_)  // M^-1 R -= (M^-1 V) Ta
      timer_.run("update-z", 8.0 * n_ * (m_ + 2 * k_), [&] {
        dense_.update_xr(nullptr, ZR_.data(), k_, nullptr, ZV_.data(), m_, owed_Ta_, zr_norms_, ws_);
      });
    ++it_;
    observe(rr);
    if (mon_.all_done()) return false;
    if (stalled()) {
      fall_back(stall_note());
      return false;
    }
    const std::vector<int> act = active_columns();
    Small Tbeta_act(Tbeta.rows, static_cast<int>(act.size()));
    for (size_t c = 0; c < act.size(); ++c)
      for (int i = 0; i < Tbeta.rows; ++i) Tbeta_act(i, static_cast<int>(c)) = Tbeta(i, act[c]);
    form_w(act, Tbeta_act);  // W = Z(:, act) + W T beta(:, act)
    cols_of_w_ = act;
    return true;
  }

  void observe(const std::vector<double>& rr) {
    for (int j = 0; j < k_; ++j) mon_.observe(j, it_, std::sqrt(rr[j]));
  }
  std::vector<int> active_columns() const {
    std::vector<int> a;
    for (int j = 0; j < k_; ++j)
      if (mon_.status(j) == ColumnStatus::running) a.push_back(j);
    return a;
  }
  void fail_active(ColumnStatus st) {
    for (int j : active_columns()) mon_.finish(j, st, it_);
  }

  // X += W Ta is deferred from the update into the next combine, which reads W anyway (one pass over W fewer
  // per iteration); it is owed while x_owed_ is set, and paid before anything reads X.
  void pay_x() {
    if (!x_owed_) return;
    timer_.run("update-x", 8.0 * n_ * (m_ + 2 * k_), [&] {
      dense_.combine(nullptr, 0, W_, m_, Small(m_, 0), nullptr, 0, {}, nullptr, X_.data(), k_, &owed_Ta_);
    });
    x_owed_ = false;
  }

  // W = M^-1 R(:, act) + W_old Tb, formed in the spare block (Tb empty: no W_old term); the owed X += W_old Ta
  // in the same pass.
  void form_w(const std::vector<int>& act, const Small& Tb) {
    const int m_new = static_cast<int>(act.size());
    const bool with_x = x_owed_ && Tb.rows == m_ && m_ > 0;
    if (x_owed_ && !with_x) pay_x();
    timer_.run("combine", 8.0 * n_ * (Tb.rows + 2 * m_new + (dinv_ ? 1 : 0) + (with_x ? 2 * k_ : 0)), [&] {
      dense_.combine(spare_, m_new, W_, Tb.rows, Tb, general_ ? ZR_.data() : R_.data(), k_, act, dinv_,
                     with_x ? X_.data() : nullptr, k_,
                     with_x ? &owed_Ta_ : nullptr);
    });
    x_owed_ = false;
    std::swap(W_, spare_);
    m_ = m_new;
  }

  // Stall watch: the largest relative residual among the running columns must reach a new best (below
  // stall_progress x the last) at least once every o.stagnation_window iterations. A full-rank block counts as
  // stalled only near its target (best within stall_near_target x rtol): there multi-cg finishes the columns in a
  // few iterations (bcsstk03: 26), while far from it the block is in CG's usual rise and plateau (bcsstk21
  // without a preconditioner stays above its starting residual for ~900 iterations, then block CG converges in
  // ~1900 where multi-cg from there needs ~14000; a block of rank 1 from duplicated right-hand sides is CG
  // itself). A rank-deficient block, with fewer kept directions than running columns that were independent at
  // the start, stalls anywhere: those directions were lost to rounding (docs/perf-notes.md, "The stall watch cut
  // block CG off in CG's initial rise").
  bool stalled() {
    if (o_.stagnation_window <= 0) return false;
    const std::vector<double>& bn = engine_.b_norms();
    double worst = 0;
    for (int j : active_columns()) worst = std::max(worst, mon_.residual(j) / std::max(bn[j], 1e-300));
    if (worst < BlockCgTuning::stall_progress * best_worst_) best_worst_ = worst, best_at_ = it_;
    return it_ - best_at_ >= o_.stagnation_window &&
           (best_worst_ <= BlockCgTuning::stall_near_target * o_.stop.rtol || rank_deficient());
  }
  bool rank_deficient() const {
    int independent = 0;
    for (int j : active_columns()) independent += !dependent_at_start_[j];
    return r_ < independent;
  }
  std::string stall_note() const {
    return "no progress in " + std::to_string(o_.stagnation_window) +
           " iterations (largest relative residual of the running columns, " +
           (rank_deficient() ? "block of rank " + std::to_string(r_) + ")" : "near the target)");
  }

  // The running columns go on as independent CG recurrences (multi-cg) from the current X; their statuses and
  // iteration counts (it + multi-cg's) come from that solve.
  void fall_back(const std::string& reason) {
    res_.fallback_reason = reason + "; finished by multi-cg";
    pay_x();
    const std::vector<int> cols = active_columns();
    const int a = static_cast<int>(cols.size());
    DeviceBlock Bs(n_, a, "block-cg fallback B"), Xs(n_, a, "block-cg fallback X");
    auto copy_column = [&](double* dst, int dst_cols, int dst_col, const double* src, int src_cols, int src_col) {
      CHECK_CUDA(cudaMemcpy2DAsync(dst + dst_col, dst_cols * sizeof(double), src + src_col, src_cols * sizeof(double),
                                   sizeof(double), static_cast<size_t>(n_), cudaMemcpyDeviceToDevice, s_));
    };
    for (int c = 0; c < a; ++c) {
      copy_column(Bs.data(), a, c, B_.data(), k_, cols[c]);
      copy_column(Xs.data(), a, c, X_.data(), k_, cols[c]);
    }
    CHECK_CUDA(cudaStreamSynchronize(s_));  // multi-cg reads Bs and Xs on its own stream
    SolveOptions so = o_;
    so.stop.max_iterations = std::max(0, o_.stop.max_iterations - it_);
    so.keep_history = false;
    const SolveResult sub = solve_multi_cg(A_, M_, Bs, Xs, so);
    for (int c = 0; c < a; ++c) copy_column(X_.data(), k_, cols[c], Xs.data(), a, c);
    CHECK_CUDA(cudaStreamSynchronize(s_));
    for (int c = 0; c < a; ++c) {
      const ColumnResult& cr = sub.columns[c];
      mon_.observe(cols[c], it_ + cr.iterations, cr.recursive_residual);
      mon_.finish(cols[c], cr.status, it_ + cr.iterations);
    }
    res_.operator_applies += sub.operator_applies, res_.operator_columns += sub.operator_columns;
    for (const KernelStat& ks : sub.kernels) timer_.add("fallback-" + ks.name, ks);
    res_.fallback_columns = a;
  }

  const LinearOperator& A_;
  const PreconditionerOp* M_;         // the preconditioner (null: none)
  const double* dinv_;                // Jacobi's diagonal: scaled inside the dense passes
  const PreconditionerOp* general_;   // any other M: applied to V and R, kept as ZV_ and ZR_
  const DeviceBlock& B_;
  DeviceBlock& X_;
  const SolveOptions& o_;
  IterationEngine engine_;
  const cudaStream_t s_;
  Monitor& mon_;
  KernelTimer& timer_;
  SolveResult& res_;
  const int k_;
  const int64_t n_;
  DenseSteps dense_;
  DeviceBlock R_, V_, W1_, W2_;
  double* W_;      // n x m, the unorthonormalised search block; P = W T
  double* spare_;  // the next W is formed here, then the two swap
  int m_ = 0, r_ = 0;  // columns of W and of P
  Small T_;            // m x r
  Small G_;            // the last Gram pass
  DeviceArray<double> norms_;
  ReductionWorkspace ws_;
  Small owed_Ta_;
  bool x_owed_ = false;
  int it_ = 0;
  std::vector<int> cols_of_w_;  // the right-hand side of each column of W
  double best_worst_ = std::numeric_limits<double>::infinity();
  int best_at_ = 0;
  std::vector<bool> dependent_at_start_;  // dropped by the first Cholesky: deflated, not lost
  DeviceBlock ZR_, ZV_;                   // general M: M^-1 R and M^-1 V
  DeviceArray<double> zr_norms_;
};

}  // namespace

SolveResult solve_block_cg(const LinearOperator& A, const PreconditionerOp* M, const DeviceBlock& B, DeviceBlock& X,
                           const SolveOptions& o) {
  return BlockCg(A, M, B, X, o).run();
}

}  // namespace spcg
