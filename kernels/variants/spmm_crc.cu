// spmm-crc: coalesced row caching (Huang, Dai, Wang, Yang, "GE-SpMM: General-purpose sparse matrix-matrix
// multiplication on GPUs for graph neural networks", SC 2020). A group of G = pow2 >= K lanes (<= 32) owns a
// row; each chunk of G sparse entries is loaded once, coalesced, and shuffled to every lane, and lane l
// accumulates columns l, l + G, ... (up to 4 per lane for K = 128).
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

struct CrcTuning {
  static constexpr int columns_per_lane = 1;
  static constexpr int max_passes = 4;  // 128 / 32
};

template <int G>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_crc_kernel(int rows, int K, int ld, const int* __restrict__ row_ptr, const int* __restrict__ col,
                    const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                    double* __restrict__ Y) {
  const int row = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G);
  if (row >= rows) return;  // whole groups leave together
  double acc[CrcTuning::max_passes * CrcTuning::columns_per_lane] = {};
  dev::spmm_accumulate<G, CrcTuning::columns_per_lane, CrcTuning::max_passes>(row_ptr[row], row_ptr[row + 1], col, val,
                                                                               X, ld, K, false, acc);
  dev::spmm_store<G, CrcTuning::columns_per_lane, CrcTuning::max_passes>(Y + int64_t{row} * ld, K, alpha, beta, acc);
}

class SpmmCrc final : public SpmmOperator {
 public:
  SpmmCrc(const MatrixSetup& m) : SpmmOperator(m) {
    info_.format = "csr";
    csr_ = shared_csr(m, info_);
  }
  std::string name() const override { return "spmm-crc"; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int g = spmm_group_width(K, CrcTuning::columns_per_lane);
    dispatch_group_width(g, [&](auto gc) {
      constexpr int G = decltype(gc)::value;
      const int64_t blocks = (int64_t{rows_} * G + SpmmTuning::threads - 1) / SpmmTuning::threads;
      spmm_crc_kernel<G><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
          rows_, K, ld, csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha, beta, y);
    });
    CHECK_LAUNCH("spmm-crc");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_crc(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmCrc>(m);
}

}  // namespace spcg
