#pragma once
// Rows cut into work items of at most max_entries entries, for the SpMM kernels that balance long rows
// (spmm-split, spmm-vector): item {row, begin, end, slot}; slot < 0 is a whole row (the kernel writes Y),
// slot >= 0 a piece of a split row (the kernel writes its raw partial row at partial[slot * K]), and combine()
// adds the pieces of every split row in piece order: no atomics, bitwise deterministic.
#include <cuda_runtime.h>

#include "kernels/device_array.hpp"
#include "spcg/csr_matrix.hpp"
#include "kernels/device_formats.hpp"
#include "kernels/matrix_setup.hpp"

namespace spcg {

struct RowPieces {
  DeviceArray<int4> work;
  DeviceArray<int3> split;      // {row, first slot, pieces}
  DeviceArray<double> partial;  // slots x max_columns
  int items = 0, split_rows = 0, slots = 0;

  RowPieces() = default;
  RowPieces(const CsrMatrix& a, int max_entries, int max_columns);
  // Y(split rows, 0:K) = alpha * (sum of their pieces) + beta * Y; Y has leading dimension ld.
  void combine(int K, int ld, double alpha, double beta, double* y, cudaStream_t s) const;
  int64_t bytes() const { return static_cast<int64_t>(work.bytes() + split.bytes() + partial.bytes()); }
};

// Setup of an operator on row pieces: uploads the CSR arrays into csr, cuts the rows, and records the
// conversion time, the format, the split count and the device bytes in info.
RowPieces setup_row_pieces(const MatrixSetup& m, int max_entries, int max_columns,
                           std::shared_ptr<const DeviceCsr>& csr, SetupInfo& info);

}  // namespace spcg
