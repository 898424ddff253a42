#pragma once
// What the CSR SpMV kernels over the setup's shared CSR have in common (csr-vector, csr-stream): the FP32-values
// variant's copy of the values, the bytes model, the fused-dot entry and the column-by-column apply. The kernel
// file gives its launch.
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "kernels/device_formats.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/setup_kernels.hpp"

namespace spcg {

class CsrKernelOperator : public SpmvOperator, public FusedDotProduct {
 public:
  std::string name() const override { return fp32_ ? name_ + "-f32" : name_; }
  // 12 bytes an entry (8 with FP32 values), the row offsets, x and y
  double bytes_per_apply(int k) const override {
    return (csr_bytes_model(rows_, nnz_, 1) - (fp32_ ? 4.0 * double(nnz_) : 0.0)) * k;
  }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    if (rows_ == 0 || nnz_ == 0 || rows_ != cols_) return apply(1.0, x, 0.0, y, 1, s), false;  // the product alone
    if (launch(true, 1.0, x, 0.0, y, 1, sink, s) > sink.capacity) throw Error(name() + ": dot sink too small");
    return true;
  }

 protected:
  // name: the FP64 kernel's registry name (the FP32 variant's is name + "-f32")
  CsrKernelOperator(const MatrixSetup& m, bool fp32, std::string name)
      : SpmvOperator(m), name_(std::move(name)), fp32_(fp32) {
    info_.format = fp32 ? "csr (FP32 values)" : "csr";
    csr_ = shared_csr(m, info_);
    if (fp32_) {  // the FP64 values stay shared (the true residual's operator and the setup read them)
      values32_ = device_to_float(csr_->values, (name_ + " FP32 values").c_str());
      info_.device_bytes += static_cast<int64_t>(values32_.bytes());
    }
  }
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch(false, alpha, x, beta, y, ld, DotSink{}, s);
  }
  // Enqueues y = alpha A x + beta y (with_dot: x'y into the sink as well); returns the kernel's block count.
  virtual int launch(bool with_dot, double alpha, const double* x, double beta, double* y, int ld, const DotSink& sink,
                     cudaStream_t s) const = 0;

  // go(values, std::integral_constant<bool, with_dot>) on the values the kernel reads (FP32 or FP64)
  template <class Go>
  void with_values(bool with_dot, Go&& go) const {
    using Dot = std::true_type;
    using NoDot = std::false_type;
    const double* v64 = csr_->values.data();
    const float* v32 = values32_.data();
    if (fp32_) with_dot ? go(v32, Dot{}) : go(v32, NoDot{});
    else with_dot ? go(v64, Dot{}) : go(v64, NoDot{});
  }

  std::string name_;
  bool fp32_;
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<float> values32_;  // fp32_: the values the kernel reads
};

}  // namespace spcg
