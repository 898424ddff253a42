#pragma once
// Device kernels of the preconditioners' applies and of block-Jacobi's setup (solver/preconditioner.cpp and
// solver/amg.cpp compose them with the operator interface). Blocks are n x k, row-major.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_formats.hpp"

namespace spcg {

// One step of the Chebyshev iteration (Saad, Iterative Methods for Sparse Linear Systems, 2nd ed., Alg. 12.1)
// on D^-1 A, with res the current residual b - A x:
//   first step: d = c2 * scale .* res;           then x = d (x_is_zero) or x += d
//   later ones: d = c1 * d + c2 * scale .* res;  x += d
// scale is indexed by row (D^-1, or the l1-Jacobi scaling with c1 = 0, c2 = 1).
void launch_chebyshev_step(int64_t n, int k, const double* scale, const double* res, double* d, double* x, double c1,
                           double c2, bool first, bool x_is_zero, cudaStream_t s);
// A later step on rows[0..count) alone, into d_out (the rows a fused step left apart, FusedSmoothing): the
// arithmetic of the step above, d_out = c1 d_in + c2 scale .* res, x += d_out.
void launch_chebyshev_rows(int32_t count, const int32_t* rows, const double* scale, const double* res, const double* d_in,
                           double* d_out, double* x, double c1, double c2, cudaStream_t s);

// Block-Jacobi's blocks are A's node blocks of b rows: rows [m b, m b + b) of A. A rank of several GPUs holds
// rows that start `offset` = (its first row) mod b rows into a node block, so its local row i lies in block
// g = (i + offset) / b, rows [max(g b - offset, 0), min(g b + b - offset, n)) of its own: the blocks stay A's,
// and a block that straddles two ranks is cut at the boundary (each rank inverts its part; offset 0 on one GPU).
//
// Setup: every block's inverse by a Cholesky factorisation, stored densely as b x b row-major (a shorter, cut
// block padded with the identity). *first_bad (device, set to INT32_MAX by the caller) receives the smallest
// block g whose Cholesky failed (the block is not positive definite). b <= kBlockJacobiMaxSize.
constexpr int kBlockJacobiMaxSize = 8;
// The blocks of n rows starting `offset` into a node block (offset < b).
inline int64_t block_jacobi_blocks(int64_t n, int b, int offset) { return n == 0 ? 0 : (n + offset + b - 1) / b; }
void launch_block_jacobi_setup(const DeviceCsr& a, int b, int offset, double* inverses, int32_t* first_bad,
                               cudaStream_t s);
// Z = blockdiag(inverses) R, one thread per entry of Z.
void launch_block_jacobi_apply(int64_t n, int b, int offset, const double* inverses, const double* r, double* z, int k,
                               cudaStream_t s);
// *failed (device, set to 0 by the caller) becomes 1 unless every row's entries come in runs of consecutive
// columns that are whole node blocks of b (columns [m b, m b + b) of A, with the rows' `offset` as above): the
// node block structure of a finite-element matrix with b unknowns per node (the structural bcsstk files have
// b = 6 or 3). A run may be cut only where a rank's columns end (its first and last column), where the node
// continues on the next rank. That A's row count is a multiple of b the caller checks (over every rank).
void launch_node_block_check(const DeviceCsr& a, int b, int offset, double* failed, cudaStream_t s);

}  // namespace spcg
