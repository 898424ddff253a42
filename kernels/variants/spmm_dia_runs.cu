// spmm-dia-runs: SpMM on diagonal storage with register blocking over runs of consecutive diagonals.
// Work mapping: a thread owns R = 4 consecutive rows and P 16-byte X pieces (2 adjacent columns each; P = 2 from
// K = 32 on, the pieces K / 2 columns apart); the K / (2 P) threads of a row group are consecutive, so each X
// load instruction of a warp reads whole lines of the row-major X. Sorted offsets are cut into runs of up to 3
// consecutive offsets (o, o + 1, o + 2: a stencil's x-neighbours). For a run of M diagonals the thread loads the
// R + M - 1 X rows row0 + o .. row0 + o + R + M - 2 once and uses X row t for every (row r, diagonal u) with
// r + u = t: on the 27-point stencil 6 X loads serve 12 row-diagonal products instead of 12 loads, and at k = 16
// a warp load is 4 whole lines instead of 8 half lines (spmm-dia had the L1 data pipe 94% busy,
// docs/perf-notes.md). The R values of a diagonal are contiguous and read as 16-byte pieces. Two
// single-diagonal runs in a row (the 7-point stencil's +-nx, +-nx*ny) are loaded together, so 2 R X rows are in
// flight instead of R. Column panels keep the X rows of a row's diagonal span in L2 (a 7-point stencil's
// +-nx*ny at K >= 64 on 128^3).
// Grid stride over steps of rows with one wave of resident blocks, as spmm-dia (the X rows +-nx*ny apart are
// still in L2 when the last diagonal reaches them). Boundary rows (some diagonal leaves the matrix) take the same
// path with predicated loads. Moves 8 B per stored slot plus 16 n K for X and Y.
// Measured (H100, docs/perf-notes.md): 27-pt 100^3 k = 16 289 -> 209 us against spmm-dia (67% -> 92% of copy),
// k = 32 434 -> 378 us (331 us with P = 2: 84% of copy); 7-pt 128^3 k = 16 247 -> 236 us, k = 32 476 -> 441 us
// (with evict-first Y; 423 us with P = 2). No better overall:
// R = 2 or 8, two runs of 3 batched, 768-thread blocks, 64 registers (spills), a preferred L1 carveout, passes of
// 16 columns at K = 32, and block steps that tile several lines of the stencil's y stride so the +-y runs find
// their X rows in L1 (27-pt slower).
// DIA: Bell & Garland, SC 2009; register blocking along the stencil's unit-stride direction as in stencil codes
// (Datta et al., SC 2008); row-major panels with coalesced X rows as in GE-SpMM (Huang et al., SC 2020).
#include <algorithm>
#include <vector>

#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

struct SpmmDiaRunsTuning {
  static constexpr int threads = 256;
  static constexpr int rows_per_thread = 4;  // R: 2 was slower everywhere, 8 (128 registers) slower on 27-pt
  static constexpr int max_run = 3;          // X window R + 2 pieces and 3 R values per run in registers
  static constexpr int min_blocks_per_sm = 3;         // register cap 80, no spills
  static constexpr int min_blocks_per_sm_scalar = 2;  // the scalar fallback spilled at 80
  // Two 16-byte X pieces per thread (P = 2) from this K on: a warp covers 16 rows at K = 32 instead of 8, each
  // loaded value feeds 4 multiply-adds, and a run needs 18 load instructions per 16 rows instead of 24. At 128
  // registers (2 blocks per SM, no spills). H100, same run (docs/perf-notes.md): 27-pt 100^3 k = 32 376-381 ->
  // 331-334 us, k = 64 733 -> 664-695 us, 7-pt 128^3 k = 32 439-442 -> 423-428 us; at k = 8 / 16 it lost on 7-pt
  // (142 -> 168, 235 -> 260-268 us).
  static constexpr int two_pieces_min_k = 32;
  static constexpr int min_blocks_per_sm_two_pieces = 2;
  // Column panels so that the rows between a row's lowest and highest diagonal (span rows of X and of Y, 16 K
  // bytes per row, streamed through while an X row waits for its last use) stay under this fraction of L2:
  // otherwise X is read from DRAM more than once. H100, 7-pt 128^3 (span 32768 rows): k = 64 1291-1306 -> 1019-1054 us, k = 128 3399-3414
  // -> 1993-2047 us; 0.3 (27-pt k = 64 in panels of 32) was slower there: 719 vs 664-695 us.
  static constexpr double l2_reuse_fraction = 0.5;
  // Panels are cut to multiples of this many columns: H100, 7-pt 128^3 k = 96 1326 us in panels of 32 vs 2246-2278
  // us in panels of 48 (multiples of 16); k = 64 / 128 the same either way.
  static constexpr int panel_multiple = 32;
  static constexpr int max_diagonals = 256;
  static constexpr double max_fill = 1.5;  // stored slots over nonzeros, as dia
  // Evict-first Y stores when the runs average fewer diagonals than this (streaming shapes such as the 7-point
  // stencil). H100, same run: 7-pt 128^3 k = 8 146 -> 141 us, k = 32 445-458 -> 439-440 us; on the 27-point
  // stencil (runs of 3) k = 32 went 376 -> 383 us, so it stays off there.
  static constexpr double evict_first_y_max_run_mean = 2.0;
};

// Vec2: X, Y 16-byte aligned with even ld and K: 16-byte X, Y and value pieces (the diagonals are stored with an
// even stride, so the R values of a diagonal are aligned pieces for any row count); otherwise scalar.
// P: 16-byte X pieces per thread, at columns c0 + p K / P (P = 2 needs Vec2 and K % 4 == 0), so the threads of a
// row read a contiguous K / P columns per load instruction and each loaded value feeds 2 P multiply-adds.
template <int R, int P, bool Vec2>
struct RunRows {
  int rows, cols, K, ld;
  int64_t stride;
  const double* __restrict__ val;
  const double* __restrict__ X;

  __device__ __forceinline__ double2 load_x(int64_t j, int c0, bool on) const {
    if (!on) return make_double2(0.0, 0.0);
    const double* p = X + j * ld + c0;
    if (Vec2) return __ldg(reinterpret_cast<const double2*>(p));
    return make_double2(__ldg(p), c0 + 1 < K ? __ldg(p + 1) : 0.0);
  }

  // The X window and the values of one run of M diagonals.
  template <int M>
  struct Loaded {
    double2 xv[R + M - 1][P];
    double w[M][R];
  };
  template <int M, bool Checked>
  __device__ __forceinline__ void load(int64_t row0, int d0, int o, int c0, Loaded<M>& L) const {
#pragma unroll
    for (int t = 0; t < R + M - 1; ++t) {
      const int64_t j = row0 + o + t;
#pragma unroll
      for (int p = 0; p < P; ++p) L.xv[t][p] = load_x(j, c0 + p * (K / P), !Checked || (j >= 0 && j < cols));
    }
#pragma unroll
    for (int u = 0; u < M; ++u) {
      const double* v = val + (d0 + u) * stride + row0;
      if (Vec2) {
#pragma unroll
        for (int r = 0; r < R; r += 2) {
          const double2 p = !Checked || row0 + r < rows ? __ldcs(reinterpret_cast<const double2*>(v + r)) : make_double2(0.0, 0.0);
          L.w[u][r] = p.x, L.w[u][r + 1] = p.y;
        }
      } else {
#pragma unroll
        for (int r = 0; r < R; ++r) L.w[u][r] = !Checked || row0 + r < rows ? __ldcs(v + r) : 0.0;
      }
    }
  }
  template <int M>
  __device__ __forceinline__ void accumulate(const Loaded<M>& L, double2 (&acc)[R][P]) const {
#pragma unroll
    for (int u = 0; u < M; ++u)
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int p = 0; p < P; ++p)
          acc[r][p].x = fma(L.w[u][r], L.xv[r + u][p].x, acc[r][p].x),
          acc[r][p].y = fma(L.w[u][r], L.xv[r + u][p].y, acc[r][p].y);
  }
  // acc[r] += sum_u val[d0 + u][row0 + r] * X[row0 + r + o + u], u < M; Checked predicates rows past the end
  // and X rows outside [0, cols) (their stored values are zero padding).
  template <int M, bool Checked>
  __device__ __forceinline__ void run(int64_t row0, int d0, int o, int c0, double2 (&acc)[R][P]) const {
    Loaded<M> L;
    load<M, Checked>(row0, d0, o, c0, L);
    accumulate(L, acc);
  }
  // Two runs of M with all their loads in flight together.
  template <int M, bool Checked>
  __device__ __forceinline__ void run_pair(int64_t row0, int d0, int o0, int d1, int o1, int c0, double2 (&acc)[R][P]) const {
    Loaded<M> A, B;
    load<M, Checked>(row0, d0, o0, c0, A);
    load<M, Checked>(row0, d1, o1, c0, B);
    accumulate(A, acc);
    accumulate(B, acc);
  }
};

template <int R, int P, bool Vec2, bool EvictFirstY>
__global__ void __launch_bounds__(SpmmDiaRunsTuning::threads, P == 2 ? SpmmDiaRunsTuning::min_blocks_per_sm_two_pieces
                                                              : Vec2 ? SpmmDiaRunsTuning::min_blocks_per_sm
                                                                     : SpmmDiaRunsTuning::min_blocks_per_sm_scalar)
    spmm_dia_runs_kernel(int rows, int cols, int runs, const int* __restrict__ run_first, const int* __restrict__ offsets,
                         int min_offset, int max_offset, const double* __restrict__ val, int64_t stride,
                         const double* __restrict__ X, int ld, int K, double alpha, double beta, double* __restrict__ Y) {
  __shared__ int s_first[SpmmDiaRunsTuning::max_diagonals + 1], s_off[SpmmDiaRunsTuning::max_diagonals];
  for (int q = threadIdx.x; q <= runs; q += blockDim.x) s_first[q] = run_first[q];
  for (int d = threadIdx.x; d < run_first[runs]; d += blockDim.x) s_off[d] = offsets[d];
  __syncthreads();
  const int groups = (K + 1) / (2 * P), slots = blockDim.x / groups;
  const int lane = threadIdx.x % groups, slot = threadIdx.x / groups, c0 = 2 * lane;
  if (slot >= slots) return;
  const RunRows<R, P, Vec2> rr{rows, cols, K, ld, stride, val, X};
  const int64_t interior_begin = min_offset < 0 ? -min_offset : 0;
  const int64_t interior_end = std::min<int64_t>(rows, int64_t{cols} - (max_offset > 0 ? max_offset : 0));
  const int64_t step = int64_t{slots} * gridDim.x * R;
  for (int64_t row0 = (int64_t{blockIdx.x} * slots + slot) * R; row0 < rows; row0 += step) {
    double2 acc[R][P];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int p = 0; p < P; ++p) acc[r][p] = make_double2(0.0, 0.0);
    auto sweep = [&](auto checked) {
      constexpr bool C = decltype(checked)::value;
      for (int q = 0; q < runs; ++q) {
        const int d0 = s_first[q], m = s_first[q + 1] - d0, o = s_off[d0];
        if (m == 1 && q + 1 < runs && s_first[q + 2] - s_first[q + 1] == 1) {
          rr.template run_pair<1, C>(row0, d0, o, s_first[q + 1], s_off[s_first[q + 1]], c0, acc);
          ++q;
          continue;
        }
        if (m == 3) rr.template run<3, C>(row0, d0, o, c0, acc);
        else if (m == 2) rr.template run<2, C>(row0, d0, o, c0, acc);
        else rr.template run<1, C>(row0, d0, o, c0, acc);
      }
    };
    if (row0 >= interior_begin && row0 + R <= interior_end) sweep(std::false_type{});
    else sweep(std::true_type{});
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (row0 + r >= rows) break;
      double* y = Y + (row0 + r) * ld + c0;
#pragma unroll
      for (int p = 0; p < P; ++p) {
        double* yp = y + p * (K / P);
        if (Vec2) {
          double2 out = make_double2(alpha * acc[r][p].x, alpha * acc[r][p].y);
          if (beta != 0.0) {
            const double2 old = *reinterpret_cast<double2*>(yp);
            out.x = fma(beta, old.x, out.x), out.y = fma(beta, old.y, out.y);
          }
          if (EvictFirstY) __stcs(reinterpret_cast<double2*>(yp), out);
          else *reinterpret_cast<double2*>(yp) = out;
        } else {
          dev::store_y(yp, alpha, acc[r][p].x, beta);
          if (c0 + 1 < K) dev::store_y(yp + 1, alpha, acc[r][p].y, beta);
        }
      }
    }
  }
}

// Runs of consecutive offsets, each cut to at most max_run diagonals: run q is diagonals first[q] .. first[q+1]-1.
std::vector<int32_t> cut_runs(const std::vector<int32_t>& offsets) {
  std::vector<int32_t> first;
  for (size_t d = 0; d < offsets.size(); ++d)
    if (first.empty() || offsets[d] != offsets[d - 1] + 1 || int(d) - first.back() == SpmmDiaRunsTuning::max_run)
      first.push_back(static_cast<int32_t>(d));
  first.push_back(static_cast<int32_t>(offsets.size()));
  return first;
}

class SpmmDiaRuns final : public SpmmOperator {
 public:
  SpmmDiaRuns(const MatrixSetup& m) : SpmmOperator(m) {
    dia_ = shared_dia(m, name(), SpmmDiaRunsTuning::max_fill, SpmmDiaRunsTuning::max_diagonals, false, 2, info_);
    const std::vector<int32_t> first = cut_runs(dia_->offsets.download());
    runs_ = static_cast<int>(first.size()) - 1;
    run_first_ = DeviceArray<int32_t>(first, "spmm-dia-runs runs");
  }
  std::string name() const override { return "spmm-dia-runs"; }
  // The values are read once per column panel (each launch of SpmmOperator's panels of <= 128 is cut again
  // by panel_width).
  double bytes_per_apply(int k) const override {
    double sweeps = 0;
    for (int j0 = 0; j0 < k; j0 += SpmmTuning::panel) {
      const int K = std::min(SpmmTuning::panel, k - j0);
      sweeps += (K + panel_width(K) - 1) / panel_width(K);
    }
    return 8.0 * double(rows_) * dia_->diagonals * std::max(1.0, sweeps) + 16.0 * rows_ * k;
  }

 protected:
  // Halves K while the X and Y rows of a row's diagonal span (16 K bytes each) would not stay in L2, rounding
  // down to a multiple of panel_multiple (whole 128-byte lines of X, and the 16-byte two-piece path).
  int panel_width(int K) const {
    constexpr int m = SpmmDiaRunsTuning::panel_multiple;
    const double span = double(dia_->max_offset) - dia_->min_offset;
    int width = K;
    while (width > 32 && span * 16.0 * width > SpmmDiaRunsTuning::l2_reuse_fraction * double(device_l2_bytes()))
      width = std::max(m, width / 2 / m * m);
    return width;
  }
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int width = panel_width(K);
    for (int j0 = 0; j0 < K; j0 += width) apply_columns(alpha, x + j0, beta, y + j0, std::min(width, K - j0), ld, s);
  }
  void apply_columns(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const {
    const bool vec2 = ld % 2 == 0 && K % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(y) % 16 == 0;
    auto launch = [&](auto pieces, auto vec, auto evict_first_y) {
      constexpr int R = SpmmDiaRunsTuning::rows_per_thread, T = SpmmDiaRunsTuning::threads;
      constexpr int P = decltype(pieces)::value;
      const auto kernel = spmm_dia_runs_kernel<R, P, decltype(vec)::value, decltype(evict_first_y)::value>;
      const int rows_per_step = T / ((K + 1) / (2 * P)) * R;
      const int64_t steps = (int64_t{rows_} + rows_per_step - 1) / rows_per_step;
      const int blocks = static_cast<int>(std::max<int64_t>(
          1, std::min<int64_t>(steps, resident_blocks(reinterpret_cast<const void*>(kernel), T))));
      kernel<<<blocks, T, 0, s>>>(rows_, cols_, runs_, run_first_.data(), dia_->offsets.data(), dia_->min_offset,
                                  dia_->max_offset, dia_->values.data(), dia_->stride, x, ld, K, alpha, beta, y);
    };
    using One = std::integral_constant<int, 1>;
    using Two = std::integral_constant<int, 2>;
    const bool streaming = dia_->diagonals < SpmmDiaRunsTuning::evict_first_y_max_run_mean * runs_;
    const bool two_pieces = vec2 && K % 4 == 0 && K >= SpmmDiaRunsTuning::two_pieces_min_k;
    if (two_pieces && streaming) launch(Two{}, std::true_type{}, std::true_type{});
    else if (two_pieces) launch(Two{}, std::true_type{}, std::false_type{});
    else if (vec2 && streaming) launch(One{}, std::true_type{}, std::true_type{});
    else if (vec2) launch(One{}, std::true_type{}, std::false_type{});
    else launch(One{}, std::false_type{}, std::false_type{});
    CHECK_LAUNCH("spmm-dia-runs");
  }

 private:
  std::shared_ptr<const DeviceDia> dia_;
  DeviceArray<int32_t> run_first_;
  int runs_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_dia_runs(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmDiaRuns>(m);
}

}  // namespace spcg
