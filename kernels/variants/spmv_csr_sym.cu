// csr-sym: SpMV on a symmetric matrix stored as its strict upper triangle plus the diagonal (CSR), the lower
// triangle applied as the transpose of the upper one: each stored a_ij (j > i) adds a_ij x_j to y_i (a gather,
// as in any CSR kernel) and a_ij x_i to y_j (an atomic add in L2). It streams 12 bytes per stored entry, so
// about half of what full CSR streams, and makes the same number of random accesses (half gathers, half
// atomic adds). Symmetric storage to halve SpMV bandwidth: Buluc, Williams, Oliker & Demmel, "Reduced-bandwidth
// multithreaded algorithms for sparse matrix-vector multiplication", IPDPS 2011 (on CPUs, with their own
// conflict-free blocking; on the GPU the L2's double-precision atomic adds resolve the conflicts).
// Work mapping: y is first scaled by beta (zeroed for beta = 0); then the row blocks of csr-adaptive
// (row_blocks.hpp), one per thread block. A block of short rows streams its entries coalesced into shared
// memory (product a_ij x_j, value, column), then 1..32 lanes per row sum the products and issue the row's
// scatters (x_i is one load per row); each row ends with one atomic add of alpha (sum + a_ii x_i). A long
// row's piece streams its entries with all threads, scatters as it goes and adds its block sum atomically, so
// pieces need no combine pass.
// Not deterministic: the atomic adds land in any order (the last bits of y vary run to run), so --deterministic
// refuses it. Setup refuses matrices that are not exactly symmetric.
// Measured (H100, docs/perf-notes.md): power-law 2M 249 us vs csr-adaptive 206 us and cuSPARSE 205 us; ncu: L2
// 87% busy, DRAM 26%. The random accesses, not the stream, bound these matrices, and an L2 atomic add costs
// more there than the stream and gather of an entry together. So it is not on auto's short list; it stays for
// what it stores: half the off-diagonal entries, for matrices near the GPU's memory size.
#include <algorithm>

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/kernel_factories.hpp"
#include "kernels/variants/row_blocks.hpp"

namespace spcg {
namespace {

using CsrSymTuning = RowBlockTuning;

struct SymTile {
  double prod[CsrSymTuning::tile_entries];  // a_ij x_j
  double val[CsrSymTuning::tile_entries];   // a_ij, for the scatter a_ij x_i
  int col[CsrSymTuning::tile_entries];
};

// y_j += alpha a_ij x_i for a stored entry, y_i += alpha (row sum) at the end of a row.
__device__ __forceinline__ void scatter_add(double* y, int64_t index, int ld, double v) { atomicAdd(y + index * ld, v); }

template <int W>
__device__ __forceinline__ void reduce_rows(int first_row, int rows_in_block, const int* __restrict__ row_ptr,
                                            const SymTile& tile, int tile_base, const double* __restrict__ diag,
                                            const double* __restrict__ x, int ld, double alpha, double* y) {
  const int group = threadIdx.x / W, lane = threadIdx.x & (W - 1);
  const bool active = group < rows_in_block;
  const int row = first_row + group;
  double sum = 0, xi = 0;
  if (active) {
    xi = dev::load_x(x + int64_t{row} * ld);
    const double axi = alpha * xi;
    const int b = row_ptr[row] - tile_base, e = row_ptr[row + 1] - tile_base;
    for (int p = b + lane; p < e; p += W) {
      sum += tile.prod[p];
      scatter_add(y, tile.col[p], ld, tile.val[p] * axi);
    }
  }
  sum = dev::warp_sum<W>(sum);
  if (active && lane == 0) scatter_add(y, row, ld, alpha * fma(diag[row], xi, sum));
}

__global__ void __launch_bounds__(CsrSymTuning::threads)
    csr_sym_kernel(const RowBlock* __restrict__ blocks, const int* __restrict__ row_ptr, const int* __restrict__ col,
                   const double* __restrict__ val, const double* __restrict__ diag, const double* __restrict__ x,
                   int ld, double alpha, double* y) {
  __shared__ SymTile tile;
  const RowBlock rb = blocks[blockIdx.x];
  if (rb.slot >= 0) {
    // One piece of a long row i: all threads stream its entries, gather x_j, scatter a_ij x_i.
    const int i = rb.first;
    const double xi = dev::load_x(x + int64_t{i} * ld), axi = alpha * xi;
    constexpr int U = CsrSymTuning::unroll;
    double sum = 0;
    int p = rb.nz_begin + threadIdx.x;
    for (; p + (U - 1) * int(blockDim.x) < rb.nz_end; p += U * blockDim.x) {
      double v[U];
      int c[U];
#pragma unroll
      for (int u = 0; u < U; ++u) v[u] = dev::load_stream(val + p + u * blockDim.x), c[u] = dev::load_stream(col + p + u * blockDim.x);
#pragma unroll
      for (int u = 0; u < U; ++u) {
        sum = fma(v[u], dev::load_x(x + int64_t{c[u]} * ld), sum);
        scatter_add(y, c[u], ld, v[u] * axi);
      }
    }
    for (; p < rb.nz_end; p += blockDim.x) {
      const double v = dev::load_stream(val + p);
      const int c = dev::load_stream(col + p);
      sum = fma(v, dev::load_x(x + int64_t{c} * ld), sum);
      scatter_add(y, c, ld, v * axi);
    }
    sum = dev::block_sum(sum);
    if (threadIdx.x == 0) scatter_add(y, i, ld, alpha * (rb.piece == 0 ? fma(diag[i], xi, sum) : sum));
    return;
  }
  // Short rows: coalesced loads and gathers into the tile, then a power-of-two group of lanes per row.
  const int rows_in_block = rb.last - rb.first;
#pragma unroll 4
  for (int p = rb.nz_begin + threadIdx.x; p < rb.nz_end; p += blockDim.x) {
    const double v = dev::load_stream(val + p);
    const int c = dev::load_stream(col + p);
    const int t = p - rb.nz_begin;
    tile.prod[t] = v * dev::load_x(x + int64_t{c} * ld);
    tile.val[t] = v;
    tile.col[t] = c;
  }
  __syncthreads();
  int w = 1;
  while (w < 32 && (w * 2) * rows_in_block <= static_cast<int>(blockDim.x)) w *= 2;
  const int first = rb.first, nz_begin = rb.nz_begin;
  switch (w) {
    case 1: reduce_rows<1>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
    case 2: reduce_rows<2>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
    case 4: reduce_rows<4>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
    case 8: reduce_rows<8>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
    case 16: reduce_rows<16>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
    default: reduce_rows<32>(first, rows_in_block, row_ptr, tile, nz_begin, diag, x, ld, alpha, y); break;
  }
}

class CsrSym final : public SpmvOperator {
 public:
  CsrSym(const MatrixSetup& m) : SpmvOperator(m) {
    const auto t0 = std::chrono::steady_clock::now();
    const CsrMatrix& a = m.host();
    const SymmetricCsr s = csr_to_symmetric(a);  // FormatRefused unless A == A' exactly
    const RowBinning bins = make_row_blocks(s.upper.row_ptr.data(), s.upper.rows);
    info_.convert_ms = ms_since(t0);
    upper_nnz_ = s.upper.nnz();
    info_.format = "csr-sym";
    blocks_ = static_cast<int>(bins.blocks.size());
    info_.reason = std::to_string(upper_nnz_) + " of " + std::to_string(a.nnz()) + " entries stored (strict upper), " +
                   std::to_string(blocks_) + " row blocks, " + std::to_string(bins.slots.size()) + " long rows";
    upper_ = upload_csr(s.upper, info_);
    const auto t1 = std::chrono::steady_clock::now();
    diag_ = DeviceArray<double>(s.diagonal, "csr-sym diagonal");
    blocks_dev_ = DeviceArray<RowBlock>(bins.blocks, "csr-sym row blocks");
    info_.upload_ms += ms_since(t1);
    info_.device_bytes += static_cast<int64_t>(diag_.bytes() + blocks_dev_.bytes());
  }
  std::string name() const override { return "csr-sym"; }
  bool deterministic() const override { return false; }
  // Per column: the upper CSR and the diagonal streamed once, x read, y zeroed (or scaled) and then written
  // back from L2 after the atomic adds; the gathers and atomics themselves stay in L2 when x and y fit.
  double bytes_per_apply(int k) const override {
    return (12.0 * double(upper_nnz_) + 4.0 * (rows_ + 1) + 8.0 * rows_ + 24.0 * rows_ +
            double(sizeof(RowBlock)) * blocks_) * k;
  }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    launch_scale(beta, y, static_cast<size_t>(rows_) * k, s);  // beta = 0 writes zeros, never reads y
    for (int j = 0; j < k; ++j) apply_column(alpha, x + j, 1.0, y + j, k, s);
  }
  // y += alpha A x for one column (y already scaled by beta in apply_impl).
  void apply_column(double alpha, const double* x, double, double* y, int ld, cudaStream_t s) const override {
    csr_sym_kernel<<<blocks_, CsrSymTuning::threads, 0, s>>>(blocks_dev_.data(), upper_.row_ptr.data(),
                                                             upper_.col_idx.data(), upper_.values.data(),
                                                             diag_.data(), x, ld, alpha, y);
    CHECK_LAUNCH("csr-sym");
  }

 private:
  DeviceCsr upper_;
  DeviceArray<double> diag_;
  DeviceArray<RowBlock> blocks_dev_;
  int64_t upper_nnz_ = 0;
  int blocks_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_csr_sym(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CsrSym>(m);
}

}  // namespace spcg
