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

// Block-Jacobi setup: for every diagonal block g (rows [g b, min(n, g b + b))), its inverse by a Cholesky
// factorisation, stored densely as b x b row-major (a last, shorter block is padded with the identity).
// *first_bad (device, set to INT32_MAX by the caller) receives the smallest block whose Cholesky failed (the
// block is not positive definite). b <= kBlockJacobiMaxSize.
constexpr int kBlockJacobiMaxSize = 8;
void launch_block_jacobi_setup(const DeviceCsr& a, int b, double* inverses, int32_t* first_bad, cudaStream_t s);
// Z = blockdiag(inverses) R, one thread per entry of Z.
void launch_block_jacobi_apply(int64_t n, int b, const double* inverses, const double* r, double* z, int k,
                               cudaStream_t s);
// *ok (device, set to 1 by the caller) is cleared unless every row's entries come in aligned runs of b columns
// [m b, m b + b) and n is a multiple of b: the node block structure of a finite-element matrix with b unknowns
// per node (the structural bcsstk files have b = 6 or 3).
void launch_node_block_check(const DeviceCsr& a, int b, int* ok, cudaStream_t s);

}  // namespace spcg
