// csr-scalar: one thread per row walks the row's entries (Bell & Garland, "Implementing sparse matrix-vector
// multiplication on throughput-oriented processors", SC 2009). Uncoalesced matrix reads when rows are long;
// the baseline every other kernel is measured against.
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"

namespace spcg {
namespace {

struct CsrScalarTuning {
  static constexpr int threads = 256;
};

__global__ void __launch_bounds__(CsrScalarTuning::threads)
    csr_scalar_kernel(int rows, const int* __restrict__ row_ptr, const int* __restrict__ col,
                      const double* __restrict__ val, const double* __restrict__ x, int ld, double alpha,
                      double beta, double* __restrict__ y) {
  const int row = blockIdx.x * blockDim.x + threadIdx.x;
  if (row >= rows) return;
  double sum = 0;
  const int end = row_ptr[row + 1];
  for (int p = row_ptr[row]; p < end; ++p)
    sum += dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
  dev::store_y(y + static_cast<int64_t>(row) * ld, alpha, sum, beta);
}

class CsrScalar final : public SpmvOperator {
 public:
  CsrScalar(const MatrixSetup& m) : SpmvOperator(m) {
    info_.format = "csr";
    csr_ = shared_csr(m, info_);
  }
  std::string name() const override { return "csr-scalar"; }
  double bytes_per_apply(int k) const override { return csr_bytes_model(rows_, nnz_, 1) * k; }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    const int blocks = (rows_ + CsrScalarTuning::threads - 1) / CsrScalarTuning::threads;
    csr_scalar_kernel<<<blocks, CsrScalarTuning::threads, 0, s>>>(rows_, csr_->row_ptr.data(), csr_->col_idx.data(),
                                                                  csr_->values.data(), x, ld, alpha, beta, y);
    CHECK_LAUNCH("csr-scalar");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_scalar(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrScalar>(m);
}

}  // namespace spcg
