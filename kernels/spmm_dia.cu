// spmm-dia: SpMM on diagonal storage, the format-based SpMM for banded (stencil) matrices.
// Work mapping: a thread owns one row and a pair of adjacent columns (16-byte X loads and Y stores); the
// ceil(K/2) threads of a row are consecutive, so for each diagonal a warp reads whole consecutive rows of the
// row-major X (contiguous, coalesced, no column indices at all) and the diagonal value is one broadcast load.
// Grid stride over steps of rows with only as many blocks as are resident at once, so the GPU sweeps X and the
// stripes together in one wave and the X rows shared by the diagonals (+-nx*ny apart) are still in L2 when the
// last diagonal reaches them; the loads of a batch of diagonals are issued before their multiply-adds.
// Measured (docs/perf-notes.md): one contiguous row range per block was 1.4x slower, register blocking over
// 4 rows 1.8x slower, and shared-memory windows of X rows per cluster of nearby diagonals (cp.async ring,
// spmm-dia-window) no faster at k = 16 and 1.6x slower on 27-point; all dropped. Moves 8 B per stored slot plus
// 16 n K for X and Y.
// DIA: Bell & Garland, SC 2009; row-major panels with coalesced X rows as in GE-SpMM (Huang et al., SC 2020).
#include <algorithm>

#include "kernel_factories.hpp"
#include "spmm_common.cuh"

namespace spcg {
namespace {

struct SpmmDiaTuning {
  static constexpr int threads = 256;
  static constexpr int batch = 4;    // diagonals whose loads are in flight together
  static constexpr int min_blocks_per_sm = 5;  // register cap 48: a batch without spills (ptxas capped at 40 and spilled)
  static constexpr int max_diagonals = 256;
  static constexpr double max_fill = 1.5;    // stored slots over nonzeros, as dia
};

template <bool Vec2>
__global__ void __launch_bounds__(SpmmDiaTuning::threads, SpmmDiaTuning::min_blocks_per_sm)
    spmm_dia_kernel(int rows, int cols, int diagonals, const int* __restrict__ offsets, int min_offset, int max_offset,
                    const double* __restrict__ val, const double* __restrict__ X, int ld, int K, double alpha,
                    double beta, double* __restrict__ Y) {
  __shared__ int s_off[SpmmDiaTuning::max_diagonals];
  for (int d = threadIdx.x; d < diagonals; d += blockDim.x) s_off[d] = offsets[d];
  __syncthreads();
  const int pairs = (K + 1) / 2, rows_per_step = blockDim.x / pairs;
  const int local_row = threadIdx.x / pairs, c0 = 2 * (threadIdx.x % pairs);
  if (local_row >= rows_per_step) return;
  const bool two = c0 + 1 < K;
  const int64_t interior_begin = min_offset < 0 ? -min_offset : 0;
  const int64_t interior_end = int64_t{cols} - (max_offset > 0 ? max_offset : 0);
  const int64_t step = int64_t{rows_per_step} * gridDim.x;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_step + local_row; row < rows; row += step) {
    double a0 = 0, a1 = 0;
    auto add = [&](int d, int64_t j) {
      const double w = dev::load_stream(val + int64_t{d} * rows + row);
      const double* xr = X + j * ld + c0;
      if (Vec2 && two) {
        const double2 xv = __ldg(reinterpret_cast<const double2*>(xr));
        a0 = fma(w, xv.x, a0), a1 = fma(w, xv.y, a1);
      } else {
        a0 = fma(w, __ldg(xr), a0);
        if (two) a1 = fma(w, __ldg(xr + 1), a1);
      }
    };
    if (row >= interior_begin && row < interior_end) {
      int d = 0;
      if (Vec2 && two) {
        // All loads of a batch of diagonals first, then the multiply-adds: the batch's L1/L2 round trips
        // overlap instead of following one another.
        constexpr int U = SpmmDiaTuning::batch;
        for (; d + U <= diagonals; d += U) {
          double w[U];
          double2 xv[U];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            w[u] = dev::load_stream(val + int64_t{d + u} * rows + row);
            xv[u] = __ldg(reinterpret_cast<const double2*>(X + (row + s_off[d + u]) * ld + c0));
          }
#pragma unroll
          for (int u = 0; u < U; ++u) a0 = fma(w[u], xv[u].x, a0), a1 = fma(w[u], xv[u].y, a1);
        }
      }
      for (; d < diagonals; ++d) add(d, row + s_off[d]);
    } else {
      for (int d = 0; d < diagonals; ++d) {
        const int64_t j = row + s_off[d];
        if (j >= 0 && j < cols) add(d, j);
      }
    }
    double* y = Y + row * ld + c0;
    if (Vec2 && two) {
      double2 out = make_double2(alpha * a0, alpha * a1);
      if (beta != 0.0) {
        const double2 old = *reinterpret_cast<const double2*>(y);
        out.x = fma(beta, old.x, out.x), out.y = fma(beta, old.y, out.y);
      }
      *reinterpret_cast<double2*>(y) = out;
    } else {
      dev::store_y(y, alpha, a0, beta);
      if (two) dev::store_y(y + 1, alpha, a1, beta);
    }
  }
}

class SpmmDia final : public SpmmOperator {
 public:
  SpmmDia(const CsrMatrix& a) : SpmmOperator(a) {
    dia_ = build_device_dia(a, SpmmDiaTuning::max_fill, SpmmDiaTuning::max_diagonals, name(), info_);
  }
  std::string name() const override { return "spmm-dia"; }
  double bytes_per_apply(int k) const override { return 8.0 * double(rows_) * dia_.diagonals + 16.0 * rows_ * k; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int pairs = (K + 1) / 2, rows_per_step = SpmmDiaTuning::threads / pairs;
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    auto launch = [&](auto vec) {
      const auto kernel = spmm_dia_kernel<decltype(vec)::value>;
      // One wave of resident blocks: a second wave would sweep the rows again and re-read X from DRAM
      // (ncu, 7-pt 128^3, k = 16: 644 MB read with 16 blocks per SM requested, 386 MB with one wave).
      const int64_t steps = (int64_t{rows_} + rows_per_step - 1) / rows_per_step;
      const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(steps, resident_blocks(reinterpret_cast<const void*>(kernel), SpmmDiaTuning::threads))));
      kernel<<<blocks, SpmmDiaTuning::threads, 0, s>>>(
          rows_, cols_, dia_.diagonals, dia_.offsets.data(), dia_.min_offset, dia_.max_offset, dia_.values.data(), x,
          ld, K, alpha, beta, y);
    };
    if (vec2) launch(std::true_type{});
    else launch(std::false_type{});
    CHECK_LAUNCH("spmm-dia");
  }

 private:
  DeviceDia dia_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_dia(const CsrMatrix& a, const OperatorOptions&) {
  return std::make_unique<SpmmDia>(a);
}

}  // namespace spcg
