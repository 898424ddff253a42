#pragma once
// A device CSR's rows in canonical order (kernels/csr_canonical.cu): the device half of spcg::is_canonical and
// spcg::canonical_copy (spcg/spcg.hpp).
#include <cuda_runtime.h>

#include <cstdint>

namespace spcg {

// Whether every row's columns increase strictly (sorted, no duplicates). One kernel and a flag read on s, which is
// synchronised (work queued on s before the call is complete when the kernel reads the arrays).
bool device_rows_canonical(const int32_t* row_ptr, const int32_t* col_idx, int32_t rows, cudaStream_t s);

// The rows sorted by column (stably) with each column's duplicates summed in their order, written to out_row_ptr
// (rows + 1), out_col_idx and out_values (room for nnz each); returns the entries kept. Synchronises s.
int64_t device_canonical_copy(const int32_t* row_ptr, const int32_t* col_idx, const double* values, int32_t rows,
                              int64_t nnz, int32_t* out_row_ptr, int32_t* out_col_idx, double* out_values,
                              cudaStream_t s);

}  // namespace spcg
