// csr-merge: merge-path SpMV (Merrill & Garland, "Merge-based parallel sparse matrix-vector multiplication",
// SC 2016). The merge of the row-end offsets with the nonzero indices is cut into equal tiles of
// threads * items_per_thread items, so every thread does the same work whatever the row lengths. A block
// stages its tile's products and row ends in shared memory, each thread finds its start on the merge path by
// binary search and consumes its items; the partial sums that cross thread boundaries are combined in the
// block, and the one that crosses the tile boundary goes through the deterministic carry fix-up.
#include <algorithm>
#include <climits>

#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmv_launchers.hpp"

namespace spcg {
namespace {

struct CsrMergeTuning {
  static constexpr int threads = 128;
  static constexpr int items_per_thread = 8;
  static constexpr int tile_items = threads * items_per_thread;
};

__global__ void __launch_bounds__(CsrMergeTuning::threads)
    csr_merge_kernel(int rows, const int2* __restrict__ tile_coord, const int* __restrict__ row_ptr,
                     const int* __restrict__ col, const double* __restrict__ val, const double* __restrict__ x, int ld,
                     double alpha, double beta, double* __restrict__ y, int32_t* __restrict__ carry_row,
                     double* __restrict__ carry_val) {
  constexpr int T = CsrMergeTuning::tile_items;
  __shared__ double s_prod[T];
  __shared__ int s_row_end[T + 1];
  __shared__ int s_carry_row[CsrMergeTuning::threads];
  __shared__ double s_carry_val[CsrMergeTuning::threads];
  const int2 start = tile_coord[blockIdx.x], stop = tile_coord[blockIdx.x + 1];
  const int tile_rows = stop.x - start.x, tile_nz = stop.y - start.y;
  for (int i = threadIdx.x; i < tile_nz; i += blockDim.x) {
    const int p = start.y + i;
    s_prod[i] = dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
  }
  for (int i = threadIdx.x; i <= tile_rows; i += blockDim.x)
    s_row_end[i] = start.x + i < rows ? row_ptr[start.x + i + 1] : INT_MAX;
  __syncthreads();

  // This thread's start on the tile's merge path: rows consumed r, entries consumed d - r.
  const int tile_total = tile_rows + tile_nz;
  const int d = min(static_cast<int>(threadIdx.x) * CsrMergeTuning::items_per_thread, tile_total);
  int lo = max(d - tile_nz, 0), hi = min(d, tile_rows);
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (s_row_end[mid] <= start.y + d - mid - 1) lo = mid + 1;
    else hi = mid;
  }
  int r = lo, nz = d - lo;  // tile-local
  const int items = min(CsrMergeTuning::items_per_thread, tile_total - d);
  double sum = 0;
  int first_row = -1;
  double first_sum = 0;
  for (int i = 0; i < items; ++i) {
    if (start.y + nz < s_row_end[r]) {
      sum += s_prod[nz++];
    } else {
      if (first_row < 0) {
        first_row = start.x + r, first_sum = sum;  // may need partial sums of earlier threads
      } else {
        dev::store_y(y + int64_t(start.x + r) * ld, alpha, sum, beta);
      }
      sum = 0;
      ++r;
    }
  }
  s_carry_row[threadIdx.x] = start.x + r;
  s_carry_val[threadIdx.x] = sum;
  __syncthreads();
  if (first_row >= 0) {
    for (int t = static_cast<int>(threadIdx.x) - 1; t >= 0 && s_carry_row[t] == first_row; --t) first_sum += s_carry_val[t];
    dev::store_y(y + int64_t(first_row) * ld, alpha, first_sum, beta);
  }
  if (threadIdx.x == blockDim.x - 1) {
    const int open_row = s_carry_row[threadIdx.x];
    double open_sum = 0;
    for (int t = threadIdx.x; t >= 0 && s_carry_row[t] == open_row; --t) open_sum += s_carry_val[t];
    carry_row[blockIdx.x] = open_row;  // rows >= n are ignored by the fix-up
    carry_val[blockIdx.x] = open_sum;
  }
}

// Start (row, nonzero) of merge-path diagonal d: the standard search of Merrill & Garland.
int2 merge_path_search(int64_t d, const CsrMatrix& a) {
  int64_t lo = std::max<int64_t>(d - a.nnz(), 0), hi = std::min<int64_t>(d, a.rows);
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (a.row_ptr[mid + 1] <= d - mid - 1) lo = mid + 1;
    else hi = mid;
  }
  return make_int2(static_cast<int>(lo), static_cast<int>(d - lo));
}

class CsrMerge final : public SpmvOperator {
 public:
  CsrMerge(const MatrixSetup& m) : SpmvOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    const int64_t total = int64_t{a.rows} + a.nnz();
    tiles_ = (total + CsrMergeTuning::tile_items - 1) / CsrMergeTuning::tile_items;
    std::vector<int2> coords(tiles_ + 1);
    for (int64_t t = 0; t <= tiles_; ++t) coords[t] = merge_path_search(std::min(t * CsrMergeTuning::tile_items, total), a);
    info_.convert_ms = ms_since(t0);
    info_.format = "csr+mergepath";
    csr_ = shared_csr(m, info_);
    coords_ = DeviceArray<int2>(coords, "merge-path tile coordinates");
    carry_row_ = DeviceArray<int32_t>(tiles_, "merge-path carries");
    carry_val_ = DeviceArray<double>(tiles_, "merge-path carries");
    info_.device_bytes += static_cast<int64_t>(coords_.bytes());
  }
  std::string name() const override { return "csr-merge"; }
  double bytes_per_apply(int k) const override { return (csr_bytes_model(rows_, nnz_, 1) + 20.0 * tiles_) * k; }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    csr_merge_kernel<<<static_cast<unsigned>(tiles_), CsrMergeTuning::threads, 0, s>>>(
        rows_, coords_.data(), csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, ld, alpha, beta, y,
        const_cast<int32_t*>(carry_row_.data()), const_cast<double*>(carry_val_.data()));
    CHECK_LAUNCH("csr-merge");
    launch_carry_fixup(carry_row_.data(), carry_val_.data(), tiles_, rows_, alpha, y, ld, s);
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<int2> coords_;
  DeviceArray<int32_t> carry_row_;
  DeviceArray<double> carry_val_;
  int64_t tiles_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_merge(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrMerge>(m);
}

}  // namespace spcg
