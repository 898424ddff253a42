// Lanczos (Golub & Van Loan, Matrix Computations, 4th ed., 10.1) on S = D^-1/2 A D^-1/2, which has the spectrum
// of D^-1 A: u_{j+1} beta_{j+1} = S u_j - alpha_j u_j - beta_j u_{j-1}, alpha_j = u_j' S u_j, without
// reorthogonalisation (the extreme Ritz values converge first and are all an estimate needs). The Ritz values of
// the tridiagonal T_m come from Eigen's tridiagonal QR on the host.
#include "spectrum.hpp"

#include <Eigen/Eigenvalues>
#include <cmath>

#include "blas1.hpp"
#include "cuda_check.hpp"
#include "device_array.hpp"
#include "thrust_ops.hpp"

namespace spcg {

SpectrumEstimate estimate_spectrum(const LinearOperator& A, const std::vector<double>& dinv, int steps, uint64_t seed) {
  if (!dinv.empty() && static_cast<int64_t>(dinv.size()) != A.rows())
    throw Error("estimate_spectrum: the inverse diagonal has the wrong length");
  const DeviceArray<double> device(dinv, "Lanczos D^-1");
  return estimate_spectrum(A, dinv.empty() ? nullptr : device.data(), steps, seed, 0);
}

SpectrumEstimate estimate_spectrum(const LinearOperator& A, const double* dinv, int steps, uint64_t seed,
                                   cudaStream_t s) {
  if (A.rows() != A.cols()) throw Error("estimate_spectrum: the operator is not square");
  SpectrumEstimate est;
  const int64_t n = A.rows();
  if (n == 0 || steps <= 0) return est;
  steps = static_cast<int>(std::min<int64_t>(steps, n));
  DeviceArray<double> d_root(dinv ? n : 0, "Lanczos D^-1/2"), u(n, "Lanczos u"), u_prev(n, "Lanczos u_prev"),
      w(n, "Lanczos w"), t(dinv ? n : 0, "Lanczos D^-1/2 u");
  if (dinv) thrust_sqrt(dinv, d_root.data(), n, s);
  // u_1: random, unit norm
  launch_fill_splitmix_uniform(seed, u.data(), static_cast<size_t>(n), s);
  const double start_norm = std::sqrt(thrust_dot(u.data(), u.data(), n, s));
  launch_scale(1.0 / start_norm, u.data(), static_cast<size_t>(n), s);
  launch_fill(0.0, u_prev.data(), static_cast<size_t>(n), s);
  std::vector<double> alpha, beta;  // beta[j]: the coupling of u_j and u_{j+1}
  double beta_prev = 0;
  for (int j = 0; j < steps; ++j) {
    // w = S u_j = D^-1/2 A D^-1/2 u_j
    if (!dinv) {
      A.apply(1.0, u.data(), 0.0, w.data(), 1, s);
    } else {
      thrust_mul(d_root.data(), u.data(), t.data(), n, s);
      A.apply(1.0, t.data(), 0.0, w.data(), 1, s);
      thrust_mul(d_root.data(), w.data(), w.data(), n, s);
    }
    const double a = thrust_dot(w.data(), u.data(), n, s);
    thrust_axpy(-a, u.data(), w.data(), n, s);              // w -= alpha_j u_j
    thrust_axpy(-beta_prev, u_prev.data(), w.data(), n, s);  // w -= beta_j u_{j-1}
    const double b = std::sqrt(thrust_dot(w.data(), w.data(), n, s));
    if (!std::isfinite(a) || !std::isfinite(b)) {
      est.finite = false;
      break;
    }
    alpha.push_back(a);
    beta.push_back(b);
    ++est.steps;
    // an invariant subspace: T_j's eigenvalues are exact eigenvalues of S
    if (b <= 1e-14 * std::abs(a) || j + 1 == steps) break;
    thrust_copy(u.data(), u_prev.data(), n, s);  // u_{j-1} <- u_j
    launch_scale(0.0, u.data(), static_cast<size_t>(n), s);
    thrust_axpy(1.0 / b, w.data(), u.data(), n, s);  // u_{j+1} = w / beta_{j+1}
    beta_prev = b;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  if (!est.finite || est.steps == 0) return est;
  const int m = est.steps;
  Eigen::VectorXd diag(m), sub(std::max(0, m - 1));
  for (int j = 0; j < m; ++j) diag[j] = alpha[j];
  for (int j = 0; j + 1 < m; ++j) sub[j] = beta[j];
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> tri;
  tri.computeFromTridiagonal(diag, sub, Eigen::ComputeEigenvectors);
  if (tri.info() != Eigen::Success) {
    est.finite = false;
    return est;
  }
  est.lambda_min = tri.eigenvalues()[0];
  est.lambda_max = tri.eigenvalues()[m - 1];
  est.max_error = std::abs(beta[m - 1] * tri.eigenvectors()(m - 1, m - 1));
  return est;
}

}  // namespace spcg
