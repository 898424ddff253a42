// spmm-split: dense-row splitting (hierarchical tiling in the spirit of Yang, Buluc, Owens, "Design principles
// for sparse matrix multiplication on the GPU", Euro-Par 2018). Rows longer than split_entries are cut into
// pieces of that many entries; every piece is a work item for a group of lanes (spmm-cwm's body). Pieces of a
// split row write raw partial sums to a workspace and a second pass adds them in piece order: no atomics, so
// the result is bitwise deterministic.
#include <algorithm>

#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"
#include "kernels/variants/spmm_pieces.hpp"

namespace spcg {
namespace {

struct SplitTuning {
  static constexpr int split_entries = 256;
  // Columns per lane: 2 (one 16-byte X piece per entry), 4 from this K on (two pieces, half the lanes per row,
  // so each (column, value) shuffle feeds twice the multiply-adds). H100, same run, k = 8 / 16 / 32 / 64:
  // 7-pt 128^3 259 / 401 / 756 / 1718 -> 227 / 338 / 524 / 1082 us, 27-pt 100^3 398 / 526 / 915 / 1619 ->
  // 359 / 451 / 631 / 1171 us, power-law 1M 570 / 725 / 1142 / 2154 -> 496 / 685 / 1069 / 1992 us.
  static constexpr int wide_columns_min_k = 8;
  // Groups of >= 4 lanes (k >= 8) take two consecutive entries of a row at a time, so two X-row gathers are in
  // flight per group. H100, power-law 1M, same run: k = 8 / 16 / 32 638 / 797 / 1222 -> 567 / 721 / 1140 us
  // (cuSPARSE ALG3 623 / 699 / 1374); four at a time were slower (662 / 870 / 1320), and narrower groups
  // already gather several entries per lane (spmm_accumulate's U), where this doubled the time.
  static constexpr int two_entries_min_group = 4;
};

// item: {row, begin, end, slot}; slot < 0: whole row, write Y; slot >= 0: write partial[slot * K + j].
template <int G, int E, int CW>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_split_kernel(int items, int K, int ld, bool vec2, const int4* __restrict__ work, const int* __restrict__ col,
                      const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                      double* __restrict__ Y, double* __restrict__ partial) {
  const int item = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G);
  if (item >= items) return;
  const int4 w = work[item];
  constexpr int T = SpmmTuning::panel / 32 / CW > 0 ? SpmmTuning::panel / 32 / CW : 1;
  double acc[T * CW] = {};
  dev::spmm_accumulate<G, CW, T, dev::gathers_in_flight<G>(), E>(w.y, w.z, col, val, X, ld, K, vec2, acc);
  if (w.w < 0) {
    dev::spmm_store<G, CW, T>(Y + int64_t{w.x} * ld, K, alpha, beta, acc);
  } else {
    dev::spmm_store<G, CW, T>(partial + int64_t{w.w} * K, K, 1.0, 0.0, acc);
  }
}

class SpmmSplit final : public SpmmOperator {
 public:
  SpmmSplit(const MatrixSetup& m) : SpmmOperator(m) {
    pieces_ = setup_row_pieces(m, SplitTuning::split_entries, SpmmTuning::panel, csr_, info_);
  }
  std::string name() const override { return "spmm-split"; }
  double bytes_per_apply(int k) const override {
    return SpmmOperator::bytes_per_apply(k) + 16.0 * pieces_.items + 16.0 * double(pieces_.slots) * k;
  }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    double* partial = const_cast<double*>(pieces_.partial.data());
    auto run = [&](auto cwc) {
      constexpr int CW = decltype(cwc)::value;
      dispatch_group_width(spmm_group_width(K, CW), [&](auto gc) {
        constexpr int G = decltype(gc)::value;
        const int64_t blocks = (int64_t{pieces_.items} * G + SpmmTuning::threads - 1) / SpmmTuning::threads;
        constexpr int E = G >= SplitTuning::two_entries_min_group ? 2 : 1;
        spmm_split_kernel<G, E, CW><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
            pieces_.items, K, ld, vec2, pieces_.work.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha, beta, y,
            partial);
      });
    };
    if (K >= SplitTuning::wide_columns_min_k) run(std::integral_constant<int, 4>{});
    else run(std::integral_constant<int, 2>{});
    CHECK_LAUNCH("spmm-split");
    pieces_.combine(K, ld, alpha, beta, y, s);
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
  RowPieces pieces_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_split(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmSplit>(m);
}

}  // namespace spcg
