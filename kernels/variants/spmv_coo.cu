// coo: COO with warp-level segmented reduction (Bell & Garland 2009, "coo_flat"). Each warp owns an
// interval of 32 * iterations entries, takes 32 at a time, and runs an inclusive segmented scan over the row
// keys with shuffles; a row that ends inside the interval is written by this warp only, the row still open at
// the interval's end is left as a carry and added by the deterministic fix-up pass. Insensitive to row-length
// skew; pays 4 extra bytes per entry for the row index and a scale pass over y.
#include <climits>

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmv_launchers.hpp"

namespace spcg {
namespace {

struct CooTuning {
  static constexpr int threads = 256;
  static constexpr int iterations = 8;  // 32-entry chunks per warp interval
  static constexpr int64_t interval = 32 * iterations;
};

__global__ void __launch_bounds__(CooTuning::threads)
    coo_kernel(int64_t nnz, int64_t intervals, const int* __restrict__ row_idx, const int* __restrict__ col,
               const double* __restrict__ val, const double* __restrict__ x, int ld, double alpha,
               double* __restrict__ y, int32_t* __restrict__ carry_row, double* __restrict__ carry_val) {
  const int lane = threadIdx.x & 31;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  if (warp >= intervals) return;  // whole warp leaves together
  const int64_t begin = warp * CooTuning::interval;
  const int64_t end = min(begin + CooTuning::interval, nnz);
  int c_row = row_idx[begin];
  double c_val = 0;
  for (int64_t base = begin; base < end; base += 32) {
    const int64_t p = base + lane;
    const bool valid = p < end;
    const int r = valid ? dev::load_stream(row_idx + p) : INT_MAX;
    double v = valid ? dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld) : 0.0;
    if (lane == 0) {
      if (r == c_row) v += c_val;
      else y[int64_t{c_row} * ld] += alpha * c_val;  // the carried row ended exactly at the chunk boundary
    }
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int r_up = __shfl_up_sync(0xffffffffu, r, off);
      const double v_up = __shfl_up_sync(0xffffffffu, v, off);
      if (lane >= off && r_up == r) v += v_up;
    }
    const int r_next = __shfl_down_sync(0xffffffffu, r, 1);
    if (valid && lane < 31 && r_next != r) y[int64_t{r} * ld] += alpha * v;
    c_row = __shfl_sync(0xffffffffu, r, 31);
    c_val = __shfl_sync(0xffffffffu, v, 31);
  }
  if (lane == 0) {
    carry_row[warp] = c_row;  // INT_MAX when the last chunk was partial: ignored by the fix-up
    carry_val[warp] = c_val;
  }
}

class Coo final : public SpmvOperator {
 public:
  Coo(const MatrixSetup& m) : SpmvOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    CooMatrix c = csr_to_coo(a);
    info_.convert_ms = ms_since(t0);
    info_.format = "coo";
    coo_ = upload_coo(c, info_);
    ws_ = make_coo_workspace(coo_.nnz);
  }
  std::string name() const override { return "coo"; }
  double bytes_per_apply(int k) const override { return (16.0 * double(nnz_) + 24.0 * rows_) * k; }

 protected:
  // Scale the whole block by beta once, then accumulate column by column.
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    launch_scale(beta, y, static_cast<size_t>(rows_) * k, s);
    for (int j = 0; j < k; ++j) launch_coo_column(coo_, ws_, alpha, x + j, y + j, k, s);
  }
  void apply_column(double, const double*, double, double*, int, cudaStream_t) const override {}

 private:
  DeviceCoo coo_;
  CooWorkspace ws_;
};

}  // namespace

CooWorkspace make_coo_workspace(int64_t nnz) {
  CooWorkspace ws;
  ws.intervals = (nnz + CooTuning::interval - 1) / CooTuning::interval;
  ws.carry_row = DeviceArray<int32_t>(ws.intervals, "COO carries");
  ws.carry_val = DeviceArray<double>(ws.intervals, "COO carries");
  return ws;
}

void launch_coo_column(const DeviceCoo& coo, const CooWorkspace& ws, double alpha, const double* x, double* y,
                       int ld, cudaStream_t s) {
  if (coo.nnz == 0) return;
  const int64_t threads = ws.intervals * 32;
  const int64_t blocks = (threads + CooTuning::threads - 1) / CooTuning::threads;
  coo_kernel<<<static_cast<unsigned>(blocks), CooTuning::threads, 0, s>>>(
      coo.nnz, ws.intervals, coo.row_idx.data(), coo.col_idx.data(), coo.values.data(), x, ld, alpha, y,
      const_cast<int32_t*>(ws.carry_row.data()), const_cast<double*>(ws.carry_val.data()));
  CHECK_LAUNCH("coo");
  launch_carry_fixup(ws.carry_row.data(), ws.carry_val.data(), ws.intervals, coo.rows, alpha, y, ld, s);
}

std::unique_ptr<LinearOperator> make_coo(const MatrixSetup& m, const OperatorOptions&) { return std::make_unique<Coo>(m); }

}  // namespace spcg
