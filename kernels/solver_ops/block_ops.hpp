#pragma once
// Tall-skinny dense kernels of block CG on row-major n x m blocks (leading dimension = column count).
// Every reduction is deterministic: per-block partial sums, then one warp per result sums them in block order.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_array.hpp"

namespace spcg {

// Widest operand of the combine and update kernels; the Gram takes up to this many columns on each side.
constexpr int kBlockOpsMaxColumns = 32;
constexpr int kBlockGramMaxColumns = 2 * kBlockOpsMaxColumns;
// Widest W, V, R and X of the one-pass block CG step (two 8-column MMA tiles).
constexpr int kBlockStepMaxColumns = 16;

// Per-block partial sums of the reductions below, for blocks of at most max_columns columns.
struct BlockOpsWorkspace {
  int gram_blocks = 0, update_blocks = 0, columns = 0;
  DeviceArray<double> partials;
  explicit BlockOpsWorkspace(int max_columns);
};

// The two sides of a Gram product, row-major blocks side by side (two on the left, up to three on the right);
// the rows of U2 may be scaled by a vector (block Jacobi: D^-1 V).
struct GramInputs {
  const double* U1 = nullptr;
  int a1 = 0;
  const double* U2 = nullptr;
  int a2 = 0;
  const double* u2_row_scale = nullptr;  // optional: U2(i, :) *= u2_row_scale[i]
  const double* V1 = nullptr;
  int b1 = 0;
  const double* V2 = nullptr;
  int b2 = 0;
  const double* V3 = nullptr;  // optional third block on the right
  int b3 = 0;
};

// out = [U1, diag(s) U2]' [V1, V2, V3]: (a1 + a2) x (b1 + b2 + b3), column-major, leading dimension a1 + a2.
// a1 + a2 <= 64 and b1 + b2 + b3 <= 64.
void launch_block_gram(int64_t n, const GramInputs& in, double* out, BlockOpsWorkspace& ws, cudaStream_t s);
// Y (n x b) = diag(d) C(:, sel) + U (n x a) M (a x b, column-major, device). C (ldc columns), the device column
// list sel (b entries; null: the first b columns) and d are optional; a may be 0. a, b <= 32. Y must not overlap
// U or C.
// With X: also X (n x k) += U A2 (a x k, column-major, device) in the same pass; X must not overlap Y, U or C.
void launch_block_combine(int64_t n, double* Y, int b, const double* U, int a, const double* M, const double* C,
                          int ldc, const int* sel, const double* d, cudaStream_t s, double* X = nullptr, int k = 0,
                          const double* A2 = nullptr);
// X += W A; R -= V A for A (m x k, column-major, device); rr[c] = ||R(:, c)||^2 afterwards. X, R: n x k;
// W, V: n x m; m, k <= 32. X = W = nullptr: R only (the caller applies X += W A later).
void launch_block_update_xr(int64_t n, int k, int m, double* X, double* R, const double* W, const double* V,
                            const double* A, double* rr, BlockOpsWorkspace& ws, cudaStream_t s);

// Block CG's update and next search block in one pass (m, k <= kBlockStepMaxColumns):
//   X += W Ta;  R -= V Ta;  rr[c] = ||R(:, c)||^2 afterwards;
//   Wn(:, pos[c]) = diag(d) R(:, c) + W Tb(:, c) for every c with pos[c] >= 0 (Wn: n x b).
// W, V: n x m; R, X: n x k; Ta, Tb: m x k, column-major, device; pos: k device ints; d optional.
// kept_in_order: pos[c] = c for every c (b = k), so Wn rows are written whole. Wn must not overlap the others.
void launch_block_step(int64_t n, int m, int k, const double* W, const double* V, double* R, double* X,
                       const double* d, const double* Ta, const double* Tb, const int* pos, int b, bool kept_in_order,
                       double* Wn, double* rr, BlockOpsWorkspace& ws, cudaStream_t s);

}  // namespace spcg
