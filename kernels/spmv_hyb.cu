// hyb: ELL for the typical rows plus COO for the long tail (Bell & Garland 2009). The ELL width is cusp's rule
// (largest K that at least max(4096, n/3) rows reach), so the ELL part is nearly dense and the few long rows
// go through the skew-insensitive COO segmented reduction, which accumulates onto the ELL result.
#include "device_utils.cuh"
#include "kernel_factories.hpp"
#include "spmv_launchers.hpp"

namespace spcg {
namespace {

class Hyb final : public SpmvOperator {
 public:
  Hyb(const MatrixSetup& m) : SpmvOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    HybMatrix h = csr_to_hyb(a);
    info_.convert_ms = elapsed_ms(t0);
    info_.format = "hyb-ell" + std::to_string(h.ell.width) + "+coo" + std::to_string(h.coo.values.size());
    ell_ = upload_ell(h.ell, info_);
    coo_ = upload_coo(h.coo, info_);
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
