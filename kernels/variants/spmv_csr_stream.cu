// csr-stream: the stream half of csr-adaptive (Greathouse & Daga, "Efficient sparse matrix-vector multiplication
// on GPUs using the CSR storage format", SC 2014; the sub-group reduction of Daga & Greathouse, HiPC 2015) with row
// blocks of a fixed height, so the device builds nothing (csr-adaptive bins its rows on the host). A block takes
// R consecutive rows; its threads stride over the block's entries together (coalesced loads of values and
// columns, `unroll` of each thread's loads in flight before their x gathers), put the products val * x[col] into
// shared memory, then a group of G lanes sums each row (G = 1: a thread sums RPT rows, one after the other; G > 1:
// the lanes stride the row, then a shuffle tree). G and RPT come from the mean row at setup, so that a block
// streams about a tile of entries (G ~ mean / 8, RPT ~ 8 / mean): R = threads * RPT / G. A block's entries beyond
// the tile run in further passes, each row summing its part of each pass, so a row's order does not depend on
// where the passes cut it.
// Why: a sub-warp a row (csr-vector) keeps a warp's loads to its few rows, ~8 x 6 entries in flight a round trip
// on AMG's prolongators, whose rows hold ~3-6 entries: 43 % of copy on the 27-point stencil's (docs/perf-notes.md,
// "The 27-point DIA product as a plane march"). Here a block has its ~2000 entries in flight at once. Measured
// (H100, FP32 values, ncu): the 27-point prolongator 762 -> 371 us, its restriction 377 -> 285 us (32 lanes a row).
// Grid-stride over row blocks, so the fused-dot epilogue has a bounded number of block partials.
// csr-stream-f32: the same with FP32 values (8 bytes an entry with its column; x, y and the sums stay FP64).
#include <algorithm>
#include <type_traits>

#include "kernels/kernel_module.cuh"
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/registry.hpp"
#include "kernels/setup_kernels.hpp"
#include "kernels/variants/csr_kernel_operator.hpp"
#include "sparse/formats.hpp"

namespace spcg {
namespace {

struct CsrStreamTuning {
  static constexpr int threads = 256;
  // 16 KB of FP64 products: ~2000 entries a block in one pass, 8 blocks an SM resident (128 KB)
  static constexpr int tile_entries = 2048;
  static constexpr int unroll = 8;  // each thread's loads in flight together (a tile is 8 loads a thread)
  // all resident at once, one wave (grid_stride_blocks): the launch bounds hold a thread to 32 registers (the FP32
  // variant took 40 without them: 6 blocks an SM, the other 2 a second wave)
  static constexpr int blocks_per_sm = 8;
  static constexpr double entries_per_lane = 8;  // what G and RPT aim a row's lane at
  static constexpr int max_rows_per_thread = 4;
};

__device__ __forceinline__ double load_value(const double* p) { return dev::load_stream(p); }
__device__ __forceinline__ double load_value(const float* p) { return static_cast<double>(__ldcs(p)); }

// G lanes a row (a power of two <= 32), RPT rows a thread (G = 1 only): R = threads * RPT / G rows a block.
template <int G, int RPT, bool WithDot, class V>
__global__ void __launch_bounds__(CsrStreamTuning::threads, CsrStreamTuning::blocks_per_sm)
    csr_stream_kernel(int rows, const int* __restrict__ row_ptr, const int* __restrict__ col,
                      const V* __restrict__ val, const double* __restrict__ x, int ld, double alpha,
                      double beta, double* __restrict__ y, DotSink sink) {
  static_assert(G == 1 || RPT == 1, "a thread sums several rows only where a row has one lane");
  constexpr int T = CsrStreamTuning::tile_entries, U = CsrStreamTuning::unroll;
  constexpr int R = CsrStreamTuning::threads * RPT / G;
  __shared__ double s_prod[T];
  __shared__ int s_ptr[R + 1];
  const int lane = threadIdx.x & (G - 1);
  double dot = 0;
  for (int64_t first = int64_t{blockIdx.x} * R; first < rows; first += int64_t{gridDim.x} * R) {
    const int n = rows - first < R ? static_cast<int>(rows - first) : R;
    for (int i = threadIdx.x; i <= n; i += blockDim.x) s_ptr[i] = row_ptr[first + i];
    __syncthreads();
    const int nz_begin = s_ptr[0], nz_end = s_ptr[n];
    // block row i of this thread's r-th row: thread i (G = 1), or lanes i*G.. of a group; its entries [begin, end)
    double sum[RPT];
    int begin[RPT], end[RPT];
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int i = G == 1 ? threadIdx.x + r * CsrStreamTuning::threads : threadIdx.x / G;
      sum[r] = 0;
      begin[r] = i < n ? s_ptr[i] : 0, end[r] = i < n ? s_ptr[i + 1] : 0;
    }
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
#pragma unroll
      for (int r = 0; r < RPT; ++r)
        for (int q = max(begin[r], tile) + lane; q < min(end[r], tile_end); q += G) sum[r] += s_prod[q - tile];
      __syncthreads();
    }
#pragma unroll
    for (int r = 0; r < RPT; ++r) {
      const int i = G == 1 ? threadIdx.x + r * CsrStreamTuning::threads : threadIdx.x / G;
      if (G > 1) sum[r] = dev::warp_sum<G>(sum[r]);  // (every lane of the warp: i < n or not)
      if (i < n && lane == 0) {
        const int64_t row = first + i;
        dev::store_y(y + row * ld, alpha, sum[r], beta);
        if (WithDot) dot += x[row] * (alpha * sum[r]);
      }
    }
    __syncthreads();  // s_ptr is the next block's (a block without entries has no sync in the pass loop)
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

// The row groups a matrix's mean row asks for (host).
struct StreamShape {
  int lanes = 1, rows_per_thread = 1;
};
StreamShape stream_shape(double mean) {
  StreamShape sh;
  while (sh.lanes < 32 && sh.lanes * CsrStreamTuning::entries_per_lane < mean) sh.lanes *= 2;
  if (sh.lanes == 1)
    while (sh.rows_per_thread < CsrStreamTuning::max_rows_per_thread &&
           2 * sh.rows_per_thread * std::max(mean, 1.0) <= CsrStreamTuning::entries_per_lane)
      sh.rows_per_thread *= 2;
  return sh;
}

class CsrStream final : public CsrKernelOperator {
 public:
  CsrStream(const MatrixSetup& m, bool fp32) : CsrKernelOperator(m, fp32, "csr-stream") {
    // A row is summed by its lanes alone: past its entry's limit, rows are csr-adaptive's (pieces over blocks).
    const int max_row = find_kernel(name())->max_row;
    if (m.stats().row_max > max_row)
      throw FormatRefused(name() + " refused: rows of up to " + std::to_string(max_row) +
                          " entries (a row's lanes sum it); the longest has " + std::to_string(m.stats().row_max));
    shape_ = stream_shape(m.rows() ? double(m.nnz()) / m.rows() : 1.0);
    info_.reason = "blocks of " + std::to_string(rows_per_block()) + " rows streamed, " +
                   (shape_.lanes > 1 ? std::to_string(shape_.lanes) + " lanes a row"
                                     : std::to_string(shape_.rows_per_thread) + " row(s) a thread");
  }

 protected:
  int launch(bool with_dot, double alpha, const double* x, double beta, double* y, int ld, const DotSink& sink,
             cudaStream_t s) const override {
    if (rows_ == 0) return 0;
    int blocks = static_cast<int>(std::min<int64_t>((int64_t{rows_} + rows_per_block() - 1) / rows_per_block(),
                                                    int64_t{device_sm_count()} * CsrStreamTuning::blocks_per_sm));
    if (with_dot) blocks = std::min(blocks, sink.capacity);
    auto go = [&](auto* values, auto dot) {
      using V = std::remove_const_t<std::remove_pointer_t<decltype(values)>>;
      constexpr bool WithDot = decltype(dot)::value;
      auto args = [&](auto kernel) {
        kernel<<<blocks, CsrStreamTuning::threads, 0, s>>>(rows_, csr_->row_ptr.data(), csr_->col_idx.data(), values,
                                                            x, ld, alpha, beta, y, sink);
      };
      switch (shape_.lanes * 8 + shape_.rows_per_thread) {  // (lanes > 1: one row a thread group)
        case 8 + 2: args(csr_stream_kernel<1, 2, WithDot, V>); break;
        case 8 + 4: args(csr_stream_kernel<1, 4, WithDot, V>); break;
        case 16 + 1: args(csr_stream_kernel<2, 1, WithDot, V>); break;
        case 32 + 1: args(csr_stream_kernel<4, 1, WithDot, V>); break;
        case 64 + 1: args(csr_stream_kernel<8, 1, WithDot, V>); break;
        case 128 + 1: args(csr_stream_kernel<16, 1, WithDot, V>); break;
        case 256 + 1: args(csr_stream_kernel<32, 1, WithDot, V>); break;
        default: args(csr_stream_kernel<1, 1, WithDot, V>); break;
      }
    };
    with_values(with_dot, go);
    CHECK_LAUNCH("csr-stream");
    return blocks;
  }

 private:
  int rows_per_block() const { return CsrStreamTuning::threads * shape_.rows_per_thread / shape_.lanes; }
  StreamShape shape_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_stream(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrStream>(m, false);
}
std::unique_ptr<LinearOperator> make_csr_stream_f32(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrStream>(m, true);
}

}  // namespace spcg

SPCG_KERNEL_MODULE(csr_stream)
