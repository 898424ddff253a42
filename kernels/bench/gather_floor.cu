// Gather floor: a benchmark probe, not an operator. Streams the CSR values and column indices once,
// coalesced, and sums val[k] * x[col[k]] with no row structure at all (each thread a grid-stride share of the
// nonzeros, one partial per thread). Any CSR SpMV kernel reads the same arrays and makes the same gathers, so
// its time bounds every such kernel from below: when a matrix's columns are scattered (power-law graphs),
// this is the L2 sector traffic of the x gathers, which no row scheduling removes.
#include "kernels/bench/bench_probes.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace spcg {
namespace {

struct GatherFloorTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;
};

__global__ void __launch_bounds__(GatherFloorTuning::threads)
    gather_floor_kernel(int64_t nnz, const double* __restrict__ val, const int32_t* __restrict__ col,
                        const double* __restrict__ x, double* __restrict__ partials) {
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, nthreads = int64_t{gridDim.x} * blockDim.x;
  double sum = 0;
  for (int64_t k = tid; k < nnz; k += nthreads) sum += dev::load_stream(val + k) * dev::load_x(x + dev::load_stream(col + k));
  partials[tid] = sum;  // written so the loads are not dead code
}

}  // namespace

int64_t gather_floor_partials(int64_t nnz) {
  return int64_t{grid_stride_blocks(nnz, GatherFloorTuning::threads, GatherFloorTuning::blocks_per_sm)} *
         GatherFloorTuning::threads;
}

void launch_gather_floor(int64_t nnz, const double* val, const int32_t* col, const double* x, double* partials,
                         cudaStream_t stream) {
  if (nnz == 0) return;
  const int blocks = grid_stride_blocks(nnz, GatherFloorTuning::threads, GatherFloorTuning::blocks_per_sm);
  gather_floor_kernel<<<blocks, GatherFloorTuning::threads, 0, stream>>>(nnz, val, col, x, partials);
  CHECK_CUDA(cudaGetLastError());
}

}  // namespace spcg
