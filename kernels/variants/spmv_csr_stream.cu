// csr-stream: the stream half of csr-adaptive (Greathouse & Daga, "Efficient sparse matrix-vector multiplication
// on GPUs using the CSR storage format", SC 2014) for matrices of short rows, with row blocks of a fixed height so
// the device builds nothing (csr-adaptive bins its rows on the host). A block takes `rows_per_block` consecutive
// rows; its threads stride over the block's entries together (coalesced loads of values and columns, `unroll` of
// each thread's loads in flight before their x gathers), put the products val * x[col] into shared memory, then
// one thread a row sums its row's products in order. A block's entries beyond the tile run in further passes of the
// tile, each row summing its part of each pass, so the sum order is the row's own whatever the pass.
// Why: a sub-warp a row (csr-vector) keeps a warp's loads to its few rows, ~8 x 6 entries in flight a round trip
// on AMG's prolongators, whose rows hold ~5.7 entries: 43 % of copy on the 27-point stencil's (docs/perf-notes.md,
// "The 27-point DIA product as a plane march"). Here a block has its ~1500 entries in flight at once.
// Grid-stride over row blocks, so the fused-dot epilogue has a bounded number of block partials.
// csr-stream-f32: the same with FP32 values (8 bytes an entry with its column; x, y and the sums stay FP64).
#include <algorithm>
#include <type_traits>

#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/registry.hpp"
#include "kernels/setup_kernels.hpp"
#include "sparse/formats.hpp"

namespace spcg {
namespace {

struct CsrStreamTuning {
  static constexpr int threads = 256;
  static constexpr int rows_per_block = threads;  // one thread sums a row
  // 16 KB of FP64 products: a block of rows of ~8 entries in one pass, 8 blocks an SM resident (128 KB)
  static constexpr int tile_entries = 2048;
  static constexpr int unroll = 8;        // each thread's loads in flight together (a tile is 8 loads a thread)
  // all resident at once, one wave (grid_stride_blocks): the launch bounds hold a thread to 32 registers (the FP32
  // variant took 40 without them: 6 blocks an SM, the other 2 a second wave)
  static constexpr int blocks_per_sm = 8;
};

__device__ __forceinline__ double load_value(const double* p) { return dev::load_stream(p); }
__device__ __forceinline__ double load_value(const float* p) { return static_cast<double>(__ldcs(p)); }

template <bool WithDot, class V>
__global__ void __launch_bounds__(CsrStreamTuning::threads, CsrStreamTuning::blocks_per_sm)
    csr_stream_kernel(int rows, const int* __restrict__ row_ptr, const int* __restrict__ col,
                      const V* __restrict__ val, const double* __restrict__ x, int ld, double alpha,
                      double beta, double* __restrict__ y, DotSink sink) {
  constexpr int R = CsrStreamTuning::rows_per_block, T = CsrStreamTuning::tile_entries, U = CsrStreamTuning::unroll;
  __shared__ double s_prod[T];
  __shared__ int s_ptr[R + 1];
  double dot = 0;
  for (int64_t first = int64_t{blockIdx.x} * R; first < rows; first += int64_t{gridDim.x} * R) {
    const int n = rows - first < R ? static_cast<int>(rows - first) : R;
    for (int i = threadIdx.x; i <= n; i += blockDim.x) s_ptr[i] = row_ptr[first + i];
    __syncthreads();
    const int nz_begin = s_ptr[0], nz_end = s_ptr[n];
    const bool has_row = threadIdx.x < n;
    const int row_begin = has_row ? s_ptr[threadIdx.x] : 0, row_end = has_row ? s_ptr[threadIdx.x + 1] : 0;
    double sum = 0;
    for (int tile = nz_begin; tile < nz_end; tile += T) {
      const int tile_end = min(tile + T, nz_end);
      for (int p = tile + threadIdx.x; p < tile_end; p += U * blockDim.x) {
        double v[U];
        int c[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int q = p + u * blockDim.x;
          v[u] = q < tile_end ? load_value(val + q) : 0.0;
          c[u] = q < tile_end ? dev::load_stream(col + q) : 0;
        }
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int q = p + u * blockDim.x;
          if (q < tile_end) s_prod[q - tile] = v[u] * dev::load_x(x + static_cast<int64_t>(c[u]) * ld);
        }
      }
      __syncthreads();
      for (int q = max(row_begin, tile); q < min(row_end, tile_end); ++q) sum += s_prod[q - tile];
      __syncthreads();
    }
    if (has_row) {
      const int64_t row = first + threadIdx.x;
      dev::store_y(y + row * ld, alpha, sum, beta);
      if (WithDot) dot += x[row] * (alpha * sum);
    }
    __syncthreads();  // s_ptr is the next block's (a block without entries has no sync in the pass loop)
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

class CsrStream final : public SpmvOperator, public FusedDotProduct {
 public:
  CsrStream(const MatrixSetup& m, bool fp32) : SpmvOperator(m), fp32_(fp32) {
    // A thread sums a whole row: longer rows than its entry's limit are csr-vector's (a sub-warp a row).
    const int max_row = find_kernel(name())->max_row;
    if (m.stats().row_max > max_row)
      throw FormatRefused(name() + " refused: rows of up to " + std::to_string(max_row) +
                          " entries (a thread sums a row); the longest has " + std::to_string(m.stats().row_max));
    info_.format = fp32 ? "csr (FP32 values)" : "csr";
    info_.reason = "blocks of " + std::to_string(CsrStreamTuning::rows_per_block) + " rows, their entries streamed";
    csr_ = shared_csr(m, info_);
    if (fp32_) {  // the FP64 values stay shared (the true residual's operator and the setup read them)
      values32_ = device_to_float(csr_->values, "csr-stream FP32 values");
      info_.device_bytes += static_cast<int64_t>(values32_.bytes());
    }
  }
  std::string name() const override { return fp32_ ? "csr-stream-f32" : "csr-stream"; }
  double bytes_per_apply(int k) const override {
    return (csr_bytes_model(rows_, nnz_, 1) - (fp32_ ? 4.0 * double(nnz_) : 0.0)) * k;
  }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    if (rows_ == 0 || nnz_ == 0 || rows_ != cols_) return apply(1.0, x, 0.0, y, 1, s), false;  // the product alone
    if (launch<true>(1.0, x, 0.0, y, 1, sink, s) > sink.capacity) throw Error("csr-stream: dot sink too small");
    return true;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch<false>(alpha, x, beta, y, ld, DotSink{}, s);
  }

 private:
  template <bool WithDot>
  int launch(double alpha, const double* x, double beta, double* y, int ld, const DotSink& sink, cudaStream_t s) const {
    if (rows_ == 0) return 0;
    int blocks = grid_stride_blocks(rows_, CsrStreamTuning::rows_per_block, CsrStreamTuning::blocks_per_sm);
    if (WithDot) blocks = std::min(blocks, sink.capacity);
    auto go = [&](auto* values) {
      using V = std::remove_const_t<std::remove_pointer_t<decltype(values)>>;
      csr_stream_kernel<WithDot, V><<<blocks, CsrStreamTuning::threads, 0, s>>>(
          rows_, csr_->row_ptr.data(), csr_->col_idx.data(), values, x, ld, alpha, beta, y, sink);
    };
    if (fp32_) go(static_cast<const float*>(values32_.data()));
    else go(static_cast<const double*>(csr_->values.data()));
    CHECK_LAUNCH("csr-stream");
    return blocks;
  }
  bool fp32_;
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<float> values32_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_stream(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrStream>(m, false);
}
std::unique_ptr<LinearOperator> make_csr_stream_f32(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrStream>(m, true);
}

}  // namespace spcg
