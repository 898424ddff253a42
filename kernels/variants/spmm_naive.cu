// spmm-naive: one thread per (row, column) of Y, walking the row; consecutive threads take consecutive columns
// of the same row so X gathers coalesce across a row of X, but every thread re-reads the row's sparse entries.
// The baseline the SpMM family is measured against.
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"

namespace spcg {
namespace {

__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_naive_kernel(int rows, int K, int ld, const int* __restrict__ row_ptr, const int* __restrict__ col,
                      const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                      double* __restrict__ Y) {
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= int64_t{rows} * K) return;
  const int row = static_cast<int>(t / K), j = static_cast<int>(t % K);
  double sum = 0;
  for (int p = row_ptr[row]; p < row_ptr[row + 1]; ++p) sum += val[p] * __ldg(X + static_cast<int64_t>(col[p]) * ld + j);
  dev::store_y(Y + int64_t{row} * ld + j, alpha, sum, beta);
}

class SpmmNaive final : public SpmmOperator {
 public:
  SpmmNaive(const MatrixSetup& m) : SpmmOperator(m) {
    info_.format = "csr";
    csr_ = shared_csr(m, info_);
  }
  std::string name() const override { return "spmm-naive"; }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int64_t blocks = (int64_t{rows_} * K + SpmmTuning::threads - 1) / SpmmTuning::threads;
    spmm_naive_kernel<<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
        rows_, K, ld, csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha, beta, y);
    CHECK_LAUNCH("spmm-naive");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_naive(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmNaive>(m);
}

}  // namespace spcg
