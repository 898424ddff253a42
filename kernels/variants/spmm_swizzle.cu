// spmm-swizzle: row swizzle (Gale, Zaharia, Young, Elsen, "Sparse GPU kernels for deep learning", SC 2020).
// Rows are ordered by decreasing length at setup and groups take rows in that order, so the long rows start
// first and the warps of a block do similar amounts of work; the row body is spmm-cwm's.
#include <algorithm>
#include <numeric>

#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

struct SwizzleTuning {
  static constexpr int columns_per_lane = 2;
  static constexpr int max_passes = 2;
};

template <int G>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_swizzle_kernel(int rows, int K, int ld, bool vec2, const int* __restrict__ order, const int* __restrict__ row_ptr,
                        const int* __restrict__ col, const double* __restrict__ val, const double* __restrict__ X,
                        double alpha, double beta, double* __restrict__ Y) {
  const int slot = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G);
  if (slot >= rows) return;
  const int row = order[slot];
  double acc[SwizzleTuning::max_passes * SwizzleTuning::columns_per_lane] = {};
  dev::spmm_accumulate<G, SwizzleTuning::columns_per_lane, SwizzleTuning::max_passes>(row_ptr[row], row_ptr[row + 1],
                                                                                       col, val, X, ld, K, vec2, acc);
  dev::spmm_store<G, SwizzleTuning::columns_per_lane, SwizzleTuning::max_passes>(Y + int64_t{row} * ld, K, alpha, beta,
                                                                                 acc);
}

class SpmmSwizzle final : public SpmmOperator {
 public:
  SpmmSwizzle(const MatrixSetup& m) : SpmmOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    std::vector<int32_t> order(a.rows);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int32_t x, int32_t y) { return a.row_length(x) > a.row_length(y); });
    info_.convert_ms = ms_since(t0);
    info_.format = "csr+swizzle";
    csr_ = shared_csr(m, info_);
    order_ = DeviceArray<int32_t>(order, "row swizzle order");
    info_.device_bytes += static_cast<int64_t>(order_.bytes());
  }
  std::string name() const override { return "spmm-swizzle"; }
  double bytes_per_apply(int k) const override { return SpmmOperator::bytes_per_apply(k) + 4.0 * rows_; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int g = spmm_group_width(K, SwizzleTuning::columns_per_lane);
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    dispatch_group_width(g, [&](auto gc) {
      constexpr int G = decltype(gc)::value;
      const int64_t blocks = (int64_t{rows_} * G + SpmmTuning::threads - 1) / SpmmTuning::threads;
      spmm_swizzle_kernel<G><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
          rows_, K, ld, vec2, order_.data(), csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha,
          beta, y);
    });
    CHECK_LAUNCH("spmm-swizzle");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<int32_t> order_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_swizzle(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmSwizzle>(m);
}

}  // namespace spcg
