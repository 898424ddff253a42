// sell / sell-sorted: SELL-C-sigma (Kreutzer, Hager, Wellein, Fehske, Bishop, "A unified sparse matrix data
// format for efficient general sparse matrix-vector multiplication on modern processors with wide SIMD
// units", SIAM J. Sci. Comput. 2014), C = 32 = one warp per slice, lane = row of the slice. Each step of the
// inner loop is one 256-byte coalesced load of values and one 128-byte load of columns; the loop is unrolled
// so several of those are in flight (FP32 values: in batches, every slot's column loaded before its x gather). `sell` keeps the row order (sigma = 1); `sell-sorted` sorts rows by
// length inside windows of sigma = 1024 rows so a slice's rows have similar lengths (less padding).
// sell-f32: sell with FP32 values (8 bytes a stored slot with its column instead of 12; x, y and the sums stay
// FP64): mixed precision's iteration operator where auto takes SELL (irregular rows), made from the FP64 layout
// by one conversion pass, whose FP64 values it then lets go (the true residual reads the FP64 kernel's own).
#include <algorithm>
#include <type_traits>

#include "kernels/kernel_module.cuh"
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/setup_kernels.hpp"

namespace spcg {
namespace {

struct SellTuning {
  static constexpr int slice_height = 32;  // one warp
  static constexpr int threads = 256;      // 8 slices per block
  static constexpr int blocks_per_sm = 8;  // all resident at once: one wave (grid_stride_blocks)
  static constexpr int sorted_sigma = 1024;
  static constexpr double max_fill = 3.0;
  // FP32 values: a warp's slots loaded in batches of this many before their x gathers (0: the unrolled loop).
  // Measured on an H100, sell-f32 us, loop / 8 / 16: poisson3d27:86 61.4-62.0 / 57.6-58.0 / 55.5-55.8,
  // poisson3d:128 63.2-64.0 / 60.1-60.5 / 62.0, poisson2d:2048 95.4-96.2 / 94.2-95.7 / 94.8-96.2; the FP32
  // V-cycles 1-2 % faster. FP64 lost with batches (poisson3d:128 77.5 -> 83.4-83.8 us): its loop stays.
  static constexpr int fp32_batch = 8;
};

__device__ __forceinline__ double load_value(const double* p) { return dev::load_stream(p); }
__device__ __forceinline__ double load_value(const float* p) { return static_cast<double>(__ldcs(p)); }

template <bool Permuted, bool WithDot, class V>
__global__ void __launch_bounds__(SellTuning::threads)
    sell_kernel(int rows, int slices, const int64_t* __restrict__ slice_ptr, const int* __restrict__ slice_width,
                const int* __restrict__ perm, const int* __restrict__ col, const V* __restrict__ val,
                const double* __restrict__ x, int ld, double alpha, double beta, double* __restrict__ y, DotSink sink) {
  constexpr int C = SellTuning::slice_height;
  const int lane = threadIdx.x & (C - 1);
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / C;
  double dot = 0;
  for (int64_t slice = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / C; slice < slices; slice += warps) {
    const int64_t pos = slice * C + lane;
    const int64_t base = slice_ptr[slice] + lane;
    const int width = slice_width[slice];
    double sum = 0;
    int k = 0;
    constexpr int Batch = std::is_same_v<V, float> ? SellTuning::fp32_batch : 0;
    if constexpr (Batch > 0) {  // the columns and values of Batch slots, then their gathers, then the sums in order
      for (; k + Batch <= width; k += Batch) {
        int c[Batch];
        double v[Batch], xv[Batch];
#pragma unroll
        for (int u = 0; u < Batch; ++u) {
          const int64_t at = base + int64_t{k + u} * C;
          c[u] = dev::load_stream(col + at);
          v[u] = load_value(val + at);
        }
#pragma unroll
        for (int u = 0; u < Batch; ++u) xv[u] = dev::load_x(x + static_cast<int64_t>(c[u]) * ld);
#pragma unroll
        for (int u = 0; u < Batch; ++u) sum += v[u] * xv[u];
      }
    }
#pragma unroll 8
    for (; k < width; ++k) {
      const int64_t at = base + int64_t{k} * C;
      sum += load_value(val + at) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + at)) * ld);
    }
    if (pos < rows) {
      const int64_t row = Permuted ? perm[pos] : pos;
      dev::store_y(y + row * ld, alpha, sum, beta);
      if (WithDot) dot += x[row] * (alpha * sum);
    }
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

class Sell final : public SpmvOperator, public FusedDotProduct {
 public:
  Sell(const MatrixSetup& m, int sigma, std::string name, bool fp32 = false)
      : SpmvOperator(m), name_(std::move(name)), fp32_(fp32) {
    const auto t0 = std::chrono::steady_clock::now();
    info_.format = "sell-32-" + std::to_string(sigma);
    if (sigma == 1) {  // rows in order: built on the device from the shared CSR
      sell_ = device_sell32(*m.device_csr(), SellTuning::max_fill);
      if (fp32_) {  // the FP32 copy alone stays
        values32_ = device_to_float(sell_.values, "sell FP32 values");
        sell_.values = DeviceArray<double>();
        info_.format += " (FP32 values)";
      }
      info_.convert_ms = ms_since(t0);
      info_.device_bytes = static_cast<int64_t>(sell_.slice_ptr.bytes() + sell_.slice_width.bytes() +
                                                sell_.col_idx.bytes() + sell_.values.bytes() + values32_.bytes());
    } else {  // rows sorted in windows: the host layout
      SellMatrix s = csr_to_sell(m.host(), SellTuning::slice_height, sigma, SellTuning::max_fill);
      info_.convert_ms = ms_since(t0);
      permuted_ = !s.perm.empty();
      sell_ = upload_sell(s, info_);
    }
  }
  std::string name() const override { return name_; }
  double bytes_per_apply(int k) const override {
    return ((fp32_ ? 8.0 : 12.0) * double(sell_.stored) + 16.0 * rows_ + (permuted_ ? 4.0 * rows_ : 0) + 12.0 * sell_.slices) * k;
  }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    if (rows_ != cols_) return apply(1.0, x, 0.0, y, 1, s), false;  // the product alone
    launch<true>(1.0, x, 0.0, y, 1, sink, s);
    return true;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch<false>(alpha, x, beta, y, ld, DotSink{}, s);
  }

 private:
  template <bool WithDot>
  void launch(double alpha, const double* x, double beta, double* y, int ld, const DotSink& sink, cudaStream_t s) const {
    int blocks = grid_stride_blocks(int64_t{sell_.slices} * SellTuning::slice_height, SellTuning::threads,
                                    SellTuning::blocks_per_sm);
    if (WithDot) blocks = std::min(blocks, sink.capacity);
    auto go = [&](const auto* values) {
      using V = std::remove_const_t<std::remove_pointer_t<decltype(values)>>;
      auto kernel = permuted_ ? sell_kernel<true, WithDot, V> : sell_kernel<false, WithDot, V>;
      kernel<<<blocks, SellTuning::threads, 0, s>>>(rows_, sell_.slices, sell_.slice_ptr.data(), sell_.slice_width.data(),
                                                    sell_.perm.data(), sell_.col_idx.data(), values, x, ld, alpha, beta,
                                                    y, sink);
    };
    if (fp32_) go(static_cast<const float*>(values32_.data()));
    else go(static_cast<const double*>(sell_.values.data()));
    CHECK_LAUNCH("sell");
  }
  std::string name_;
  bool fp32_ = false;
  bool permuted_ = false;
  DeviceSell sell_;
  DeviceArray<float> values32_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_sell(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<Sell>(m, 1, "sell");
}
std::unique_ptr<LinearOperator> make_sell_f32(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<Sell>(m, 1, "sell-f32", true);
}
std::unique_ptr<LinearOperator> make_sell_sorted(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<Sell>(m, SellTuning::sorted_sigma, "sell-sorted");
}

}  // namespace spcg

SPCG_KERNEL_MODULE(sell)
