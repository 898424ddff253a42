// dia: diagonal storage (Bell & Garland 2009). Values of diagonal d are one contiguous stripe, x is read at
// i + offset: both fully coalesced, and no column indices at all, so a banded matrix moves 8 bytes per stored
// entry instead of CSR's 12 (the way past the CSR bandwidth floor). A symmetric matrix keeps only the
// diagonals with offset >= 0: the entry of offset -o in row i is the entry of offset +o in row i - o, read
// from the same stripe o rows back (an L1/L2 hit: that part of the stripe was just streamed), which halves the
// value bytes of a stencil (7-pt: 4 stripes instead of 7). Setup refuses matrices whose diagonals are mostly
// padding.
// Work mapping: one thread per row (DiaTuning::rows_per_thread_*), grid-stride over 256-row tiles, so the
// whole GPU sweeps each stripe front to back together (DRAM page locality; giving each block one contiguous range of rows instead was
// measured 9% slower on 7-pt 200^3, H200). Rows whose every diagonal lands inside x skip the bounds test.
// A symmetric 27-point box stencil (find_dia_box) takes the plane march of spmv_dia_box.cu instead, which keeps the
// lower half's second read on chip.
// dia-f32: the same stripes with FP32 values (half the value bytes; x, y and the sums stay FP64), the iteration
// operator of mixed precision (SolverOptions::precision); made from the FP64 stripes by one conversion pass.
#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>

#include "kernels/kernel_module.cuh"
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/setup_kernels.hpp"
#include "kernels/variants/dia_box.cuh"
#include "kernels/variants/dia_common.cuh"

namespace spcg {
namespace {

struct DiaTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;  // all resident at once: one wave (grid_stride_blocks)
  static constexpr int max_diagonals = 256;  // offsets staged in shared memory
  static constexpr double max_fill = 1.5;    // stored slots over nonzeros
  // U, the rows whose loads of one diagonal a thread issues together. Measured on an H100 (apply us, U = 1 / 2 / 4):
  // FP64 poisson3d:200 144 / 171 / 195, 27-point 200^3 526 / 610 / 670 (one row streams best: more rows cost
  // registers and L2 locality); FP32 values 114.5 / 105.1 / 119.0 and 327 / 314 / 358 alone, but inside CG
  // (the fused dot, the vector updates between) U = 2 made the whole solve slower (poisson3d:200 182 -> 191.5 ms,
  // 27-point 200^3 169 -> 181 ms): one row for both.
  static constexpr int rows_per_thread_fp64 = 1;
  static constexpr int rows_per_thread_fp32 = 1;
};

using dia::load_value;
using dia::SmoothingEpilogue;

// Rows [first + u * blockDim.x, u < U) of a tile of U x blockDim.x consecutive rows: each thread's U rows issue
// their loads of one diagonal together (U independent loads in flight), the tiles grid-stride so that the whole
// GPU still sweeps each stripe front to back. Each row sums in the order of the one-row form (lower part by
// descending offset, then the stored diagonals), so y does not depend on U.
// Fixed > 0: the matrix stores that many diagonals (symmetric 5- and 7-point stencils: 3 and 4), so the interior
// loops unroll whole and a row's loads of every diagonal are in flight together (measured on an H100, apply us,
// runtime count / Fixed: poisson3d:200 FP64 144.6 -> 137.3, FP32 113.4 -> 106.0; poisson2d:4096 249.5 -> 234.4,
// 204.1 -> 186.9).
template <bool WithDot, bool Symmetric, class V, int U, bool Smooth = false, int Fixed = 0>
__global__ void __launch_bounds__(DiaTuning::threads)
    dia_kernel(int rows, int cols, int diagonals, const int* __restrict__ offsets, int min_offset, int max_offset,
               const V* __restrict__ val, const double* __restrict__ x, int ld, double alpha, double beta,
               double* __restrict__ y, DotSink sink, SmoothingEpilogue smooth = {}) {
  __shared__ int s_off[DiaTuning::max_diagonals];
  for (int d = threadIdx.x; d < diagonals; d += blockDim.x) s_off[d] = offsets[d];
  __syncthreads();
  // rows in [interior_begin, interior_end) read x only inside [0, cols)
  const int64_t interior_begin = min_offset < 0 ? -min_offset : 0;
  const int64_t interior_end = std::min<int64_t>(rows, int64_t{cols} - (max_offset > 0 ? max_offset : 0));
  const int64_t tile = int64_t{U} * blockDim.x;
  // the stencils' unit step: offsets 0 and 1 stored (FP32: x's neighbours and stripe 1's lower entry by shuffle)
  const bool unit_step = Fixed >= 2 && s_off[0] == 0 && s_off[1] == 1;
  double dot = 0;
  // (a warp's lanes go round together, rows past the end idle: the unit-step path's shuffles need every lane)
  for (int64_t first = int64_t{blockIdx.x} * tile + threadIdx.x; first - (threadIdx.x & 31) < rows;
       first += int64_t{gridDim.x} * tile) {
    double sum[U];
#pragma unroll
    for (int u = 0; u < U; ++u) sum[u] = 0;
    bool summed = false;
    if constexpr (Fixed >= 2 && Symmetric && U == 1 && std::is_same_v<V, float>) {
      // Unit step (FP32 values): x[row - 1], x[row + 1] and stripe 1's entry of row - 1 are the neighbouring lanes'
      // loads, the warp's edge lanes loading their own, so L2 serves 2 of the 7 x reads and 1 of the 3 lower-half
      // reads fewer: with half the value bytes the sweep is bound by L2 (~7 TB/s), not DRAM. Measured on an H100,
      // apply us: poisson3d:200 FP32 106.0 -> 98.4, poisson2d:4096 186.7 -> 171.7; FP64, bound by DRAM at 93 % of
      // copy, lost (137.3 -> 162.1) and keeps the loads. Every lane's row must be interior. The terms add in the
      // order of the loops below, so the bits are theirs.
      const bool interior = first >= interior_begin && first < interior_end;
      if (unit_step && __all_sync(0xffffffffu, interior)) {
        const int lane = threadIdx.x & 31;
        const int64_t row = first;
        const double x0 = dev::load_x(x + row * ld);
        const double v1 = load_value<true>(val + int64_t{1} * rows + row);
        double x_left = __shfl_up_sync(0xffffffffu, x0, 1), x_right = __shfl_down_sync(0xffffffffu, x0, 1);
        double v1_left = __shfl_up_sync(0xffffffffu, v1, 1);
        if (lane == 0) {
          x_left = dev::load_x(x + (row - 1) * ld);
          v1_left = load_value<true>(val + int64_t{1} * rows + row - 1);
        }
        if (lane == 31) x_right = dev::load_x(x + (row + 1) * ld);
        double t = 0;
#pragma unroll
        for (int d = Fixed - 1; d >= 2; --d) {  // lower part: offsets -o_d, then -1
          const int64_t j = row - s_off[d];
          t += load_value<true>(val + int64_t{d} * rows + j) * dev::load_x(x + j * ld);
        }
        t += v1_left * x_left;
        t += load_value<true>(val + row) * x0;  // stored: offsets 0, 1, then o_d
        t += v1 * x_right;
#pragma unroll
        for (int d = 2; d < Fixed; ++d)
          t += load_value<true>(val + int64_t{d} * rows + row) * dev::load_x(x + (row + s_off[d]) * ld);
        sum[0] = t;
        summed = true;
      }
    }
    if (summed) {  // (by the unit-step path)
    } else if (first >= interior_begin && first + int64_t{U - 1} * blockDim.x < interior_end) {
      // lower part, offsets -o_d for d = diagonals-1 .. 1 (ascending column), read from row - o_d of stripe d
      auto lower = [&](int d) {
        const int64_t o = s_off[d];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t j = first + u * int64_t{blockDim.x} - o;
          sum[u] += load_value<true>(val + int64_t{d} * rows + j) * dev::load_x(x + j * ld);
        }
      };
      auto stored = [&](int d) {
        const int64_t o = s_off[d];
#pragma unroll
        for (int u = 0; u < U; ++u) {
          const int64_t row = first + u * int64_t{blockDim.x};
          sum[u] += load_value<Symmetric>(val + int64_t{d} * rows + row) * dev::load_x(x + (row + o) * ld);
        }
      };
      if constexpr (Fixed > 0) {  // (the stored offsets ascend: those > 0 are a suffix, as the loop below reads them)
        if constexpr (Symmetric) {
#pragma unroll
          for (int d = Fixed - 1; d >= 0; --d)
            if (s_off[d] > 0) lower(d);
        }
#pragma unroll
        for (int d = 0; d < Fixed; ++d) stored(d);
      } else {
        if constexpr (Symmetric)
          for (int d = diagonals - 1; d >= 0 && s_off[d] > 0; --d) lower(d);
#pragma unroll 2
        for (int d = 0; d < diagonals; ++d) stored(d);
      }
    } else {  // a tile at the edges: each row by itself, with the bounds tests
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t row = first + u * int64_t{blockDim.x};
        if (row >= rows) break;
        const bool interior = row >= interior_begin && row < interior_end;
        if constexpr (Symmetric) {
          for (int d = diagonals - 1; d >= 0 && s_off[d] > 0; --d) {
            const int64_t j = row - s_off[d];
            if (interior || j >= 0) sum[u] += load_value<true>(val + int64_t{d} * rows + j) * dev::load_x(x + j * ld);
          }
        }
        for (int d = 0; d < diagonals; ++d) {
          const int64_t j = row + s_off[d];
          if (j >= 0 && j < cols) sum[u] += load_value<Symmetric>(val + int64_t{d} * rows + row) * dev::load_x(x + j * ld);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t row = first + u * int64_t{blockDim.x};
      if (row >= rows) break;
      if constexpr (Smooth) {
        smooth(row, x[row], sum[u]);
        continue;
      }
      dev::store_y(y + row * ld, alpha, sum[u], beta);
      if (WithDot) dot += x[row] * (alpha * sum[u]);
    }
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

class Dia final : public SpmvOperator, public FusedDotProduct, public FusedSmoothing {
 public:
  Dia(const MatrixSetup& m, bool fp32) : SpmvOperator(m), fp32_(fp32) {
    dia_ = shared_dia(m, name(), DiaTuning::max_fill, DiaTuning::max_diagonals, true, 1, info_);
    if (fp32_) {  // the FP64 stripes stay shared (the true residual's operator reads them)
      const auto t0 = std::chrono::steady_clock::now();
      values32_ = device_to_float(dia_->values, "dia FP32 stripes");
      info_.convert_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    if (dia_->symmetric) box_ = find_dia_box(dia_->offsets.download(), rows_);
    if (box_)
      info_.reason = "plane march: planes of " + std::to_string(box_->lines) + " lines of " + std::to_string(box_->line) +
                     " rows";
  }
  std::string name() const override { return fp32_ ? "dia-f32" : "dia"; }
  double bytes_per_apply(int k) const override {
    return ((fp32_ ? 4.0 : 8.0) * double(rows_) * dia_->diagonals + 16.0 * rows_) * k;
  }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    if (rows_ != cols_) return apply(1.0, x, 0.0, y, 1, s), false;  // the product alone
    launch<true>(x, 1, 1.0, 0.0, y, s, sink);
    return true;
  }
  bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                      const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const override {
    if (rows_ != cols_ || d_in == d_out || !d_out) return false;
    SmoothingEpilogue e;
    e.res = res, e.res_in = res_in == res ? nullptr : res_in, e.d_out = d_out, e.x = x, e.scale = scale, e.c1 = c1,
    e.c2 = c2, e.rows_apart = rows_apart;
    launch<false, true>(d_in, 1, -1.0, 1.0, res, s, DotSink{}, e);
    return true;
  }
  // res = b - A x: the smoothing epilogue's residual alone (no d_out), b read in res's place
  bool reads_residual_in_place() const override { return true; }
  bool residual_step(const double* b, const double* x, double* res, cudaStream_t s) const override {
    if (rows_ != cols_ || b == res || x == res) return false;  // (x is read at other rows than the one res is written at)
    SmoothingEpilogue e;
    e.res = res, e.res_in = b;
    launch<false, true>(x, 1, -1.0, 1.0, res, s, DotSink{}, e);
    return true;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch<false>(x, ld, alpha, beta, y, s, DotSink{});
  }

 private:
  template <bool WithDot, bool Smooth = false>
  void launch(const double* x, int ld, double alpha, double beta, double* y, cudaStream_t s, const DotSink& sink,
              const SmoothingEpilogue& smooth = {}) const {
    if (box_) {  // a 27-point box stencil: the plane march (spmv_dia_box.cu)
      const DotSink* with_dot = WithDot ? &sink : nullptr;
      const SmoothingEpilogue* with_smoothing = Smooth ? &smooth : nullptr;
      const bool marched =
          fp32_ ? launch_dia_box(*box_, rows_, dia_->stride, values32_.data(), x, ld, alpha, beta, y, with_dot, with_smoothing, s)
                : launch_dia_box(*box_, rows_, dia_->stride, dia_->values.data(), x, ld, alpha, beta, y, with_dot, with_smoothing, s);
      if (marched) return;
    }
    if (fp32_) launch_rows<WithDot, DiaTuning::rows_per_thread_fp32, Smooth>(x, ld, alpha, beta, y, s, sink, smooth);
    else launch_rows<WithDot, DiaTuning::rows_per_thread_fp64, Smooth>(x, ld, alpha, beta, y, s, sink, smooth);
  }
  template <bool WithDot, int U, bool Smooth>
  void launch_rows(const double* x, int ld, double alpha, double beta, double* y, cudaStream_t s, const DotSink& sink,
                   const SmoothingEpilogue& smooth) const {
    int blocks = grid_stride_blocks((rows_ + U - 1) / U, DiaTuning::threads, DiaTuning::blocks_per_sm);
    if (WithDot) blocks = std::min(blocks, sink.capacity);
    auto go = [&](auto symmetric, auto fixed) {
      constexpr bool sym = decltype(symmetric)::value;
      constexpr int f = decltype(fixed)::value;
      if constexpr (U == DiaTuning::rows_per_thread_fp32) {
        if (fp32_)
          return dia_kernel<WithDot, sym, float, U, Smooth, f><<<blocks, DiaTuning::threads, 0, s>>>(
              rows_, cols_, dia_->diagonals, dia_->offsets.data(), dia_->min_offset, dia_->max_offset, values32_.data(),
              x, ld, alpha, beta, y, sink, smooth);
      }
      if constexpr (U == DiaTuning::rows_per_thread_fp64) {
        if (!fp32_)
          return dia_kernel<WithDot, sym, double, U, Smooth, f><<<blocks, DiaTuning::threads, 0, s>>>(
              rows_, cols_, dia_->diagonals, dia_->offsets.data(), dia_->min_offset, dia_->max_offset,
              dia_->values.data(), x, ld, alpha, beta, y, sink, smooth);
      }
    };
    using std::integral_constant;
    if (dia_->symmetric && dia_->diagonals == 3) go(std::true_type{}, integral_constant<int, 3>{});
    else if (dia_->symmetric && dia_->diagonals == 4) go(std::true_type{}, integral_constant<int, 4>{});
    else if (dia_->symmetric) go(std::true_type{}, integral_constant<int, 0>{});
    else go(std::false_type{}, integral_constant<int, 0>{});
    CHECK_LAUNCH("dia");
  }


  bool fp32_;
  std::shared_ptr<const DeviceDia> dia_;
  std::optional<DiaBox> box_;  // the plane march's reading of the offsets, where they are a box stencil's
  DeviceArray<float> values32_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_dia(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<Dia>(m, false);
}
std::unique_ptr<LinearOperator> make_dia_f32(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<Dia>(m, true);
}

}  // namespace spcg

SPCG_KERNEL_MODULE(dia)
