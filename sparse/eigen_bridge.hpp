#pragma once
// Host reference: conversions to and from Eigen and Eigen's ConjugateGradient (reference SpMM and residuals:
// csr_matrix.hpp).
// Host-only (.cpp consumers); Eigen never goes through nvcc.
#include <Eigen/Sparse>

#include "spcg/csr_matrix.hpp"

namespace spcg {

using EigenCsr = Eigen::SparseMatrix<double, Eigen::RowMajor, int>;

EigenCsr to_eigen(const CsrMatrix& a);
CsrMatrix from_eigen(const EigenCsr& m);

struct HostSolveResult {
  DenseBlock x;
  std::vector<int> iterations;        // per column
  std::vector<double> relative_error;  // Eigen's estimate ||r|| / ||b|| per column
  bool all_converged = false;
  double seconds = 0;
};

// Eigen ConjugateGradient on every column of b: unpreconditioned (identity), or with Jacobi (diagonal); each
// column stops at ||r|| <= max(rtol ||b_j||, atol), the library's rule.
HostSolveResult eigen_cg(const CsrMatrix& a, const DenseBlock& b, double rtol, int maxit, bool jacobi,
                         const DenseBlock* x0 = nullptr, double atol = 0);
// A preconditioner name would convert to `true` silently: refused at compile time.
HostSolveResult eigen_cg(const CsrMatrix&, const DenseBlock&, double, int, const char*, const DenseBlock* = nullptr) = delete;

}  // namespace spcg
