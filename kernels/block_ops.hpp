#pragma once
// Tall-skinny dense kernels of block CG on row-major n x m blocks (m <= 64 columns; leading dimensions given).
// Every reduction is deterministic: per-block partial sums, then one warp per result sums them in block order.
#include <cuda_runtime.h>

#include <cstdint>

#include "device_array.hpp"

namespace spcg {

constexpr int kBlockOpsMaxColumns = 64;

// Per-block partial sums of the reductions below, for blocks of at most max_columns columns.
struct BlockOpsWorkspace {
  int max_blocks = 0, columns = 0;
  DeviceArray<double> partials;
  explicit BlockOpsWorkspace(int max_columns);
};

// out = [U' V1, U' V2] (a x (b1 + b2), column-major, leading dimension a); V2 may be null (b2 = 0).
// Needs ceil(a/4) * ceil((b1 + b2)/4) <= 256 (a 4 x 4 tile per thread): a <= 32 and b1 + b2 <= 64 always fit.
void launch_block_gram(int64_t n, const double* U, int ldu, int a, const double* V1, int ldv1, int b1, const double* V2,
                       int ldv2, int b2, double* out, BlockOpsWorkspace& ws, cudaStream_t s);
// Y (n x b) = beta Y + C(:, sel) + U (n x a) M (a x b, column-major on the device); C (ld ldc) and the device
// column list sel (b entries) are optional. Y may be U (in place, same ld). beta == 0 does not read Y.
void launch_block_combine(int64_t n, double* Y, int ldy, int b, double beta, const double* U, int ldu, int a,
                          const double* M, cudaStream_t s, const double* C = nullptr, int ldc = 0,
                          const int* sel = nullptr);
// X += P A; R -= Q A for A (r x k, column-major, device); rr[c] = ||R(:, c)||^2 afterwards. X, R: n x k
// (ld k); P, Q: n x r (ld r).
void launch_block_update_xr(int64_t n, int k, int r, double* X, double* R, const double* P, const double* Q,
                            const double* A, double* rr, BlockOpsWorkspace& ws, cudaStream_t s);

}  // namespace spcg
