// csr-vector: a sub-warp of W lanes per row; lanes stride the row together (coalesced) and reduce with
// shuffles. W = largest power of two <= mean nnz/row, capped at 32 (the heuristic of AMD's "SpMV on GPUs"
// lab note, after Bell & Garland 2009's one-warp-per-row CSR-vector). Grid-stride over row groups so the
// fused-dot epilogue has a bounded number of block partials.
// csr-vector-f32: the same with FP32 values (8 bytes an entry with its column instead of 12; x, y and the sums stay
// FP64): the FP32 variant AMG's coarse levels take (their CSR is most of a 7-point V-cycle's bytes after level 0's
// DIA) and mixed precision's iteration operator on CSR; made from the FP64 values by one conversion pass.
#include <algorithm>
#include <type_traits>

#include "kernels/kernel_module.cuh"
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/setup_kernels.hpp"
#include "kernels/variants/csr_kernel_operator.hpp"

namespace spcg {
namespace {

struct CsrVectorTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;  // all resident at once: one wave (grid_stride_blocks)
};

__device__ __forceinline__ double load_value(const double* p) { return dev::load_stream(p); }
__device__ __forceinline__ double load_value(const float* p) { return static_cast<double>(__ldcs(p)); }

template <int W, bool WithDot, class V>
__global__ void __launch_bounds__(CsrVectorTuning::threads)
    csr_vector_kernel(int rows, const int* __restrict__ row_ptr, const int* __restrict__ col,
                      const V* __restrict__ val, const double* __restrict__ x, int ld, double alpha,
                      double beta, double* __restrict__ y, DotSink sink) {
  const int lane = threadIdx.x & (W - 1);
  const int64_t group = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / W;
  const int64_t groups = int64_t{gridDim.x} * blockDim.x / W;
  // The loop bound is uniform across the warp (shuffles need every lane), so a lane past the last row idles.
  const int64_t first_of_warp = group - (threadIdx.x & 31) / W;
  double dot = 0;
  for (int64_t g0 = first_of_warp; g0 < rows; g0 += groups) {
    const int64_t row = g0 + (threadIdx.x & 31) / W;
    const bool active = row < rows;
    const int begin = active ? row_ptr[row] : 0, end = active ? row_ptr[row + 1] : 0;
    double sum = 0;
    for (int p = begin + lane; p < end; p += W)
      sum += load_value(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
    sum = dev::warp_sum<W>(sum);
    if (active && lane == 0) {
      dev::store_y(y + row * ld, alpha, sum, beta);
      if (WithDot) dot += x[row] * (alpha * sum);
    }
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

int vector_width(double mean) {
  int w = 1;
  while (w * 2 <= mean && w < 32) w *= 2;
  return w;
}

class CsrVector final : public CsrKernelOperator {
 public:
  CsrVector(const MatrixSetup& m, bool fp32)
      : CsrKernelOperator(m, fp32, "csr-vector"), width_(vector_width(m.rows() ? double(m.nnz()) / m.rows() : 1)) {
    info_.reason = "sub-warp width " + std::to_string(width_);
  }

 protected:
  int launch(bool with_dot, double alpha, const double* x, double beta, double* y, int ld, const DotSink& sink,
             cudaStream_t s) const override {
    int blocks = grid_stride_blocks(int64_t{rows_} * width_, CsrVectorTuning::threads, CsrVectorTuning::blocks_per_sm);
    if (with_dot) blocks = std::min(blocks, sink.capacity);
    auto go = [&](auto* values, auto dot) {
      using V = std::remove_const_t<std::remove_pointer_t<decltype(values)>>;
      constexpr bool WithDot = decltype(dot)::value;
      auto args = [&](auto kernel) {
        kernel<<<blocks, CsrVectorTuning::threads, 0, s>>>(rows_, csr_->row_ptr.data(), csr_->col_idx.data(), values, x,
                                                           ld, alpha, beta, y, sink);
      };
      switch (width_) {
        case 1: args(csr_vector_kernel<1, WithDot, V>); break;
        case 2: args(csr_vector_kernel<2, WithDot, V>); break;
        case 4: args(csr_vector_kernel<4, WithDot, V>); break;
        case 8: args(csr_vector_kernel<8, WithDot, V>); break;
        case 16: args(csr_vector_kernel<16, WithDot, V>); break;
        default: args(csr_vector_kernel<32, WithDot, V>); break;
      }
    };
    with_values(with_dot, go);
    CHECK_LAUNCH("csr-vector");
    return blocks;
  }

 private:
  int width_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_vector(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrVector>(m, false);
}
std::unique_ptr<LinearOperator> make_csr_vector_f32(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrVector>(m, true);
}

}  // namespace spcg

SPCG_KERNEL_MODULE(csr_vector)
