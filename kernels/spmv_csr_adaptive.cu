// csr-adaptive: rows binned into row blocks at setup (Greathouse & Daga, "Efficient sparse matrix-vector
// multiplication on GPUs using the CSR storage format", SC 2014; Daga & Greathouse, HiPC 2015). A row block is
// either many short rows whose entries together fit the block's shared-memory tile (CSR-stream: the block
// streams the products into shared memory with coalesced loads, then 1..32 threads per row reduce them, so a
// few medium rows get a warp each) or a single long row that the whole block reduces (CSR-vector-L).
// Deterministic: no atomics.
#include <algorithm>

#include "device_formats.hpp"
#include "device_utils.cuh"
#include "kernel_factories.hpp"

namespace spcg {
namespace {

struct CsrAdaptiveTuning {
  static constexpr int threads = 256;
  static constexpr int tile_entries = 1024;  // shared-memory products per row block (8 KiB)
  static constexpr int max_rows = threads;   // every row of a block gets at least one thread
};

template <int W>
__device__ __forceinline__ void stream_rows(int first_row, int rows_in_block, const int* __restrict__ row_ptr,
                                            const double* s_prod, int tile_base, double alpha, double beta,
                                            double* __restrict__ y, int ld) {
  const int group = threadIdx.x / W, lane = threadIdx.x & (W - 1);
  const bool active = group < rows_in_block;
  double sum = 0;
  if (active) {
    const int row = first_row + group;
    const int b = row_ptr[row] - tile_base, e = row_ptr[row + 1] - tile_base;
    for (int p = b + lane; p < e; p += W) sum += s_prod[p];
  }
  sum = dev::warp_sum<W>(sum);
  if (active && lane == 0) dev::store_y(y + int64_t(first_row + group) * ld, alpha, sum, beta);
}

__global__ void __launch_bounds__(CsrAdaptiveTuning::threads)
    csr_adaptive_kernel(const int* __restrict__ row_blocks, const int* __restrict__ row_ptr, const int* __restrict__ col,
                        const double* __restrict__ val, const double* __restrict__ x, int ld, double alpha, double beta,
                        double* __restrict__ y) {
  __shared__ double s_prod[CsrAdaptiveTuning::tile_entries];
  const int first = row_blocks[blockIdx.x], last = row_blocks[blockIdx.x + 1];
  const int rows_in_block = last - first;
  const int nz_begin = row_ptr[first], nz_end = row_ptr[last];
  if (rows_in_block == 1 && nz_end - nz_begin > CsrAdaptiveTuning::tile_entries) {
    // CSR-vector-L: one long row, the whole block strides it.
    double sum = 0;
    for (int p = nz_begin + threadIdx.x; p < nz_end; p += blockDim.x)
      sum += dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
    sum = dev::block_sum(sum);
    if (threadIdx.x == 0) dev::store_y(y + int64_t(first) * ld, alpha, sum, beta);
    return;
  }
  // CSR-stream: coalesced products into shared memory, then a power-of-two group of threads per row.
  for (int p = nz_begin + threadIdx.x; p < nz_end; p += blockDim.x)
    s_prod[p - nz_begin] = dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
  __syncthreads();
  int w = 1;
  while (w < 32 && (w * 2) * rows_in_block <= static_cast<int>(blockDim.x)) w *= 2;
  switch (w) {
    case 1: stream_rows<1>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 2: stream_rows<2>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 4: stream_rows<4>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 8: stream_rows<8>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 16: stream_rows<16>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    default: stream_rows<32>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
  }
}

// Greedy binning: extend the block while the entries fit the tile and there are threads for the rows.
std::vector<int32_t> make_row_blocks(const CsrMatrix& a) {
  std::vector<int32_t> blocks{0};
  int32_t first = 0;
  while (first < a.rows) {
    int32_t last = first;
    int64_t entries = 0;
    while (last < a.rows && last - first < CsrAdaptiveTuning::max_rows &&
           entries + a.row_length(last) <= CsrAdaptiveTuning::tile_entries) {
      entries += a.row_length(last);
      ++last;
    }
    if (last == first) ++last;  // a row longer than the tile gets a block of its own
    blocks.push_back(last);
    first = last;
  }
  return blocks;
}

class CsrAdaptive final : public SpmvOperator {
 public:
  CsrAdaptive(const CsrMatrix& a) : SpmvOperator(a) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<int32_t> blocks = make_row_blocks(a);
    info_.convert_ms = elapsed_ms(t0);
    info_.format = "csr+rowblocks";
    blocks_ = static_cast<int>(blocks.size()) - 1;
    info_.reason = std::to_string(blocks_) + " row blocks";
    csr_ = upload_csr(a, info_);
    row_blocks_ = DeviceArray<int32_t>(blocks, "CSR-adaptive row blocks");
    info_.device_bytes += static_cast<int64_t>(row_blocks_.bytes());
  }
  std::string name() const override { return "csr-adaptive"; }
  double bytes_per_apply(int k) const override { return (csr_bytes_model(rows_, nnz_, 1) + 4.0 * blocks_) * k; }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    csr_adaptive_kernel<<<blocks_, CsrAdaptiveTuning::threads, 0, s>>>(
        row_blocks_.data(), csr_.row_ptr.data(), csr_.col_idx.data(), csr_.values.data(), x, ld, alpha, beta, y);
    CHECK_LAUNCH("csr-adaptive");
  }

 private:
  DeviceCsr csr_;
  DeviceArray<int32_t> row_blocks_;
  int blocks_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_adaptive(const CsrMatrix& a, const OperatorOptions&) {
  return std::make_unique<CsrAdaptive>(a);
}

}  // namespace spcg
