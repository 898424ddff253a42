// The solvers' vector kernels that are not one algorithm's: fill, scale, the deterministic dot and column dots,
// the row scaling, and the two moves of several GPUs (the sum over ranks in rank order, the gather of a send
// buffer). Work mapping and reductions: reductions.cuh. Bytes per call are in the solver's report.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_module.cuh"
#include "kernels/solver_ops/vector_ops.hpp"
#include "kernels/solver_ops/reductions.cuh"

namespace spcg {
namespace {

__global__ void scale_kernel(double beta, double* __restrict__ y, size_t count) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x)
    y[i] = beta == 0.0 ? 0.0 : beta * y[i];
}

__global__ void dot_kernel(const double* __restrict__ a, const double* __restrict__ b, int64_t n, DotSink sink) {
  constexpr int U = VectorTuning::unroll;
  double v = 0, av[U], bv[U];
  unrolled_grid_loop<U>(n, [&](int64_t i, int u) { av[u] = a[i], bv[u] = b[i]; },
                        [&](int64_t, int u) { v += av[u] * bv[u]; });
  dev::dot_epilogue(sink, v);
}

// out[i] = sum over r of inputs[r][i], in rank order (the in-process communicator's allreduce).
__global__ void sum_over_ranks_kernel(const double* const* __restrict__ inputs, int ranks, size_t count,
                                      double* __restrict__ out) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    double s = inputs[0][i];
    for (int r = 1; r < ranks; ++r) s += inputs[r][i];
    out[i] = s;
  }
}

// out[i] = sum over r of gathered[r * count + i], in rank order (NCCL's all-gather, then this).
__global__ void sum_gathered_kernel(const double* __restrict__ gathered, int ranks, size_t count, double* __restrict__ out) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x) {
    double s = gathered[i];
    for (int r = 1; r < ranks; ++r) s += gathered[r * count + i];
    out[i] = s;
  }
}

// out[i] = x[rows[i]] (the distributed operator's send buffer).
__global__ void gather_kernel(const int32_t* __restrict__ rows, int64_t count, int k, const double* __restrict__ x,
                              double* __restrict__ out) {
  const int64_t total = count * k;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x)
    out[t] = x[int64_t{rows[t / k]} * k + t % k];
}

__global__ void column_dots_kernel(int64_t n, int k, const double* __restrict__ a, const double* __restrict__ b,
                                   double* partials, unsigned* counter, double* out) {
  extern __shared__ double smem[];
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  double v = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) v += a[t] * b[t];
  smem[threadIdx.x] = v;
  column_epilogue<VectorTuning::max_width>(partials, counter, k, smem, out);
}

__global__ void row_scale_kernel(int64_t n, int k, const double* __restrict__ dinv, const double* __restrict__ x,
                                 double* __restrict__ y) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) y[t] = dinv[t / k] * x[t];
}

__global__ void fill_kernel(double value, double* __restrict__ y, size_t count) {
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += size_t{gridDim.x} * blockDim.x)
    y[i] = value;
}

// SplitMix64 is a counter: its (e+1)-th output is mix(seed + (e+1) * golden), so every entry is made on its own.
__global__ void fill_splitmix_kernel(uint64_t seed, uint64_t first, double* __restrict__ y, size_t count) {
  for (size_t e = size_t{blockIdx.x} * blockDim.x + threadIdx.x; e < count; e += size_t{gridDim.x} * blockDim.x) {
    uint64_t z = seed + (first + uint64_t{e} + 1) * 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * (1.0 / 9007199254740992.0);
    y[e] = __dsub_rn(__dmul_rn(2.0, u), 1.0);  // the host's 2u - 1, unfused
  }
}

}  // namespace

void launch_fill(double value, double* y, size_t count, cudaStream_t s) {
  if (count == 0) return;
  fill_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads, 0, s>>>(
      value, y, count);
  CHECK_LAUNCH("fill");
}

void launch_fill_splitmix_uniform(uint64_t seed, double* y, size_t count, cudaStream_t s, uint64_t first) {
  if (count == 0) return;
  fill_splitmix_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads,
                         0, s>>>(seed, first, y, count);
  CHECK_LAUNCH("fill random");
}

void launch_scale(double beta, double* y, size_t count, cudaStream_t s) {
  if (count == 0) return;
  if (beta == 1.0) return;
  scale_kernel<<<grid_stride_blocks(static_cast<int64_t>(count), VectorTuning::threads), VectorTuning::threads, 0, s>>>(
      beta, y, count);
  CHECK_LAUNCH("scale");
}

int reduction_blocks(int64_t n) { return grid_stride_blocks(n, VectorTuning::threads, VectorTuning::blocks_per_sm); }

ReductionWorkspace::ReductionWorkspace(int capacity_blocks, int values_per_block)
    : partials(static_cast<size_t>(capacity_blocks) * values_per_block, "reduction partials"),
      counter(1, "reduction counter"),
      capacity(capacity_blocks),
      width(values_per_block) {
  counter.zero();  // complete before any stream's kernel reads it (DeviceArray::zero)
}

DotSink ReductionWorkspace::sink(double* result) const {
  return DotSink{const_cast<double*>(partials.data()), const_cast<unsigned*>(counter.data()), result, capacity};
}

void launch_dot(const double* a, const double* b, int64_t n, const ReductionWorkspace& ws, double* result, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  dot_kernel<<<blocks, VectorTuning::threads, 0, s>>>(a, b, n, ws.sink(result));
  CHECK_LAUNCH("dot");
}

void launch_column_dots(int64_t n, int k, const double* a, const double* b, const ReductionWorkspace& ws, double* out,
                        cudaStream_t s) {
  const int threads = block_threads(k), blocks = std::min(ws.capacity, block_grid(n, k));
  column_dots_kernel<<<blocks, threads, threads * sizeof(double), s>>>(
      n, k, a, b, const_cast<double*>(ws.partials.data()), const_cast<unsigned*>(ws.counter.data()), out);
  CHECK_LAUNCH("column-dots");
}

void launch_row_scale(int64_t n, int k, const double* dinv, const double* x, double* y, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  row_scale_kernel<<<block_grid(n, k), block_threads(k), 0, s>>>(n, k, dinv, x, y);
  CHECK_LAUNCH("row-scale");
}

void launch_sum_over_ranks(const double* const* inputs, int ranks, size_t count, double* out, cudaStream_t s) {
  if (count == 0 || ranks == 0) return;
  sum_over_ranks_kernel<<<reduction_blocks(static_cast<int64_t>(count)), VectorTuning::threads, 0, s>>>(inputs, ranks,
                                                                                                       count, out);
  CHECK_LAUNCH("sum-over-ranks");
}

void launch_sum_gathered(const double* gathered, int ranks, size_t count, double* out, cudaStream_t s) {
  if (count == 0 || ranks == 0) return;
  sum_gathered_kernel<<<reduction_blocks(static_cast<int64_t>(count)), VectorTuning::threads, 0, s>>>(gathered, ranks,
                                                                                                     count, out);
  CHECK_LAUNCH("sum-gathered");
}

void launch_gather(const int32_t* rows, int64_t count, const double* x, double* out, cudaStream_t s, int k) {
  if (count == 0 || k == 0) return;
  gather_kernel<<<reduction_blocks(count * k), VectorTuning::threads, 0, s>>>(rows, count, k, x, out);
  CHECK_LAUNCH("gather");
}

}  // namespace spcg

SPCG_KERNEL_MODULE(vector_ops)
