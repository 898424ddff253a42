#pragma once
// Device pieces the solvers' vector kernels share (kernels/solver_ops/vector_ops.cu, cg_ops.cu, lanczos_ops.cu):
// the tuning, the unrolled grid-stride loop and the deterministic reductions (fixed grid, per-block partials, the
// last block to arrive combines them in block order). Work mapping: grid-stride loops over a fixed grid of
// reduction_blocks(n) blocks; the block forms (n x k, multi-cg) give thread t of a row-stride loop the entry
// (i, j) = (t / k, t % k). Device code only; each including file gets its own copy (internal linkage).
#include <algorithm>
#include <cstdint>

#include "kernels/device_utils.cuh"

namespace spcg {
namespace {

struct VectorTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;
  static constexpr int max_width = 128;  // column sums per block (multi-cg k)
  static constexpr int unroll = 4;       // CG updates: independent rows per thread per step (loads in flight)
};

// Grid-stride loop over [0, n) with U elements per thread per step: load(i, u) for all of them first, then
// use(i, u), so U independent rows' loads are in flight per thread (what the CG updates need to stream).
template <int U, class Load, class Use>
__device__ __forceinline__ void unrolled_grid_loop(int64_t n, Load&& load, Use&& use) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < n; base += U * stride) {
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < n) load(base + u * stride, u);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (base + u * stride < n) use(base + u * stride, u);
  }
}

// Block sums of W values (thread 0 gets them), then the last block combines partials in order into out[0..W).
template <int W>
__device__ bool multi_epilogue(double* partials, unsigned* counter, double (&v)[W], double* out) {
#pragma unroll
  for (int w = 0; w < W; ++w) {
    const double s = dev::block_sum(v[w]);
    if (threadIdx.x == 0) partials[blockIdx.x * W + w] = s;
  }
  if (!dev::last_block_arrives(counter)) return false;
#pragma unroll
  for (int w = 0; w < W; ++w) {
    double s = 0;
    for (unsigned b0 = threadIdx.x; b0 < gridDim.x; b0 += 4 * blockDim.x) {  // 4 loads in flight per pass
      double v[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const unsigned b = b0 + u * blockDim.x;
        v[u] = b < gridDim.x ? __ldcg(partials + b * W + w) : 0.0;
      }
      s += (v[0] + v[1]) + (v[2] + v[3]);
    }
    s = dev::block_sum(s);
    if (threadIdx.x == 0) out[w] = s;
  }
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  return true;
}

// ---- block (multi-cg) forms: thread t of a row-stride loop handles entry (i, j) = (t / k, t % k). ----
// Column sums: each block accumulates k partial sums in shared memory (atomic-free: one owner per column slot).
template <int MaxK>
__device__ bool column_epilogue(double* partials, unsigned* counter, int k, double* smem, double* out) {
  // smem holds blockDim.x values; thread t contributed to column t % k (blockDim.x is a multiple of k).
  __syncthreads();
  if (threadIdx.x < k) {
    double sum = 0;
    for (int t = threadIdx.x; t < blockDim.x; t += k) sum += smem[t];
    partials[int64_t{blockIdx.x} * k + threadIdx.x] = sum;
  }
  if (!dev::last_block_arrives(counter)) return false;
  if (threadIdx.x < k) {
    double sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(partials + int64_t{b} * k + threadIdx.x);
    out[threadIdx.x] = sum;
  }
  if (threadIdx.x == 0) *counter = 0;
  __syncthreads();
  return true;
}

// Threads per block for the block kernels: a multiple of k, at most 1024 (k <= 128 -> >= 128 threads).
inline int block_threads(int k) { return std::max(1, 1024 / k) * k; }

// Per-column sums of two values per thread (thread t belongs to column t % k; blockDim.x is a multiple of k):
// block partials go to partials[block][2k], and the last block to arrive writes the grid totals to
// red[0..k) (first value) and red[k..2k) (second), in block order. Returns true in the last block only; the
// caller resets *counter when done with it.
__device__ bool two_column_totals(int k, double v1, double v2, double* smem, double* partials, unsigned* counter,
                                  double* red) {
  double* s1 = smem;
  double* s2 = smem + blockDim.x;
  s1[threadIdx.x] = v1;
  s2[threadIdx.x] = v2;
  __syncthreads();
  if (threadIdx.x < 2 * k) {
    const double* src = threadIdx.x < k ? s1 : s2;
    double sum = 0;
    for (int t = threadIdx.x % k; t < blockDim.x; t += k) sum += src[t];
    partials[int64_t{blockIdx.x} * 2 * k + threadIdx.x] = sum;
  }
  if (!dev::last_block_arrives(counter)) return false;
  if (threadIdx.x < 2 * k) {
    double sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += __ldcg(partials + int64_t{b} * 2 * k + threadIdx.x);
    red[threadIdx.x] = sum;
  }
  __syncthreads();
  return true;
}

int block_grid(int64_t n, int k) {
  return grid_stride_blocks(n * k, block_threads(k), VectorTuning::blocks_per_sm / 2 + 1);
}

}  // namespace
}  // namespace spcg
