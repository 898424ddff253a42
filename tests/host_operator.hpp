#pragma once
// The LinearOperator interface over host memory, for tests of host code that takes an operator (option checks
// that come before any device work, the interface's own shape handling): y = alpha A x + beta y on n x k
// row-major blocks in host memory, counting the calls that reach apply_impl.
#include <cstdint>
#include <string>

#include "spcg/csr_matrix.hpp"
#include "kernels/linear_operator.hpp"

namespace spcg::test {

class HostOperator final : public LinearOperator {
 public:
  explicit HostOperator(const CsrMatrix& a) : LinearOperator(a), a_(a) {}
  std::string name() const override { return "host-test"; }
  double bytes_per_apply(int k) const override { return csr_bytes_model(rows_, nnz_, k); }
  mutable int calls = 0;

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t) const override {
    ++calls;
    for (int32_t i = 0; i < a_.rows; ++i)
      for (int j = 0; j < k; ++j) {
        double s = 0;
        for (int32_t p = a_.row_ptr[i]; p < a_.row_ptr[i + 1]; ++p) s += a_.values[p] * x[int64_t{a_.col_idx[p]} * k + j];
        double& out = y[int64_t{i} * k + j];
        out = alpha * s + (beta == 0 ? 0.0 : beta * out);
      }
  }

 private:
  CsrMatrix a_;
};

}  // namespace spcg::test
