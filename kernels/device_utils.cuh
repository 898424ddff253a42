#pragma once
// Device helpers shared by the kernels: cache-hinted loads, warp/block reductions, the y update and the
// fused-dot epilogue. Header-only device code.
#include <cuda_runtime.h>

#include "kernels/linear_operator.hpp"

namespace spcg {
namespace dev {

// Matrix data is streamed once per apply: evict-first so the gathered vector keeps its place in L2.
template <class T>
__device__ __forceinline__ T load_stream(const T* p) { return __ldcs(p); }
// Gathered vector entries: read-only path, cached.
__device__ __forceinline__ double load_x(const double* p) { return __ldg(p); }

// y = alpha * sum + beta * y; beta == 0 never reads y.
__device__ __forceinline__ void store_y(double* y, double alpha, double sum, double beta) {
  *y = beta == 0.0 ? alpha * sum : fma(beta, *y, alpha * sum);
}

template <int Width = 32>
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int off = Width / 2; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off, Width);
  return v;
}

// Sum over the block; the result is valid in thread 0. blockDim.x must be a multiple of 32, <= 1024.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double warp_partials[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // warp_partials may still be read by a previous call
  if (lane == 0) warp_partials[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  v = 0;
  if (warp == 0) {
    v = lane < warps ? warp_partials[lane] : 0.0;
    v = warp_sum(v);
  }
  return v;
}

// The handshake that ends a fused reduction (the CUDA samples' threadFenceReduction): every thread makes the
// partials it wrote visible device-wide, then thread 0 counts the block in; true (for the whole block) in the
// block that arrives last, which may then read every block's partials. The fence is every writer's own: a
// fence by thread 0 alone orders only thread 0's writes, and the column sums are written by up to 2k threads
// of several warps. The caller resets *counter to zero when it is done.
__device__ __forceinline__ bool last_block_arrives(unsigned* counter) {
  __shared__ bool is_last;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(counter, 1u) == gridDim.x - 1;
  __syncthreads();
  if (!is_last) return false;
  __threadfence();
  return true;
}

// Every thread of every block calls this once with its contribution. Block sums go to partials[blockIdx.x];
// the last block to arrive sums the partials in index order (deterministic) into *result and resets the counter.
// add: *result += the sum (a second part of one dot, after the kernel that wrote the first).
__device__ __forceinline__ void dot_epilogue(const DotSink& sink, double v, bool add = false) {
  v = block_sum(v);
  if (threadIdx.x == 0) sink.partials[blockIdx.x] = v;
  if (!last_block_arrives(sink.counter)) return;
  double s = 0;
  // four independent loads in flight per pass (the combine is on the critical path of every fused kernel)
  for (unsigned b0 = threadIdx.x; b0 < gridDim.x; b0 += 4 * blockDim.x) {
    double v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const unsigned b = b0 + u * blockDim.x;
      v[u] = b < gridDim.x ? __ldcg(sink.partials + b) : 0.0;
    }
    s += (v[0] + v[1]) + (v[2] + v[3]);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) {
    *sink.result = add ? *sink.result + s : s;
    *sink.counter = 0;
  }
}

}  // namespace dev

// Launch helpers (launch_utils.cu).
int device_sm_count();
int64_t device_l2_bytes();
// Dynamic shared memory one block may opt in to: 227 KB on sm_90 and sm_100, 163 KB on sm_80, 99 KB on sm_89.
size_t device_max_shared_per_block();
// Blocks for a grid-stride kernel: enough to fill the device, never more than the work needs.
// Keep threads_per_block * blocks_per_sm <= 2048 (and within the kernel's register budget): blocks beyond what
// is resident at once run as a second wave that sweeps the whole matrix again, and whatever the first wave
// left in L2 (the gathered vector, the X block) is read from DRAM a second time.
int grid_stride_blocks(int64_t work_items, int threads_per_block, int blocks_per_sm = 8);
// How many blocks of `kernel` are resident on the whole device at once (occupancy API, cached per kernel).
int resident_blocks(const void* kernel, int threads_per_block, size_t dynamic_smem = 0);

}  // namespace spcg
