#pragma once
// Host reference: conversions to and from Eigen, reference SpMV/SpMM and Eigen's ConjugateGradient.
// Host-only (.cpp consumers); Eigen never goes through nvcc.
#include <Eigen/Sparse>

#include "csr_matrix.hpp"

namespace spcg {

using EigenCsr = Eigen::SparseMatrix<double, Eigen::RowMajor, int>;

EigenCsr to_eigen(const CsrMatrix& a);
CsrMatrix from_eigen(const EigenCsr& m);

// Y = alpha * A * X + beta * Y, accumulated in long double (the reference the GPU kernels are held to).
// beta == 0 never reads Y (NaN-poisoned Y stays out of the result).
void reference_spmm(const CsrMatrix& a, double alpha, const DenseBlock& x, double beta, DenseBlock& y);

struct HostSolveResult {
  DenseBlock x;
  std::vector<int> iterations;        // per column
  std::vector<double> relative_error;  // Eigen's estimate ||r|| / ||b|| per column
  bool all_converged = false;
  double seconds = 0;
};

// Eigen ConjugateGradient on every column of b. precond: "none" (identity) or "jacobi" (diagonal).
HostSolveResult eigen_cg(const CsrMatrix& a, const DenseBlock& b, double rtol, int maxit, const std::string& precond,
                         const DenseBlock* x0 = nullptr);

// ||b - A x|| / ||b|| per column, in long double.
std::vector<double> relative_residuals(const CsrMatrix& a, const DenseBlock& x, const DenseBlock& b);

}  // namespace spcg
