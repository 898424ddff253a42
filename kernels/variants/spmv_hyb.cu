// hyb: ELL for the typical rows plus COO for the long tail (Bell & Garland 2009). The ELL width is cusp's rule
// (largest K that at least max(4096, n/3) rows reach), so the ELL part is nearly dense and the few long rows
// go through the skew-insensitive COO segmented reduction, which accumulates onto the ELL result.
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/setup_kernels.hpp"
#include "kernels/variants/spmv_launchers.hpp"

namespace spcg {
namespace {

class Hyb final : public SpmvOperator {
 public:
  Hyb(const MatrixSetup& m) : SpmvOperator(m) {
    // Built on the device from the shared CSR (host: 1.7 s for the 2M-row power-law matrix on the
    // development machine).
    const auto t0 = std::chrono::steady_clock::now();
    DeviceHyb h = device_hyb(*m.device_csr(), m.stats().row_max);
    info_.convert_ms = ms_since(t0);
    ell_ = std::move(h.ell);
    coo_ = std::move(h.coo);
    info_.format = "hyb-ell" + std::to_string(ell_.width) + "+coo" + std::to_string(coo_.nnz);
    info_.device_bytes = static_cast<int64_t>(ell_.col_idx.bytes() + ell_.values.bytes() + coo_.row_idx.bytes() +
                                              coo_.col_idx.bytes() + coo_.values.bytes());
    ws_ = make_coo_workspace(coo_.nnz);
  }
  std::string name() const override { return "hyb"; }
  double bytes_per_apply(int k) const override {
    return (12.0 * double(rows_) * ell_.width + 16.0 * double(coo_.nnz) + 16.0 * rows_ + (coo_.nnz ? 8.0 * rows_ : 0)) * k;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    launch_ell_column(ell_, alpha, x, beta, y, ld, s);  // width 0 still writes beta * y
    launch_coo_column(coo_, ws_, alpha, x, y, ld, s);
  }

 private:
  DeviceEll ell_;
  DeviceCoo coo_;
  CooWorkspace ws_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_hyb(const MatrixSetup& m, const OperatorOptions&) { return std::make_unique<Hyb>(m); }

}  // namespace spcg
