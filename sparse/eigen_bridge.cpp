#include "sparse/eigen_bridge.hpp"

#include <algorithm>

#include <Eigen/IterativeLinearSolvers>
#include <chrono>
#include <cmath>

#include "spcg/error.hpp"

namespace spcg {

EigenCsr to_eigen(const CsrMatrix& a) {
  EigenCsr m(a.rows, a.cols);
  std::vector<Eigen::Triplet<double, int>> t;
  t.reserve(a.col_idx.size());
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) t.emplace_back(i, a.col_idx[p], a.values[p]);
  m.setFromTriplets(t.begin(), t.end());
  m.makeCompressed();
  return m;
}

CsrMatrix from_eigen(const EigenCsr& m0) {
  EigenCsr m = m0;
  m.makeCompressed();
  CsrMatrix a;
  a.rows = static_cast<int32_t>(m.rows());
  a.cols = static_cast<int32_t>(m.cols());
  a.row_ptr.assign(m.outerIndexPtr(), m.outerIndexPtr() + m.rows() + 1);
  a.col_idx.assign(m.innerIndexPtr(), m.innerIndexPtr() + m.nonZeros());
  a.values.assign(m.valuePtr(), m.valuePtr() + m.nonZeros());
  return a;
}

namespace {
template <class Solver>
HostSolveResult run_cg(Solver& cg, const EigenCsr& m, const DenseBlock& b, double rtol, int maxit, const DenseBlock* x0,
                       double atol) {
  cg.setMaxIterations(maxit);
  cg.compute(m);
  HostSolveResult r;
  r.x = DenseBlock(b.rows, b.cols);
  r.all_converged = true;
  for (int32_t j = 0; j < b.cols; ++j) {
    Eigen::VectorXd bj(b.rows), guess = Eigen::VectorXd::Zero(b.rows);
    for (int32_t i = 0; i < b.rows; ++i) bj[i] = b.at(i, j);
    // Eigen stops at ||r|| <= tol ||b||: the stopping rule max(rtol ||b||, atol) as a tolerance of its own
    const double b_norm = bj.norm();
    cg.setTolerance(b_norm > 0 ? std::max(rtol, atol / b_norm) : rtol);
    if (x0)
      for (int32_t i = 0; i < b.rows; ++i) guess[i] = x0->at(i, j);
    Eigen::VectorXd xj = cg.solveWithGuess(bj, guess);
    for (int32_t i = 0; i < b.rows; ++i) r.x.at(i, j) = xj[i];
    r.iterations.push_back(static_cast<int>(cg.iterations()));
    r.relative_error.push_back(cg.error());
    r.all_converged &= cg.info() == Eigen::Success;
  }
  return r;
}
}  // namespace

HostSolveResult eigen_cg(const CsrMatrix& a, const DenseBlock& b, double rtol, int maxit, bool jacobi,
                         const DenseBlock* x0, double atol) {
  const auto t0 = std::chrono::steady_clock::now();
  // Eigen's CG reads only the lower triangle by default; Lower|Upper uses the full (symmetric) matrix.
  const EigenCsr m = to_eigen(a);
  HostSolveResult r;
  if (jacobi) {
    Eigen::ConjugateGradient<EigenCsr, Eigen::Lower | Eigen::Upper, Eigen::DiagonalPreconditioner<double>> cg;
    r = run_cg(cg, m, b, rtol, maxit, x0, atol);
  } else {
    Eigen::ConjugateGradient<EigenCsr, Eigen::Lower | Eigen::Upper, Eigen::IdentityPreconditioner> cg;
    r = run_cg(cg, m, b, rtol, maxit, x0, atol);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace spcg
