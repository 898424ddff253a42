// block-cg: breakdown-free block CG (O'Leary 1980; Ji & Li, "Breakdown-free version of the block conjugate
// gradient method", 2017). The search block is orthonormalised every iteration by Cholesky-QR, twice
// (CholQR2), with a pivoted Cholesky that drops directions whose pivot falls below a relative threshold: a
// duplicate or dependent right-hand side, or one that has converged, leaves the block instead of breaking it.
// Converged columns are frozen (their alpha columns are zeroed) while their directions stay in the Krylov
// space of the others. Dense n x k work through cuBLAS; the small k x k work on the host.
//   R = B - A X;  Z = M^-1 R;  P = orth(Z)
//   loop: Q = A P;  alpha = (P'Q)^-1 P'R;  X += P alpha;  R -= Q alpha;  Z = M^-1 R
//         beta = -(P'Q)^-1 Q'Z;  P = orth(Z + P beta)   (over the active columns)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>

#include "block_ops.hpp"
#include "iteration_runner.hpp"
#include "solver.hpp"
#include "vector_ops.hpp"

namespace spcg {
namespace {

// Column-major small dense matrix on the host.
struct Small {
  int rows = 0, cols = 0;
  std::vector<double> a;
  Small(int r = 0, int c = 0) : rows(r), cols(c), a(static_cast<size_t>(r) * c, 0.0) {}
  double& operator()(int i, int j) { return a[static_cast<size_t>(j) * rows + i]; }
  double operator()(int i, int j) const { return a[static_cast<size_t>(j) * rows + i]; }
};

// Pivoted Cholesky of the m x m Gram matrix G = Pi' L L' Pi, stopping when the next pivot is below
// drop * max diagonal. Returns the kept columns (in pivot order) and T = Pi[:, kept] L^-T (m x r), so W T
// has orthonormal columns.
struct Orth {
  std::vector<int> kept;
  Small T;
  double pivot_ratio = 1;  // first over last kept pivot: estimates cond(G)
};
Orth pivoted_cholqr(Small G, double drop) {
  const int m = G.rows;
  std::vector<int> piv(m);
  std::iota(piv.begin(), piv.end(), 0);
  double max_diag = 0;
  for (int i = 0; i < m; ++i) max_diag = std::max(max_diag, G(i, i));
  Small L(m, m);
  int r = 0;
  for (; r < m; ++r) {
    int best = r;
    for (int i = r + 1; i < m; ++i)
      if (G(piv[i], piv[i]) > G(piv[best], piv[best])) best = i;
    std::swap(piv[r], piv[best]);
    const double d = G(piv[r], piv[r]);
    if (!(d > drop * max_diag) || !(d > 0)) break;
    const double l = std::sqrt(d);
    L(r, r) = l;
    for (int i = r + 1; i < m; ++i) L(i, r) = G(piv[i], piv[r]) / l;
    // Schur complement update on the remaining pivots.
    for (int i = r + 1; i < m; ++i)
      for (int j = r + 1; j <= i; ++j) {
        const double v = G(piv[i], piv[j]) - L(i, r) * L(j, r);
        G(piv[i], piv[j]) = v;
        G(piv[j], piv[i]) = v;
      }
  }
  Orth o;
  o.kept.assign(piv.begin(), piv.begin() + r);
  if (r > 0) o.pivot_ratio = (L(0, 0) * L(0, 0)) / (L(r - 1, r - 1) * L(r - 1, r - 1));
  // T = Pi[:, :r] L[:r, :r]^-T : column c of T solves L^T t = e_c, placed at the pivoted rows.
  o.T = Small(m, r);
  for (int c = 0; c < r; ++c) {
    std::vector<double> t(r, 0.0);
    for (int i = r - 1; i >= 0; --i) {  // back substitution with L^T (upper)
      double v = (i == c) ? 1.0 : 0.0;
      for (int j = i + 1; j < r; ++j) v -= L(j, i) * t[j];
      t[i] = v / L(i, i);
    }
    for (int i = 0; i < r; ++i) o.T(piv[i], c) = t[i];
  }
  return o;
}

// Solves S X = Y for SPD S (r x r) by Cholesky; returns false when S is not positive definite.
bool spd_solve(const Small& S, Small& Y) {
  const int r = S.rows;
  Small L(r, r);
  for (int j = 0; j < r; ++j) {
    double d = S(j, j);
    for (int p = 0; p < j; ++p) d -= L(j, p) * L(j, p);
    if (!(d > 0)) return false;
    L(j, j) = std::sqrt(d);
    for (int i = j + 1; i < r; ++i) {
      double v = S(i, j);
      for (int p = 0; p < j; ++p) v -= L(i, p) * L(j, p);
      L(i, j) = v / L(j, j);
    }
  }
  for (int c = 0; c < Y.cols; ++c) {
    for (int i = 0; i < r; ++i) {
      double v = Y(i, c);
      for (int p = 0; p < i; ++p) v -= L(i, p) * Y(p, c);
      Y(i, c) = v / L(i, i);
    }
    for (int i = r - 1; i >= 0; --i) {
      double v = Y(i, c);
      for (int p = i + 1; p < r; ++p) v -= L(p, i) * Y(p, c);
      Y(i, c) = v / L(i, i);
    }
  }
  return true;
}

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
  // C (a x b, col-major, device) = U' V for U n x a, V n x b.
  void gram(const double* U, int a, const double* V, int b, int64_t n, double* C) {
    const double one = 1, zero = 0;
    CHECK_CUBLAS(cublasDgemm(h_, CUBLAS_OP_N, CUBLAS_OP_T, a, b, static_cast<int>(n), &one, U, a, V, b, &zero, C, a));
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

// The n x m dense steps of block CG: our streaming kernels (kernels/block_ops.cu) up to 32 right-hand sides
// (the P'[Q R] Gram is r x (r + k)), cuBLAS beyond. Small matrices travel host <-> device through one staging buffer on the solver's stream.
class DenseSteps {
 public:
  DenseSteps(int k, int64_t n, cudaStream_t s)
      : s_(s), n_(n), own_(2 * k <= kBlockOpsMaxColumns), small_(static_cast<size_t>(2) * k * k + 4 * k, "block-cg small"),
        sel_(k, "block-cg column map") {
    if (own_) ws_ = std::make_unique<BlockOpsWorkspace>(k);
    else blas_ = std::make_unique<Blas>(s);
  }
  // [U'V1, U'V2] for U (n x a), V1 (n x b1), V2 (n x b2, optional); returned as two host matrices.
  std::pair<Small, Small> gram(const double* U, int a, const double* V1, int b1, const double* V2 = nullptr, int b2 = 0) {
    Small G1(a, b1), G2(a, b2);
    if (a == 0) return {G1, G2};
    if (own_) {
      launch_block_gram(n_, U, a, a, V1, b1, b1, V2, b2, V2 ? b2 : 0, small_.data(), *ws_, s_);
    } else {
      blas_->gram(U, a, V1, b1, n_, small_.data());
      if (V2) blas_->gram(U, a, V2, b2, n_, small_.data() + static_cast<size_t>(a) * b1);
    }
    std::vector<double> h(static_cast<size_t>(a) * (b1 + b2));
    CHECK_CUDA(cudaMemcpyAsync(h.data(), small_.data(), h.size() * sizeof(double), cudaMemcpyDeviceToHost, s_));
    CHECK_CUDA(cudaStreamSynchronize(s_));
    std::copy(h.begin(), h.begin() + G1.a.size(), G1.a.begin());
    std::copy(h.begin() + G1.a.size(), h.end(), G2.a.begin());
    return {G1, G2};
  }
  // Y (n x b) = beta Y + [Z(:, cols)] + U (n x a) M; Z has ldz columns. Y may be U (in place) on our kernels.
  void combine(double* Y, int b, double beta, const double* U, int a, const Small& M, const double* Z = nullptr,
               int ldz = 0, const std::vector<int>& cols = {}) {
    upload(M);
    if (own_) {
      if (Z) CHECK_CUDA(cudaMemcpyAsync(sel_.data(), cols.data(), cols.size() * sizeof(int), cudaMemcpyHostToDevice, s_));
      launch_block_combine(n_, Y, b, b, beta, U, a, a, small_.data(), s_, Z, ldz, Z ? sel_.data() : nullptr);
    } else {
      if (Z) {  // cuBLAS: gather by a selection product, then accumulate
        Small S(ldz, b);
        for (int c = 0; c < b; ++c) S(cols[c], c) = 1.0;
        CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused
        upload(S);
        blas_->update(Y, b, Z, ldz, small_.data(), beta, n_);
        CHECK_CUDA(cudaStreamSynchronize(s_));
        upload(M);
        beta = 1.0;
      }
      if (U == Y) throw CudaError("block-cg: in-place combine needs the block kernels (k <= 32)");
      if (a > 0) blas_->update(Y, b, U, a, small_.data(), beta, n_);
      else if (beta != 1.0) launch_scale(beta, Y, static_cast<size_t>(n_) * b, s_);
    }
    CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused by the next call
  }
  bool in_place() const { return own_; }
  // X += P alpha; R -= Q alpha; returns ||R(:, c)||^2.
  std::vector<double> update_xr(double* X, double* R, int k, const double* P, const double* Q, int r, const Small& alpha,
                                DeviceArray<double>& norms, const ReductionWorkspace& rws) {
    std::vector<double> rr(k);
    if (own_) {
      upload(alpha);
      launch_block_update_xr(n_, k, r, X, R, P, Q, small_.data(), norms.data(), *ws_, s_);
    } else {
      upload(alpha);
      blas_->update(X, k, P, r, small_.data(), 1.0, n_);
      Small neg = alpha;
      for (double& v : neg.a) v = -v;
      CHECK_CUDA(cudaStreamSynchronize(s_));
      upload(neg);
      blas_->update(R, k, Q, r, small_.data(), 1.0, n_);
      launch_column_dots(n_, k, R, R, rws, norms.data(), s_);
    }
    CHECK_CUDA(cudaMemcpyAsync(rr.data(), norms.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s_));
    CHECK_CUDA(cudaStreamSynchronize(s_));
    return rr;
  }

 private:
  void upload(const Small& M) {
    CHECK_CUDA(cudaMemcpyAsync(small_.data(), M.a.data(), M.a.size() * sizeof(double), cudaMemcpyHostToDevice, s_));
  }
  cudaStream_t s_;
  int64_t n_;
  bool own_;
  DeviceArray<double> small_;
  DeviceArray<int> sel_;
  std::unique_ptr<BlockOpsWorkspace> ws_;
  std::unique_ptr<Blas> blas_;
};

struct BlockCgTuning {
  static constexpr double drop = 1e-12;  // relative pivot below which a direction is dependent
  // CholQR loses orthogonality like cond(W)^2 eps = cond(G) eps: below this the second pass (CholQR2) is
  // skipped (P is then orthonormal to ~1e-10; P'AP is solved exactly either way).
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
  DeviceBlock R(n, k, "block-cg R"), Z(n, k, "block-cg Z"), P(n, k, "block-cg P"), Q(n, k, "block-cg Q"),
      W(n, k, "block-cg W");
  DeviceArray<double> norms(k, "block-cg norms");
  ReductionWorkspace ws(reduction_blocks(n * k), 2 * k);
  const double nk = double(n) * k;

  timer.run("residual", A.bytes_per_apply(k) + 16.0 * nk, [&] {  // R = B - A X
    CHECK_CUDA(cudaMemcpyAsync(R.data(), B.data(), B.size() * sizeof(double), cudaMemcpyDeviceToDevice, s));
    A.apply(-1.0, X.data(), 1.0, R.data(), k, s);
  });
  res.operator_applies = 1, res.operator_columns = k;
  auto precondition = [&] {  // Z = M^-1 R
    if (dinv) timer.run("precond", 24.0 * nk, [&] { launch_row_scale(n, k, dinv, R.data(), Z.data(), s); });
  };
  const double* Zp = dinv ? Z.data() : R.data();
  auto observe = [&](const std::vector<double>& rr, int it) {
    for (int j = 0; j < k; ++j) mon.observe(j, it, std::sqrt(rr[j]));
  };
  // P = orth(W) over the m columns of W; marks the RHS columns whose direction was dropped as deflated.
  int r = 0;
  auto orthonormalize = [&](const std::vector<int>& cols_of_w) -> bool {
    const int m = static_cast<int>(cols_of_w.size());
    Small G;
    timer.run("gram", 8.0 * n * m, [&] { G = dense.gram(W.data(), m, W.data(), m).first; });
    for (double v : G.a)
      if (!std::isfinite(v)) return false;
    Orth first = pivoted_cholqr(G, BlockCgTuning::drop);
    std::vector<bool> kept(m, false);
    for (int c : first.kept) kept[c] = true;
    for (int c = 0; c < m; ++c)
      if (!kept[c]) mon.mark_deflated(cols_of_w[c]);
    r = static_cast<int>(first.kept.size());
    timer.run("orth", 8.0 * n * (m + r), [&] { dense.combine(P.data(), r, 0.0, W.data(), m, first.T); });  // P = W T
    if (r == 0 || first.pivot_ratio < BlockCgTuning::second_pass_cond) return true;
    // Second pass (CholQR2) restores orthogonality lost to the conditioning of G.
    Small G2;
    timer.run("gram", 8.0 * n * r, [&] { G2 = dense.gram(P.data(), r, P.data(), r).first; });
    Orth second = pivoted_cholqr(G2, 0.0);
    if (static_cast<int>(second.kept.size()) != r) return false;
    if (dense.in_place()) {
      timer.run("orth", 16.0 * n * r, [&] { dense.combine(P.data(), r, 0.0, P.data(), r, second.T); });  // P = P T2
    } else {
      CHECK_CUDA(cudaMemcpyAsync(W.data(), P.data(), static_cast<size_t>(n) * r * sizeof(double), cudaMemcpyDeviceToDevice, s));
      timer.run("orth", 16.0 * n * r, [&] { dense.combine(P.data(), r, 0.0, W.data(), r, second.T); });
    }
    return true;
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

  int it = 0;
  {
    std::vector<double> rr(k);
    timer.run("norms", 8.0 * nk, [&] { launch_column_dots(n, k, R.data(), R.data(), ws, norms.data(), s); });
    CHECK_CUDA(cudaMemcpyAsync(rr.data(), norms.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    observe(rr, 0);
  }
  precondition();
  std::vector<int> act = active_columns();
  if (!act.empty()) {
    // W = Z(:, act)
    timer.run("combine", 16.0 * n * act.size(), [&] {
      dense.combine(W.data(), static_cast<int>(act.size()), 0.0, P.data(), 0, Small(0, static_cast<int>(act.size())), Zp, k, act);
    });
    if (!orthonormalize(act)) fail_active(ColumnStatus::non_finite, 0);
  }
  while (!mon.all_done()) {
    act = active_columns();
    if (r == 0) {  // every remaining direction was dependent: nothing left to search
      fail_active(ColumnStatus::breakdown, it);
      break;
    }
    timer.run("spmm", A.bytes_per_apply(r), [&] { A.apply(1.0, P.data(), 0.0, Q.data(), r, s); });  // Q = A P
    ++res.operator_applies, res.operator_columns += r;
    Small PtQ, PtR;
    timer.run("gram", 8.0 * n * (2 * r + k), [&] { std::tie(PtQ, PtR) = dense.gram(P.data(), r, Q.data(), r, R.data(), k); });
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < i; ++j) PtQ(i, j) = PtQ(j, i) = 0.5 * (PtQ(i, j) + PtQ(j, i));
    Small alpha = PtR;  // alpha = (P'AP)^-1 P'R, frozen columns zeroed
    if (!spd_solve(PtQ, alpha)) {  // P'AP not SPD: A is not SPD on this subspace
      bool finite = true;
      for (double v : PtQ.a) finite &= std::isfinite(v);
      fail_active(finite ? ColumnStatus::breakdown : ColumnStatus::non_finite, it);
      break;
    }
    for (int j = 0; j < k; ++j)
      if (mon.status(j) != ColumnStatus::running)
        for (int i = 0; i < r; ++i) alpha(i, j) = 0.0;
    std::vector<double> rr;
    // X += P alpha; R -= Q alpha; ||R(:, j)||^2
    timer.run("update-xr", 8.0 * n * (2 * r + 4 * k), [&] { rr = dense.update_xr(X.data(), R.data(), k, P.data(), Q.data(), r, alpha, norms, ws); });
    ++it;
    observe(rr, it);
    if (mon.all_done()) break;
    precondition();
    Small QtZ;
    timer.run("gram", 8.0 * n * (r + k), [&] { QtZ = dense.gram(Q.data(), r, Zp, k).first; });
    Small beta = QtZ;  // beta = -(P'AP)^-1 Q'Z
    spd_solve(PtQ, beta);
    for (double& v : beta.a) v = -v;
    act = active_columns();
    Small beta_act(r, static_cast<int>(act.size()));
    for (size_t c = 0; c < act.size(); ++c)
      for (int i = 0; i < r; ++i) beta_act(i, static_cast<int>(c)) = beta(i, act[c]);
    // W = Z(:, act) + P beta(:, act)
    timer.run("combine", 8.0 * n * (r + 2 * act.size()), [&] {
      dense.combine(W.data(), static_cast<int>(act.size()), 0.0, P.data(), r, beta_act, Zp, k, act);
    });
    if (!orthonormalize(act)) {
      fail_active(ColumnStatus::non_finite, it);
      break;
    }
  }
  finish_result(res, mon, bn, timer, t0, s);
  return res;
}

}  // namespace spcg
