#pragma once
// The loop a user would hand-roll: cusparseSpMV + cublasDdot/Daxpy/Dscal with host-side scalars (one
// synchronisation per dot). Run by `spcg bench cg` in the same process as ours.
#include "spcg/csr_matrix.hpp"

namespace spcg {
struct ReferenceCgResult {
  int iterations = 0;
  double ms = 0;
  double relative_residual = 0;
};
ReferenceCgResult reference_cusparse_cublas_cg(const CsrMatrix& a, double rtol, int maxit);
}  // namespace spcg
