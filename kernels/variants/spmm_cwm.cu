// spmm-cwm: coarse-grained warp merging (GE-SpMM, Huang et al., SC 2020) on top of row caching: each lane
// computes CW = 2 adjacent columns with one 16-byte load of X per sparse entry (CW = 4, two loads, from k = 16
// on), so a group of G = pow2 >= K / CW lanes covers a row of X and each shuffled sparse entry feeds CW columns.
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

struct CwmTuning {
  // Columns per lane: 2, or 4 from this K on (1 x 4 warp merging). H100, same run, k = 16 / 32 / 64: 7-pt 128^3
  // 400 / 752 / 1482 -> 335 / 520 / 1073 us, 27-pt 100^3 516 / 882 / 1462 -> 448 / 623 / 1154 us; at k = 8 it
  // was 6% slower on 7-pt (257 -> 272 us), so 8 keeps 2.
  static constexpr int wide_columns_min_k = 16;
  // Two consecutive entries per step for groups of >= 4 lanes (as spmm-split). H100, same run: 7-pt 128^3 and
  // aniso3d 128^3 k = 16 / 32 405 / 765 -> 397 / 745 us, k = 8 unchanged. spmm-crc and spmm-swizzle got slower
  // with it on those matrices (k = 8: 358 -> 463 us, 260 -> 278 us) and keep one.
  static constexpr int two_entries_min_group = 4;
};

template <int G, int CW>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_cwm_kernel(int rows, int K, int ld, bool vec2, const int* __restrict__ row_ptr, const int* __restrict__ col,
                    const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                    double* __restrict__ Y) {
  const int row = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G);
  if (row >= rows) return;
  constexpr int T = SpmmTuning::panel / 32 / CW > 0 ? SpmmTuning::panel / 32 / CW : 1;  // passes over the panel
  double acc[T * CW] = {};
  constexpr int E = G >= CwmTuning::two_entries_min_group ? 2 : 1;
  dev::spmm_accumulate<G, CW, T, dev::gathers_in_flight<G>(), E>(row_ptr[row], row_ptr[row + 1], col, val, X, ld, K,
                                                                 vec2, acc);
  dev::spmm_store<G, CW, T>(Y + int64_t{row} * ld, K, alpha, beta, acc);
}

class SpmmCwm final : public SpmmOperator {
 public:
  SpmmCwm(const MatrixSetup& m) : SpmmOperator(m) {
    info_.format = "csr";
    csr_ = shared_csr(m, info_);
  }
  std::string name() const override { return "spmm-cwm"; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    auto run = [&](auto cwc) {
      constexpr int CW = decltype(cwc)::value;
      dispatch_group_width(spmm_group_width(K, CW), [&](auto gc) {
        constexpr int G = decltype(gc)::value;
        const int64_t blocks = (int64_t{rows_} * G + SpmmTuning::threads - 1) / SpmmTuning::threads;
        spmm_cwm_kernel<G, CW><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
            rows_, K, ld, vec2, csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha, beta, y);
      });
    };
    if (K >= CwmTuning::wide_columns_min_k) run(std::integral_constant<int, 4>{});
    else run(std::integral_constant<int, 2>{});
    CHECK_LAUNCH("spmm-cwm");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_cwm(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmCwm>(m);
}

}  // namespace spcg
