#pragma once
// Estimates of the extreme eigenvalues of D^-1 A (D = diag(A), or the identity) by Lanczos on the device: what
// a Chebyshev preconditioner or smoother needs for its interval, and smoothed aggregation for its Jacobi
// damping omega = 4 / (3 lambda_max). A few SpMVs; the tridiagonal's eigenvalues on the host. On several GPUs
// (A a rank's share: ranks_of(A)) the same steps run over the ranks: A's applies are collective and every dot
// product is summed over the ranks in rank order, so every rank gets the same tridiagonal, bit for bit, and the
// same estimate.
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
  int64_t rows = 0;        // the rows it ran over: A's, summed over the ranks (0 when no step ran)
};

// `steps` Lanczos steps on D^-1 A in the D inner product (the symmetric D^-1/2 A D^-1/2), from a random start
// vector drawn from `seed`. dinv: the inverse diagonal on the host (empty: D = I). A must be square and
// symmetric; an indefinite A shows as lambda_min <= 0.
SpectrumEstimate estimate_spectrum(const LinearOperator& A, const std::vector<double>& dinv, int steps,
                                   uint64_t seed = 1);
// The same with the inverse diagonal on the device (nullptr: D = I; a rank's: its rows'), on `stream`.
// first_row: the index of A's first row in the whole system (a rank's first row; 0 on one GPU), so that the
// start vector is the whole system's on any rank count. Collective where A's applies are.
SpectrumEstimate estimate_spectrum(const LinearOperator& A, const double* dinv_device, int steps, uint64_t seed,
                                   cudaStream_t stream, int64_t first_row = 0);

// Host values summed over the ranks A's rows are a share of, in rank order (every rank gets the same bits); on
// one GPU the values themselves, with no device work. For setups that decide from a few numbers (how many rows,
// how many failed a check). Collective on several GPUs: every rank calls it with as many values.
std::vector<double> sum_over_ranks(const LinearOperator& A, std::vector<double> values, cudaStream_t stream);
// Every rank's values in rank order (ranks x values.size(), row-major), on every rank; on one GPU the values
// themselves. A sum of blocks that are zero but in each rank's own slot: exact, so a minimum or maximum over
// the ranks is taken from it bit for bit. Collective on several GPUs.
std::vector<double> gather_over_ranks(const LinearOperator& A, const std::vector<double>& values, cudaStream_t stream);

}  // namespace spcg
