#pragma once
// The k x k work of block CG on the host: a column-major small matrix, the rank-revealing Cholesky-QR factor
// of a Gram matrix, an SPD solve and the products the recurrence needs. Host-only (no CUDA), so the tests check
// it on every machine.
#include <vector>

#include "kernels/solver_ops/small_matrix.hpp"

namespace spcg {

// Rank-revealing Cholesky-QR of a block W from its Gram matrix G = W'W (m x m): W T has orthonormal columns.
// G is equilibrated first (D G D with D = diag(G)^-1/2, so a column's length does not decide whether it is
// dependent), then factored by a Cholesky with diagonal pivoting, D G D = Pi L L' Pi', stopping before the first
// pivot <= drop (the squared sine of the angle between that column and the span of the kept ones).
struct Orth {
  std::vector<int> kept;  // columns of W that span the block, in pivot order
  Small T;                // m x r, T = D Pi[:, kept] L^-T: zero rows for the columns left out
  double pivot_ratio = 1;  // first over last kept pivot of D G D: estimates cond(D G D), so cond(W D)^2
  // The largest pivot left when the factorisation stopped (0 when every column was kept): below -drop it says
  // G is indefinite (for G = W'AW: A is not positive definite on the span of W).
  double rejected_pivot = 0;
  bool negative_diagonal = false;  // a column that is not excluded has G(i, i) < 0
};
// Columns marked in `excluded` (or with a zero diagonal) are never pivots.
Orth pivoted_cholqr(const Small& G, double drop, const std::vector<bool>& excluded = {});

// Solves S X = Y in place for SPD S (r x r) by Cholesky; returns false when S is not numerically positive
// definite (a pivot <= 0 or not finite).
bool spd_solve(const Small& S, Small& Y);

Small matmul(const Small& A, const Small& B);                  // A B
Small tmatmul(const Small& A, const Small& B);                 // A' B
Small sub(const Small& A, int r0, int c0, int rows, int cols);  // A(r0 : r0 + rows, c0 : c0 + cols)

}  // namespace spcg
