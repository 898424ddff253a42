// The halo part of one rank's product on several GPUs (kernels/distributed_operator.hpp):
//   y[row_i] += alpha * sum_q H(i, q) x_halo(col_q, :),  over the rows that hold halo entries only.
// Those are a few planes of a 3D grid's rank (2 x 300^2 of 13.5M rows for poisson3d:300 on 2 ranks): a CSR
// kernel over every local row would stream all row pointers and all of y, ~12 % of such a rank's iteration.
// Work mapping: one thread per (halo row, column j) of the n x k block, a row's few entries in order. With a
// dot sink (k = 1): the rows' x_i * (H x_halo)_i are summed per block and the last block adds the total to
// *sink.result in block order (deterministic), completing the p'q the local product's fused epilogue began.
#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/halo_product.hpp"

namespace spcg {
namespace {

struct HaloTuning {
  static constexpr int threads = 256;
};

__global__ void halo_product_kernel(int32_t halo_rows, int k, const int32_t* __restrict__ rows,
                                    const int32_t* __restrict__ row_ptr, const int32_t* __restrict__ cols,
                                    const double* __restrict__ values, const double* __restrict__ x_halo, double alpha,
                                    double* __restrict__ y, const double* __restrict__ x_local, DotSink sink) {
  const int64_t total = int64_t{halo_rows} * k;
  double dot = 0;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += int64_t{gridDim.x} * blockDim.x) {
    const int32_t i = static_cast<int32_t>(t / k);
    const int j = static_cast<int>(t % k);
    double sum = 0;
    for (int32_t q = row_ptr[i]; q < row_ptr[i + 1]; ++q) sum += values[q] * x_halo[int64_t{cols[q]} * k + j];
    const int64_t at = int64_t{rows[i]} * k + j;
    const double contribution = alpha * sum;
    y[at] += contribution;
    if (x_local) dot += x_local[at] * contribution;
  }
  if (x_local) dev::dot_epilogue(sink, dot, /*add=*/true);
}

__global__ void mark_rows_kernel(int32_t rows, const int32_t* __restrict__ row_ids, uint8_t* __restrict__ mask) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x)
    mask[row_ids[i]] = 1;
}

}  // namespace

void launch_mark_rows(const HaloRows& h, uint8_t* mask, cudaStream_t s) {
  if (h.rows == 0) return;
  mark_rows_kernel<<<grid_stride_blocks(h.rows, HaloTuning::threads), HaloTuning::threads, 0, s>>>(h.rows, h.row_ids, mask);
  CHECK_LAUNCH("mark-rows");
}

void launch_halo_product(const HaloRows& h, int k, const double* x_halo, double alpha, double* y, const double* x_local,
                         const DotSink* sink, cudaStream_t s) {
  if (h.rows == 0 || k == 0) return;  // nothing to add (the dot's first part stands)
  const int blocks = sink ? std::min(sink->capacity, grid_stride_blocks(int64_t{h.rows} * k, HaloTuning::threads))
                          : grid_stride_blocks(int64_t{h.rows} * k, HaloTuning::threads);
  halo_product_kernel<<<blocks, HaloTuning::threads, 0, s>>>(h.rows, k, h.row_ids, h.row_ptr, h.cols, h.values, x_halo,
                                                              alpha, y, sink ? x_local : nullptr, sink ? *sink : DotSink{});
  CHECK_LAUNCH("halo-product");
}

}  // namespace spcg
