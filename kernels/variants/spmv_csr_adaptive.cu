// csr-adaptive: rows binned into row blocks at setup (Greathouse & Daga, "Efficient sparse matrix-vector
// multiplication on GPUs using the CSR storage format", SC 2014; Daga & Greathouse, HiPC 2015). A row block is
// either many short rows whose entries together fit the block's shared-memory tile (CSR-stream: the block
// streams the products into shared memory with coalesced loads, then 1..32 threads per row reduce them, so a
// few medium rows get a warp each) or a piece of at most `piece_entries` entries of one long row
// (CSR-vector-L, split as in Daga & Greathouse's CSR-Adaptive update: a 16k-entry row on one block was the
// critical path on power-law matrices). Pieces of one row leave block sums in a partials array; the last piece
// to finish (an arrival counter, not an atomic sum) adds them in piece order, so results are deterministic.
#include <algorithm>

#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/row_blocks.hpp"

namespace spcg {
namespace {

using CsrAdaptiveTuning = RowBlockTuning;

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
    csr_adaptive_kernel(const RowBlock* __restrict__ blocks, const LongRowSlot* __restrict__ slots,
                        double* __restrict__ partials, unsigned* __restrict__ arrivals, const int* __restrict__ row_ptr,
                        const int* __restrict__ col, const double* __restrict__ val, const double* __restrict__ x,
                        int ld, double alpha, double beta, double* __restrict__ y) {
  __shared__ double s_prod[CsrAdaptiveTuning::tile_entries];
  __shared__ bool s_last;
  const RowBlock rb = blocks[blockIdx.x];
  auto product = [&](int p) {
    return dev::load_stream(val + p) * dev::load_x(x + static_cast<int64_t>(dev::load_stream(col + p)) * ld);
  };
  if (rb.slot >= 0) {
    // CSR-vector-L on one piece of a long row.
    double sum = 0;
    constexpr int U = CsrAdaptiveTuning::unroll;
    int p = rb.nz_begin + threadIdx.x;
    for (; p + (U - 1) * int(blockDim.x) < rb.nz_end; p += U * blockDim.x) {
      double t[U];
#pragma unroll
      for (int u = 0; u < U; ++u) t[u] = product(p + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; ++u) sum += t[u];
    }
    for (; p < rb.nz_end; p += blockDim.x) sum += product(p);
    sum = dev::block_sum(sum);
    const LongRowSlot slot = slots[rb.slot];
    if (slot.pieces == 1) {
      if (threadIdx.x == 0) dev::store_y(y + int64_t(rb.first) * ld, alpha, sum, beta);
      return;
    }
    if (threadIdx.x == 0) {
      partials[slot.partial_offset + rb.piece] = sum;
      __threadfence();
      s_last = atomicAdd(arrivals + rb.slot, 1u) == unsigned(slot.pieces - 1);
      if (s_last) {
        __threadfence();
        double total = 0;
        for (int q = 0; q < slot.pieces; ++q) total += __ldcg(partials + slot.partial_offset + q);
        dev::store_y(y + int64_t(rb.first) * ld, alpha, total, beta);
        arrivals[rb.slot] = 0;
      }
    }
    return;
  }
  // CSR-stream: coalesced products into shared memory, then a power-of-two group of threads per row.
  const int rows_in_block = rb.last - rb.first;
#pragma unroll 4
  for (int p = rb.nz_begin + threadIdx.x; p < rb.nz_end; p += blockDim.x) s_prod[p - rb.nz_begin] = product(p);
  __syncthreads();
  int w = 1;
  while (w < 32 && (w * 2) * rows_in_block <= static_cast<int>(blockDim.x)) w *= 2;
  const int first = rb.first, nz_begin = rb.nz_begin;
  switch (w) {
    case 1: stream_rows<1>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 2: stream_rows<2>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 4: stream_rows<4>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 8: stream_rows<8>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    case 16: stream_rows<16>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
    default: stream_rows<32>(first, rows_in_block, row_ptr, s_prod, nz_begin, alpha, beta, y, ld); break;
  }
}

class CsrAdaptive final : public SpmvOperator {
 public:
  CsrAdaptive(const MatrixSetup& m) : SpmvOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    const RowBinning bins = make_row_blocks(a.row_ptr.data(), a.rows);
    info_.convert_ms = ms_since(t0);
    info_.format = "csr+rowblocks";
    blocks_ = static_cast<int>(bins.blocks.size());
    info_.reason = std::to_string(blocks_) + " row blocks, " + std::to_string(bins.slots.size()) + " long rows in " +
                   std::to_string(bins.partials) + " pieces";
    csr_ = shared_csr(m, info_);
    blocks_dev_ = DeviceArray<RowBlock>(bins.blocks, "CSR-adaptive row blocks");
    slots_ = DeviceArray<LongRowSlot>(bins.slots, "CSR-adaptive long rows");
    partials_ = DeviceArray<double>(std::max(1, bins.partials), "CSR-adaptive piece sums");
    arrivals_ = DeviceArray<unsigned>(std::max<size_t>(1, bins.slots.size()), "CSR-adaptive arrivals");
    arrivals_.zero();
    info_.device_bytes += static_cast<int64_t>(blocks_dev_.bytes() + slots_.bytes() + partials_.bytes() + arrivals_.bytes());
  }
  std::string name() const override { return "csr-adaptive"; }
  double bytes_per_apply(int k) const override {
    return (csr_bytes_model(rows_, nnz_, 1) + double(sizeof(RowBlock)) * blocks_) * k;
  }

 protected:
  void apply_column(double alpha, const double* x, double beta, double* y, int ld, cudaStream_t s) const override {
    csr_adaptive_kernel<<<blocks_, CsrAdaptiveTuning::threads, 0, s>>>(
        blocks_dev_.data(), slots_.data(), const_cast<double*>(partials_.data()), const_cast<unsigned*>(arrivals_.data()),
        csr_->row_ptr.data(), csr_->col_idx.data(), csr_->values.data(), x, ld, alpha, beta, y);
    CHECK_LAUNCH("csr-adaptive");
  }

 private:
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<RowBlock> blocks_dev_;
  DeviceArray<LongRowSlot> slots_;
  DeviceArray<double> partials_;
  DeviceArray<unsigned> arrivals_;
  int blocks_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_adaptive(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrAdaptive>(m);
}

}  // namespace spcg
