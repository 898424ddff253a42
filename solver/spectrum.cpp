// Lanczos (Golub & Van Loan, Matrix Computations, 4th ed., 10.1) on S = D^-1/2 A D^-1/2, which has the spectrum
// of D^-1 A: u_{j+1} beta_{j+1} = S u_j - alpha_j u_j - beta_j u_{j-1}, alpha_j = u_j' S u_j, without
// reorthogonalisation (the extreme Ritz values converge first and are all an estimate needs). The Ritz values of
// the tridiagonal T_m come from Eigen's tridiagonal QR on the host. The dot products go through the reduction
// policy of A's ranks (solver/iteration_engine.hpp): nothing on one GPU, a sum in rank order on several.
#include "solver/spectrum.hpp"

#include <Eigen/Eigenvalues>
#include <cmath>

#include "kernels/communicator.hpp"
#include "kernels/solver_ops/blas1.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "kernels/solver_ops/thrust_ops.hpp"
#include "kernels/solver_ops/lanczos_ops.hpp"
#include "solver/iteration_engine.hpp"

namespace spcg {

SpectrumEstimate estimate_spectrum(const LinearOperator& A, const std::vector<double>& dinv, int steps, uint64_t seed) {
  if (!dinv.empty() && static_cast<int64_t>(dinv.size()) != A.rows())
    throw Error("estimate_spectrum: the inverse diagonal has the wrong length");
  const DeviceArray<double> device(dinv, "Lanczos D^-1");
  return estimate_spectrum(A, dinv.empty() ? nullptr : device.data(), steps, seed, 0);
}

std::vector<double> sum_over_ranks(const LinearOperator& A, std::vector<double> values, cudaStream_t s) {
  ReductionPolicy sums(ranks_of(A));
  if (!sums.over_ranks() || values.empty()) return values;
  DeviceArray<double> d(values.size(), "sum over ranks");
  CHECK_CUDA(cudaMemcpyAsync(d.data(), values.data(), d.bytes(), cudaMemcpyHostToDevice, s));
  sums.sum(d.data(), values.size(), s);
  CHECK_CUDA(cudaMemcpyAsync(values.data(), d.data(), d.bytes(), cudaMemcpyDeviceToHost, s));
  sums.wait(s);
  return values;
}

std::vector<double> gather_over_ranks(const LinearOperator& A, const std::vector<double>& values, cudaStream_t s) {
  const Communicator* ranks = ranks_of(A);
  if (!ranks) return values;
  const size_t width = values.size();
  std::vector<double> slots(width * static_cast<size_t>(ranks->size()), 0.0);  // x + 0 + ... + 0 = x exactly
  std::copy(values.begin(), values.end(), slots.begin() + static_cast<std::ptrdiff_t>(width * ranks->rank()));
  return sum_over_ranks(A, std::move(slots), s);
}

SpectrumEstimate estimate_spectrum(const LinearOperator& A, const double* dinv, int steps, uint64_t seed,
                                   cudaStream_t s, int64_t first_row) {
  if (A.rows() != A.cols()) throw Error("estimate_spectrum: the operator is not square");
  SpectrumEstimate est;
  const int64_t n = A.rows();
  if (steps <= 0) return est;
  // the whole system's rows (every rank's: a rank with none still takes part in each step's collectives)
  const int64_t rows = static_cast<int64_t>(sum_over_ranks(A, {static_cast<double>(n)}, s)[0]);
  if (rows == 0) return est;
  est.rows = rows;
  ReductionPolicy sums(ranks_of(A));  // each dot product over every rank's rows (one GPU: as it is)
  steps = static_cast<int>(std::min<int64_t>(steps, rows));
  DeviceArray<double> d_root(dinv ? n : 0, "Lanczos D^-1/2"), u(n, "Lanczos u"), u_prev(n, "Lanczos u_prev"),
      w(n, "Lanczos w"), t(n, "Lanczos D^-1/2 u");
  // coeffs[-1] = the start vector's squared norm, coeffs[2j] = alpha_j, coeffs[2j + 1] = beta_{j+1}^2: the steps
  // run back to back on the device, read once at the end (a breakdown's later steps are read and ignored)
  DeviceArray<double> coeff_storage(2 * static_cast<size_t>(steps) + 1, "Lanczos coefficients");
  double* coeffs = coeff_storage.data() + 1;
  const ReductionWorkspace ws(reduction_blocks(n), 1);
  if (dinv) thrust_sqrt(dinv, d_root.data(), n, s);
  const double* d = dinv ? d_root.data() : nullptr;
  // u_1: random (the whole system's draws at this rank's rows), unit norm (u_0 = 0 so that 0 * u_0 stays 0)
  launch_fill_splitmix_uniform(seed, w.data(), static_cast<size_t>(n), s, static_cast<uint64_t>(first_row));
  launch_dot(w.data(), w.data(), n, ws, coeffs - 1, s);
  sums.sum(coeffs - 1, 1, s);                                                       // ||w||^2 over every row
  launch_lanczos_next(n, w.data(), d, coeffs, -1, u.data(), t.data(), s);
  launch_fill(0.0, u_prev.data(), static_cast<size_t>(n), s);
  for (int j = 0; j < steps; ++j) {
    A.apply(1.0, t.data(), 0.0, w.data(), 1, s);                                     // w = A D^-1/2 u_j
    launch_lanczos_scale_dot(n, w.data(), u.data(), d, ws, coeffs, j, s);           // w = S u_j, alpha_j = w . u_j
    sums.sum(coeffs + 2 * j, 1, s);
    launch_lanczos_orthogonalize(n, w.data(), u.data(), u_prev.data(), ws, coeffs, j, s);  // w -= alpha_j u_j + beta_j u_{j-1}
    sums.sum(coeffs + 2 * j + 1, 1, s);                                             // beta_{j+1}^2 = w . w
    if (j + 1 == steps) break;
    launch_lanczos_next(n, w.data(), d, coeffs, j, u_prev.data(), t.data(), s);     // u_{j+1} = w / beta_{j+1}
    std::swap(u, u_prev);                                                           // (u_{j-1} is no longer needed)
  }
  std::vector<double> c(2 * static_cast<size_t>(steps));
  CHECK_CUDA(cudaMemcpyAsync(c.data(), coeffs, sizeof(double) * c.size(), cudaMemcpyDeviceToHost, s));
  sums.wait(s);
  std::vector<double> alpha, beta;  // beta[j]: the coupling of u_j and u_{j+1}
  for (int j = 0; j < steps; ++j) {
    const double a = c[2 * j], b = std::sqrt(c[2 * j + 1]);
    if (!std::isfinite(a) || !std::isfinite(b)) {
      est.finite = false;
      break;
    }
    alpha.push_back(a);
    beta.push_back(b);
    ++est.steps;
    // an invariant subspace: T_j's eigenvalues are exact eigenvalues of S
    if (b <= 1e-14 * std::abs(a)) break;
  }
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
