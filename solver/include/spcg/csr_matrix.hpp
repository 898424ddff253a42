#pragma once
// Host-side sparse and dense containers: int32 row and column indices (what the GPU kernels use), 64-bit row
// offsets, double values.
#include <cstdint>
#include <string>
#include <vector>

#include "spcg/host_memory.hpp"

namespace spcg {

// Where a row's entries begin: 64-bit, since one rank of a system held by several GPUs may hold more than 2^31
// entries (rows and columns stay int32: 4 of CSR's 12 bytes an entry). The device copy narrows them to int32
// wherever the entries fit (device_formats.hpp: DeviceCsr), which is every one-GPU matrix.
using RowOffset = int64_t;

// Compressed sparse row matrix: row i holds entries [row_ptr[i], row_ptr[i+1]) with sorted columns.
struct CsrMatrix {
  int32_t rows = 0;
  int32_t cols = 0;
  HostVector<RowOffset> row_ptr{0};
  HostVector<int32_t> col_idx;
  HostVector<double> values;

  int64_t nnz() const { return static_cast<int64_t>(col_idx.size()); }
  int32_t row_length(int32_t i) const { return static_cast<int32_t>(row_ptr[i + 1] - row_ptr[i]); }
  // Throws spcg::Error naming the first violation: row_ptr size/monotonicity, column range, column order,
  // duplicate columns, non-finite values. `what` names the matrix in the message.
  void validate(const std::string& what = "matrix") const;
};

// Dense n x k block, row-major (entry (i, j) at data[i * cols + j]) so one row's k values are contiguous,
// which is the layout the SpMM kernels gather from. Vectors are blocks with cols == 1.
struct DenseBlock {
  int32_t rows = 0;
  int32_t cols = 0;
  HostVector<double> data;

  DenseBlock() = default;
  DenseBlock(int32_t r, int32_t c, double fill = 0.0)
      : rows(r), cols(c), data(static_cast<size_t>(r) * static_cast<size_t>(c), fill) {}
  double& at(int32_t i, int32_t j) { return data[static_cast<size_t>(i) * cols + j]; }
  double at(int32_t i, int32_t j) const { return data[static_cast<size_t>(i) * cols + j]; }
};

// The row offsets as int32 (cuSPARSE's and the CSR kernels' offsets), for a matrix whose entries fit int32;
// spcg::Error otherwise.
HostVector<int32_t> row_offsets32(const CsrMatrix& a);

// Builds a CSR matrix from unsorted triplets: sorts rows and columns, sums duplicates (count returned
// through *duplicates_summed), keeps explicit zeros. Indices must already be in range.
CsrMatrix csr_from_triplets(int32_t rows, int32_t cols, const std::vector<int32_t>& ti,
                            const std::vector<int32_t>& tj, const std::vector<double>& tv,
                            int64_t* duplicates_summed = nullptr);

// Pattern/numerical transpose.
CsrMatrix transpose(const CsrMatrix& a);

// Y = alpha * A * X + beta * Y, accumulated in long double (the reference the GPU kernels are held to).
// beta == 0 never reads Y (NaN-poisoned Y stays out of the result).
void reference_spmm(const CsrMatrix& a, double alpha, const DenseBlock& x, double beta, DenseBlock& y);

// ||b - A x|| / ||b|| per column (||b - A x|| where b's column is zero), in long double: a host check of a
// solution.
std::vector<double> relative_residuals(const CsrMatrix& a, const DenseBlock& x, const DenseBlock& b);

}  // namespace spcg
