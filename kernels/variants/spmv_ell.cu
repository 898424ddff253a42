// ell: column-major padded ELLPACK, one thread per row (Bell & Garland 2009). Entry k of all rows is one
// contiguous stripe, so consecutive threads read consecutive addresses; padding repeats the row's last column
// with value 0, so there is no branch in the inner loop.
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/setup_kernels.hpp"
#include "kernels/variants/spmv_launchers.hpp"

namespace spcg {
namespace {

struct EllTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;  // all resident at once: one wave (grid_stride_blocks)
  static constexpr double max_fill = 3.0;  // refuse when padding would triple the storage
};

template <bool WithDot>
__global__ void __launch_bounds__(EllTuning::threads)
    ell_kernel(int rows, int width, const int* __restrict__ col, const double* __restrict__ val,
               const double* __restrict__ x, int ld, double alpha, double beta, double* __restrict__ y, DotSink sink) {
  double dot = 0;
  for (int64_t row = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; row < rows; row += int64_t{gridDim.x} * blockDim.x) {
    double sum = 0;
#pragma unroll 4
    for (int k = 0; k < width; ++k) {
      const int64_t at = int64_t{k} * rows + row;
      sum += dev::load_stream(val + at) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + at)) * ld);
    }
    dev::store_y(y + row * ld, alpha, sum, beta);
    if (WithDot) dot += x[row] * (alpha * sum);
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

class Ell final : public SpmvOperator, public FusedDotProduct {
 public:
  Ell(const MatrixSetup& m) : SpmvOperator(m) {
    // Built on the device from the shared CSR; the width is the statistics' longest row.
    const MatrixStats& st = m.stats();
    check_format_fill("ell", double(st.rows) * st.row_max, st.nnz, EllTuning::max_fill);
    const auto t0 = std::chrono::steady_clock::now();
    ell_ = device_ell(*m.device_csr(), st.row_max);
    info_.convert_ms = ms_since(t0);
    info_.format = "ell-" + std::to_string(ell_.width);
    info_.device_bytes = static_cast<int64_t>(ell_.col_idx.bytes() + ell_.values.bytes());
  }
  std::string name() const override { return "ell"; }
  double bytes_per_apply(int k) const override { return (12.0 * double(rows_) * ell_.width + 16.0 * rows_) * k; }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    if (rows_ != cols_) return apply(1.0, x, 0.0, y, 1, s), false;  // the product alone
    const int blocks = std::min(sink.capacity, grid_stride_blocks(rows_, EllTuning::threads, EllTuning::blocks_per_sm));
    ell_kernel<true><<<blocks, EllTuning::threads, 0, s>>>(rows_, ell_.width, ell_.col_idx.data(), ell_.values.data(),
                                                          x, 1, 1.0, 0.0, y, sink);
    CHECK_LAUNCH("ell");
    return true;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch_ell_column(ell_, alpha, x, beta, y, ld, s);
  }

 private:
  DeviceEll ell_;
};

}  // namespace

void launch_ell_column(const DeviceEll& ell, double alpha, const double* x, double beta, double* y, int ld,
                       cudaStream_t s) {
  if (ell.rows == 0) return;
  const int blocks = grid_stride_blocks(ell.rows, EllTuning::threads, EllTuning::blocks_per_sm);
  ell_kernel<false><<<blocks, EllTuning::threads, 0, s>>>(ell.rows, ell.width, ell.col_idx.data(), ell.values.data(), x,
                                                         ld, alpha, beta, y, DotSink{});
  CHECK_LAUNCH("ell");
}

std::unique_ptr<LinearOperator> make_ell(const MatrixSetup& m, const OperatorOptions&) { return std::make_unique<Ell>(m); }

}  // namespace spcg
