// Block CG's dense n x m work without cuBLAS. cuBLAS GEMM on these shapes (m = 16, inner dimension n or 16)
// ran at 30-55% of the copy bandwidth (H200, k = 16: 190 us for a Gram of two 268 MB blocks, 345-460 us for
// Y = Y + U M); these are streaming kernels that read each block once.
// Work mapping:
//  gram:    a thread owns a 4 x 4 tile of the a x b result and accumulates it over rows (one row per slice of
//           threads per step), tiles are reduced over slices in shared memory in a fixed order.
//  combine: a thread per output entry (row, c); the block stages its rows of U in shared memory first, so Y
//           may overwrite U in place; M sits in shared memory.
//  update:  a thread per (row, c) of X and R, both updated from the same small A; |R(:, c)|^2 per column.
#include <algorithm>

#include "block_ops.hpp"
#include "device_utils.cuh"

namespace spcg {
namespace {

struct BlockOpsTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;
  static constexpr int tile = 4;                  // gram: 4 x 4 register tile per thread
  static constexpr int max_u_tile = 2048;         // combine: doubles of U staged per block
  static constexpr int gram_blocks_per_sm = 3;    // gram/update: partial sums per block, reduced afterwards
  static constexpr int columns_per_thread = 4;    // combine/update: adjacent output columns per thread
};

int ceil_div(int a, int b) { return (a + b - 1) / b; }
int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// out[i] = sum over blocks b (in order) of partials[b * count + i]: one warp per entry, lanes stride the
// blocks, a fixed shuffle tree (deterministic, and parallel, unlike a last-block combine of ~1000 blocks).
__global__ void reduce_partials_kernel(const double* __restrict__ partials, int blocks, int count, double* out) {
  const int i = blockIdx.x, lane = threadIdx.x;
  double v[4] = {0, 0, 0, 0};
  for (int b0 = lane; b0 < blocks; b0 += 4 * 32) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int b = b0 + u * 32;
      v[u] += b < blocks ? partials[int64_t{b} * count + i] : 0.0;
    }
  }
  const double s = dev::warp_sum((v[0] + v[1]) + (v[2] + v[3]));
  if (lane == 0) out[i] = s;
}

__global__ void __launch_bounds__(BlockOpsTuning::threads, 3)
    gram_kernel(int64_t n, const double* __restrict__ U, int ldu, int a, const double* __restrict__ V1, int ldv1, int b1,
                const double* __restrict__ V2, int ldv2, int b2, double* partials) {
  constexpr int TL = BlockOpsTuning::tile;
  extern __shared__ double smem[];  // slices x tiles x TL*TL, then the block result a x b
  const int b = b1 + b2, tiles_a = (a + TL - 1) / TL, tiles_b = (b + TL - 1) / TL, tiles = tiles_a * tiles_b;
  const int slices = blockDim.x / tiles;
  const int slice = threadIdx.x / tiles, t = threadIdx.x % tiles;
  const int ta = t % tiles_a, tb = t / tiles_a;
  double acc[TL][TL] = {};
  if (slice < slices) {
    for (int64_t row = int64_t{blockIdx.x} * slices + slice; row < n; row += int64_t{gridDim.x} * slices) {
      double u[TL], v[TL];
#pragma unroll
      for (int i = 0; i < TL; ++i) {
        const int l = ta * TL + i, c = tb * TL + i;
        u[i] = l < a ? __ldg(U + row * ldu + l) : 0.0;
        v[i] = c < b1 ? __ldg(V1 + row * ldv1 + c) : c < b ? __ldg(V2 + row * ldv2 + (c - b1)) : 0.0;
      }
#pragma unroll
      for (int i = 0; i < TL; ++i)
#pragma unroll
        for (int j = 0; j < TL; ++j) acc[i][j] = fma(u[i], v[j], acc[i][j]);
    }
    double* mine = smem + (int64_t{slice} * tiles + t) * TL * TL;
#pragma unroll
    for (int i = 0; i < TL; ++i)
#pragma unroll
      for (int j = 0; j < TL; ++j) mine[i * TL + j] = acc[i][j];
  }
  __syncthreads();
  double* result = smem + int64_t{slices} * tiles * TL * TL;  // a x b column-major
  for (int e = threadIdx.x; e < a * b; e += blockDim.x) {
    const int l = e % a, c = e / a;
    const int tt = (l / TL) + (c / TL) * tiles_a, off = (l % TL) * TL + (c % TL);
    double s = 0;
    for (int sl = 0; sl < slices; ++sl) s += smem[(int64_t{sl} * tiles + tt) * TL * TL + off];
    result[e] = s;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a * b; e += blockDim.x) partials[int64_t{blockIdx.x} * a * b + e] = result[e];
}

__global__ void combine_kernel(int64_t n, double* Y, int ldy, int b, int group, int rows_per_block, double beta,
                               const double* U, int ldu, int a, const double* __restrict__ M,
                               const double* __restrict__ C, int ldc, const int* __restrict__ sel) {
  constexpr int CW = BlockOpsTuning::columns_per_thread;
  extern __shared__ double smem[];  // M (a x b), then the U rows of this step (stride a + 1: no bank conflicts)
  double* s_m = smem;  // M transposed (row l contiguous over c): a thread's CW columns are adjacent
  double* s_u = smem + a * b;
  const int su = a + 1;
  for (int e = threadIdx.x; e < a * b; e += blockDim.x) s_m[(e % a) * b + e / a] = M[e];
  const int local = threadIdx.x / group, c0 = CW * (threadIdx.x % group);
  for (int64_t base = int64_t{blockIdx.x} * rows_per_block; base < n; base += int64_t{gridDim.x} * rows_per_block) {
    __syncthreads();  // s_m ready; the previous step's s_u reads are done
    for (int e = threadIdx.x; e < rows_per_block * a; e += blockDim.x) {
      const int64_t row = base + e / a;
      s_u[(e / a) * su + e % a] = row < n ? U[row * ldu + e % a] : 0.0;
    }
    __syncthreads();
    const int64_t row = base + local;
    if (row < n && c0 < b && local < rows_per_block) {
      double sum[CW];
#pragma unroll
      for (int j = 0; j < CW; ++j) sum[j] = C && c0 + j < b ? C[row * ldc + sel[c0 + j]] : 0.0;
      for (int l = 0; l < a; ++l) {
        const double u = s_u[local * su + l];
#pragma unroll
        for (int j = 0; j < CW; ++j)
          if (c0 + j < b) sum[j] = fma(u, s_m[l * b + c0 + j], sum[j]);
      }
#pragma unroll
      for (int j = 0; j < CW; ++j) {
        if (c0 + j >= b) break;
        double* y = Y + row * ldy + c0 + j;
        *y = beta == 0.0 ? sum[j] : fma(beta, *y, sum[j]);
      }
    }
  }
}

__global__ void update_xr_kernel(int64_t n, int k, int r, int group, int rows_per_block, double* __restrict__ X,
                                 double* __restrict__ R, const double* __restrict__ P, const double* __restrict__ Q,
                                 const double* __restrict__ A, double* partials) {
  constexpr int CW = BlockOpsTuning::columns_per_thread;
  // smem: A transposed (row l contiguous over c), CW squared-residual sums per thread, then this step's rows of
  // P and Q (coalesced loads; stride r + 1 so the rows of a warp fall in different banks)
  extern __shared__ double smem[];
  const int sr = r + 1;
  double* s_a = smem;
  double* s_sq = s_a + r * k;
  double* s_p = s_sq + blockDim.x * CW;
  double* s_q = s_p + rows_per_block * sr;
  for (int e = threadIdx.x; e < r * k; e += blockDim.x) s_a[(e % r) * k + e / r] = A[e];
  const int local = threadIdx.x / group, c0 = CW * (threadIdx.x % group);
  double sq[CW] = {};
  for (int64_t base = int64_t{blockIdx.x} * rows_per_block; base < n; base += int64_t{gridDim.x} * rows_per_block) {
    __syncthreads();  // s_a ready; the previous step's reads are done
    for (int e = threadIdx.x; e < rows_per_block * r; e += blockDim.x) {
      const int64_t row = base + e / r;
      s_p[(e / r) * sr + e % r] = row < n ? __ldg(P + row * r + e % r) : 0.0;
      s_q[(e / r) * sr + e % r] = row < n ? __ldg(Q + row * r + e % r) : 0.0;
    }
    __syncthreads();
    const int64_t row = base + local;
    if (row < n && c0 < k && local < rows_per_block) {
      double dx[CW] = {}, dr[CW] = {};
      for (int l = 0; l < r; ++l) {
        const double p = s_p[local * sr + l], q = s_q[local * sr + l];
#pragma unroll
        for (int j = 0; j < CW; ++j) {
          const double alc = c0 + j < k ? s_a[l * k + c0 + j] : 0.0;
          dx[j] = fma(p, alc, dx[j]);
          dr[j] = fma(q, alc, dr[j]);
        }
      }
#pragma unroll
      for (int j = 0; j < CW; ++j) {
        if (c0 + j >= k) break;
        X[row * k + c0 + j] += dx[j];
        const double rn = R[row * k + c0 + j] - dr[j];
        R[row * k + c0 + j] = rn;
        sq[j] = fma(rn, rn, sq[j]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < CW; ++j) s_sq[threadIdx.x * CW + j] = sq[j];
  __syncthreads();
  if (threadIdx.x < k) {  // per-column block sums in a fixed order
    const int c = threadIdx.x;
    double s = 0;
    for (int t = c / CW; t < static_cast<int>(blockDim.x); t += group) s += s_sq[t * CW + c % CW];
    partials[int64_t{blockIdx.x} * k + c] = s;
  }
}

int grid_for(int64_t units) {
  return grid_stride_blocks(std::max<int64_t>(units, 1), 1, BlockOpsTuning::blocks_per_sm);
}

}  // namespace

BlockOpsWorkspace::BlockOpsWorkspace(int max_columns)
    : max_blocks(device_sm_count() * BlockOpsTuning::gram_blocks_per_sm),
      columns(max_columns) {
  // gram: blocks x a x (b1 + b2) with a, b1, b2 <= columns; update: blocks x k
  const size_t gram = static_cast<size_t>(max_blocks) * columns * 2 * columns, update = 4ull * max_blocks * columns;
  partials = DeviceArray<double>(std::max(gram, update), "block-cg partial sums");
}

void launch_block_gram(int64_t n, const double* U, int ldu, int a, const double* V1, int ldv1, int b1, const double* V2,
                       int ldv2, int b2, double* out, BlockOpsWorkspace& ws, cudaStream_t s) {
  const int b = b1 + b2;
  if (a == 0 || b == 0) return;
  if (a > kBlockOpsMaxColumns || b > 2 * kBlockOpsMaxColumns) throw CudaError("block gram: too many columns");
  constexpr int TL = BlockOpsTuning::tile;
  const int tiles = ceil_div(a, TL) * ceil_div(b, TL);
  const int threads = BlockOpsTuning::threads;
  if (tiles > threads) throw CudaError("block gram: " + std::to_string(a) + " x " + std::to_string(b) + " exceeds one tile per thread");
  const int slices = threads / tiles;
  const size_t smem = (static_cast<size_t>(slices) * tiles * TL * TL + static_cast<size_t>(a) * b) * sizeof(double);
  if (a > ws.columns || b1 > ws.columns || b2 > ws.columns) throw CudaError("block gram: workspace too small");
  const int blocks = std::min(ws.max_blocks, grid_for(n == 0 ? 1 : (n + slices - 1) / slices));
  if (smem > 48 * 1024) CHECK_CUDA(cudaFuncSetAttribute(gram_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  gram_kernel<<<blocks, threads, smem, s>>>(n, U, ldu, a, V1, ldv1, b1, V2, ldv2, b2, ws.partials.data());
  CHECK_LAUNCH("block-gram");
  reduce_partials_kernel<<<a * b, 32, 0, s>>>(ws.partials.data(), blocks, a * b, out);
  CHECK_LAUNCH("block-gram-reduce");
}

void launch_block_combine(int64_t n, double* Y, int ldy, int b, double beta, const double* U, int ldu, int a,
                          const double* M, cudaStream_t s, const double* C, int ldc, const int* sel) {
  if (n == 0 || b == 0) return;
  if (a == 0 && !C) {
    if (beta != 1.0) throw CudaError("block combine: nothing to add and beta != 1");
    return;
  }
  const int group = next_pow2(ceil_div(b, BlockOpsTuning::columns_per_thread));
  int rows_per_block = std::max(1, BlockOpsTuning::threads / group);
  rows_per_block = std::max(1, std::min(rows_per_block, BlockOpsTuning::max_u_tile / (a + 1)));
  const int threads = std::max(32, rows_per_block * group);
  const size_t smem = (static_cast<size_t>(a) * b + static_cast<size_t>(rows_per_block) * (a + 1)) * sizeof(double);
  const int blocks = grid_for((n + rows_per_block - 1) / rows_per_block);
  if (smem > 48 * 1024) CHECK_CUDA(cudaFuncSetAttribute(combine_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  combine_kernel<<<blocks, threads, smem, s>>>(n, Y, ldy, b, group, rows_per_block, beta, U, ldu, a, M, C, ldc, sel);
  CHECK_LAUNCH("block-combine");
}

void launch_block_update_xr(int64_t n, int k, int r, double* X, double* R, const double* P, const double* Q,
                            const double* A, double* rr, BlockOpsWorkspace& ws, cudaStream_t s) {
  if (k == 0) return;
  if (k > kBlockOpsMaxColumns || r > kBlockOpsMaxColumns) throw CudaError("block update: too many columns");
  const int group = next_pow2(ceil_div(k, BlockOpsTuning::columns_per_thread));
  const int rows_per_block = std::max(1, std::min(BlockOpsTuning::threads / group, BlockOpsTuning::max_u_tile / (r + 1)));
  const int threads = std::max(32, rows_per_block * group);
  const size_t smem = (static_cast<size_t>(r) * k + static_cast<size_t>(threads) * BlockOpsTuning::columns_per_thread +
                       2 * static_cast<size_t>(rows_per_block) * (r + 1)) * sizeof(double);
  const int blocks = std::min(ws.max_blocks * 4, grid_for((std::max<int64_t>(n, 1) + rows_per_block - 1) / rows_per_block));
  if (k > ws.columns) throw CudaError("block update: workspace too small");
  if (smem > 48 * 1024) CHECK_CUDA(cudaFuncSetAttribute(update_xr_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  update_xr_kernel<<<blocks, threads, smem, s>>>(n, k, r, group, rows_per_block, X, R, P, Q, A, ws.partials.data());
  CHECK_LAUNCH("block-update-xr");
  reduce_partials_kernel<<<k, 32, 0, s>>>(ws.partials.data(), blocks, k, rr);
  CHECK_LAUNCH("block-update-reduce");
}

}  // namespace spcg
