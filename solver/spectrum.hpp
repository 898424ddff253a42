#pragma once
// Estimates of the extreme eigenvalues of D^-1 A (D = diag(A), or the identity) by Lanczos on the device: what
// a Chebyshev preconditioner or smoother needs for its interval, and smoothed aggregation for its Jacobi
// damping omega = 4 / (3 lambda_max). A few SpMVs; the tridiagonal's eigenvalues on the host.
#include <cstdint>
#include <vector>

#include "kernels/linear_operator.hpp"

namespace spcg {

struct SpectrumEstimate {
  double lambda_max = 0;   // the largest Ritz value: never above the true lambda_max (up to rounding)
  double max_error = 0;    // |beta_{m+1} e_m' y|: [lambda_max, lambda_max + max_error] holds an eigenvalue
  double lambda_min = 0;   // the smallest Ritz value: never below the true lambda_min
  int steps = 0;           // Lanczos steps taken (fewer than asked when an invariant subspace was found)
  bool finite = true;      // false when the iteration met a NaN or Inf (A not usable)
};

// `steps` Lanczos steps on D^-1 A in the D inner product (the symmetric D^-1/2 A D^-1/2), from a random start
// vector drawn from `seed`. dinv: the inverse diagonal on the host (empty: D = I). A must be square and
// symmetric; an indefinite A shows as lambda_min <= 0.
SpectrumEstimate estimate_spectrum(const LinearOperator& A, const std::vector<double>& dinv, int steps,
                                   uint64_t seed = 1);
// The same with the inverse diagonal on the device (nullptr: D = I), on `stream`.
SpectrumEstimate estimate_spectrum(const LinearOperator& A, const double* dinv_device, int steps, uint64_t seed,
                                   cudaStream_t stream);

}  // namespace spcg
