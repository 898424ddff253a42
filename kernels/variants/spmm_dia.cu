// spmm-dia: SpMM on diagonal storage, the format-based SpMM for banded (stencil) matrices.
// Work mapping: a thread owns one row and 2 adjacent columns, or 4 when K % 4 == 0 and K >= 8 (16-byte X
// loads and Y stores; from K = 32 on, two interleaved pairs, so each load instruction of a row's threads reads
// one whole line); the threads of a row are consecutive, so for each diagonal a warp reads whole
// consecutive rows of the row-major X (contiguous, coalesced, no column indices at all) and the diagonal value
// is one broadcast load.
// Grid stride over steps of rows with only as many blocks as are resident at once, so the GPU sweeps X and the
// stripes together in one wave and the X rows shared by the diagonals (+-nx*ny apart) are still in L2 when the
// last diagonal reaches them; the loads of a batch of diagonals are issued before their multiply-adds, and the
// last diagonals form one predicated batch (7-pt: 4 + 3).
// Measured (docs/perf-notes.md): one contiguous row range per block was 1.4x slower, a first register blocking over
// 4 rows 1.8x slower (spmm-dia-runs does it with 16-byte value pieces and is faster from k = 8 on), shared-memory
// windows of X rows per cluster of nearby diagonals (cp.async ring, spmm-dia-window) no faster at k = 16 and 1.6x
// slower on 27-point, row chunks per block for L1 reuse of the +-nx rows and 2 rows x 2 columns per thread
// (full-line loads) no faster; all dropped. Moves 8 B per stored slot plus 16 n K for X and Y.
// DIA: Bell & Garland, SC 2009; row-major panels with coalesced X rows as in GE-SpMM (Huang et al., SC 2020).
#include <algorithm>

#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

struct SpmmDiaTuning {
  static constexpr int threads = 256;
  static constexpr int batch = 4;    // diagonals whose loads are in flight together
  static constexpr int quad_min_columns = 8;  // 4 columns per thread from this K on (K % 4 == 0)
  // Interleaved 16-byte pieces from this K on (rows of 2+ lines). H100, same run (with the batch loop unrolled
  // twice, as ptxas does on its own for the contiguous mapping): 27-pt 100^3 k = 32 549 -> 436 us, 7-pt 128^3
  // k = 32 unchanged (476-477 us); at k = 16 it was slower (7-pt 248 -> 260 us, 27-pt 289 -> 293 us).
  static constexpr int interleave_min_columns = 32;
  static constexpr int min_blocks_per_sm_quad = 4;  // register cap 64 for 4 columns (48 spilled)
  static constexpr int min_blocks_per_sm = 5;  // register cap 48: a batch without spills (ptxas capped at 40 and spilled)
  static constexpr int max_diagonals = 256;
  static constexpr double max_fill = 1.5;    // stored slots over nonzeros, as dia
};

// CW adjacent columns per thread: 2, or 4 (Vec2 and K % 4 == 0) so a warp covers twice the rows and the
// +-1 diagonals of neighbouring rows find more of their X rows already in L1 (H100, k = 16: 7-pt 319 -> 272 us,
// 27-pt 317 -> 290 us; 8 columns per thread was slower: 302-312 us and 473 us).
template <bool Vec2, int CW, bool Interleave>
__global__ void __launch_bounds__(SpmmDiaTuning::threads, CW == 4 ? SpmmDiaTuning::min_blocks_per_sm_quad : SpmmDiaTuning::min_blocks_per_sm)
    spmm_dia_kernel(int rows, int cols, int diagonals, const int* __restrict__ offsets, int min_offset, int max_offset,
                    const double* __restrict__ val, const double* __restrict__ X, int ld, int K, double alpha,
                    double beta, double* __restrict__ Y) {
  __shared__ int s_off[SpmmDiaTuning::max_diagonals];
  for (int d = threadIdx.x; d < diagonals; d += blockDim.x) s_off[d] = offsets[d];
  __syncthreads();
  const int groups = (K + CW - 1) / CW, rows_per_step = blockDim.x / groups;
  const int lane_in_row = threadIdx.x % groups, local_row = threadIdx.x / groups, c0 = CW * lane_in_row;
  if (local_row >= rows_per_step) return;
  // The thread's 16-byte piece h is double2 number first + piece(h) of the row: columns c0 + 2 h, or
  // interleaved (4 columns per thread, K = 4 groups) 2 l + 2 groups h, so the threads of a row read 16 groups
  // contiguous bytes per load instruction: one line of a 2-line row instead of half of each.
  const int first = Interleave ? 0 : c0;
  auto piece = [&](int h) { return Interleave ? lane_in_row + groups * h : h; };
  const bool full = c0 + CW <= K;  // every column of the thread exists (always, when K % CW == 0)
  const int64_t interior_begin = min_offset < 0 ? -min_offset : 0;
  const int64_t interior_end = int64_t{cols} - (max_offset > 0 ? max_offset : 0);
  const int64_t step = int64_t{rows_per_step} * gridDim.x;
  for (int64_t row = int64_t{blockIdx.x} * rows_per_step + local_row; row < rows; row += step) {
    double acc[CW] = {};
    auto add = [&](int d, int64_t j) {
      const double w = dev::load_stream(val + int64_t{d} * rows + row);
      const double* xr = X + j * ld + first;
      if (Vec2 && full) {
#pragma unroll
        for (int h = 0; h < CW / 2; ++h) {
          const double2 xv = __ldg(reinterpret_cast<const double2*>(xr) + piece(h));
          acc[2 * h] = fma(w, xv.x, acc[2 * h]), acc[2 * h + 1] = fma(w, xv.y, acc[2 * h + 1]);
        }
      } else {
#pragma unroll
        for (int c = 0; c < CW; ++c)
          if (c0 + c < K) acc[c] = fma(w, __ldg(xr + c), acc[c]);
      }
    };
    if (row >= interior_begin && row < interior_end) {
      int d = 0;
      if (Vec2 && full) {
        // All loads of a batch of diagonals first, then the multiply-adds: the batch's L1/L2 round trips
        // overlap instead of following one another.
        constexpr int U = SpmmDiaTuning::batch;
        auto batch = [&](auto tail) {
          double w[U];
          double2 xv[U][CW / 2];
#pragma unroll
          for (int u = 0; u < U; ++u) {
            const bool on = !decltype(tail)::value || d + u < diagonals;
            w[u] = on ? dev::load_stream(val + int64_t{d + u} * rows + row) : 0.0;
            const double2* xr = reinterpret_cast<const double2*>(X + (row + (on ? s_off[d + u] : 0)) * ld + first);
#pragma unroll
            for (int h = 0; h < CW / 2; ++h) xv[u][h] = on ? __ldg(xr + piece(h)) : make_double2(0.0, 0.0);
          }
#pragma unroll
          for (int u = 0; u < U; ++u)
#pragma unroll
            for (int h = 0; h < CW / 2; ++h)
              acc[2 * h] = fma(w[u], xv[u][h].x, acc[2 * h]), acc[2 * h + 1] = fma(w[u], xv[u][h].y, acc[2 * h + 1]);
        };
#pragma unroll 2  // two batches per trip: without it the interleaved variant ran 7-pt k = 32 at 568 us, not 480
        for (; d + U <= diagonals; d += U) batch(std::false_type{});
        // The last diagonals as one predicated batch too: one at a time they each waited a full round trip
        // (H100, 7-pt 128^3: k = 16 274 -> 247 us, k = 32 508 -> 476 us; a batch of 8 was slower).
        if (d < diagonals) batch(std::true_type{}), d = diagonals;
      }
      for (; d < diagonals; ++d) add(d, row + s_off[d]);
    } else {
      for (int d = 0; d < diagonals; ++d) {
        const int64_t j = row + s_off[d];
        if (j >= 0 && j < cols) add(d, j);
      }
    }
    double* y = Y + row * ld + first;
    if (Vec2 && full) {
#pragma unroll
      for (int h = 0; h < CW / 2; ++h) {
        double2* yp = reinterpret_cast<double2*>(y) + piece(h);
        double2 out = make_double2(alpha * acc[2 * h], alpha * acc[2 * h + 1]);
        if (beta != 0.0) {
          const double2 old = *yp;
          out.x = fma(beta, old.x, out.x), out.y = fma(beta, old.y, out.y);
        }
        *yp = out;
      }
    } else {
#pragma unroll
      for (int c = 0; c < CW; ++c)
        if (c0 + c < K) dev::store_y(y + c, alpha, acc[c], beta);
    }
  }
}

class SpmmDia final : public SpmmOperator {
 public:
  SpmmDia(const MatrixSetup& m) : SpmmOperator(m) {
    dia_ = shared_dia(m, name(), SpmmDiaTuning::max_fill, SpmmDiaTuning::max_diagonals, false, 1, info_);
  }
  std::string name() const override { return "spmm-dia"; }
  double bytes_per_apply(int k) const override { return 8.0 * double(rows_) * dia_->diagonals + 16.0 * rows_ * k; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    const bool quad = vec2 && K % 4 == 0 && K >= SpmmDiaTuning::quad_min_columns;
    auto launch = [&](auto vec, auto cw, auto interleave) {
      constexpr int CW = decltype(cw)::value;
      const auto kernel = spmm_dia_kernel<decltype(vec)::value, CW, decltype(interleave)::value>;
      const int rows_per_step = SpmmDiaTuning::threads / ((K + CW - 1) / CW);
      // One wave of resident blocks: a second wave would sweep the rows again and re-read X from DRAM
      // (ncu, 7-pt 128^3, k = 16: 644 MB read with 16 blocks per SM requested, 386 MB with one wave).
      const int64_t steps = (int64_t{rows_} + rows_per_step - 1) / rows_per_step;
      const int blocks = static_cast<int>(std::max<int64_t>(
          1, std::min<int64_t>(steps, resident_blocks(reinterpret_cast<const void*>(kernel), SpmmDiaTuning::threads))));
      kernel<<<blocks, SpmmDiaTuning::threads, 0, s>>>(rows_, cols_, dia_->diagonals, dia_->offsets.data(),
                                                       dia_->min_offset, dia_->max_offset, dia_->values.data(), x, ld, K,
                                                       alpha, beta, y);
    };
    using Quad = std::integral_constant<int, 4>;
    using Pair = std::integral_constant<int, 2>;
    if (quad && K >= SpmmDiaTuning::interleave_min_columns) launch(std::true_type{}, Quad{}, std::true_type{});
    else if (quad) launch(std::true_type{}, Quad{}, std::false_type{});
    else if (vec2) launch(std::true_type{}, Pair{}, std::false_type{});
    else launch(std::false_type{}, Pair{}, std::false_type{});
    CHECK_LAUNCH("spmm-dia");
  }

 private:
  std::shared_ptr<const DeviceDia> dia_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_dia(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmDia>(m);
}

}  // namespace spcg
