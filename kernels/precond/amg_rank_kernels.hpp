#pragma once
// The device half of AMG's levels over ranks (solver/amg_ranks.cpp): a rank's CSR pieces joined, stacked, split by
// column owner and packed into fixed-width rows for the halo exchange, so that the distributed prolongator and
// Galerkin product run on the one-GPU row-wise product (kernels/precond/amg_kernels.hpp) over a rank's rows and
// the rows its halo brings.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_formats.hpp"
#include "kernels/halo_product.hpp"

namespace spcg {

// A CSR of `rows` rows x `cols` columns from the rows that hold entries (ids increasing; their CSR over them):
// the distributed operator's compressed halo block as a whole one.
DeviceCsr expand_rows(int32_t rows, int32_t cols, int32_t held, const int32_t* ids, const int32_t* row_ptr,
                      const int32_t* col_idx, const double* values, cudaStream_t s);
// [local | halo]: a rank's rows with its halo block's columns (halo slots) after its own, n x (n + halo.cols).
DeviceCsr join_columns(const DeviceCsr& local, const DeviceCsr& halo, cudaStream_t s);
// top's rows, then bottom's (both of top.cols columns).
DeviceCsr stack_rows(const DeviceCsr& top, const DeviceCsr& bottom, cudaStream_t s);
// m with every column c as c + offset, of `cols` columns.
DeviceCsr shift_columns(const DeviceCsr& m, int32_t offset, int32_t cols, cudaStream_t s);

// The longest of rows[0..count) of m (0 when count is 0).
int32_t longest_row(const DeviceCsr& m, const int32_t* rows, int64_t count, cudaStream_t s);
// rows[0..count) of m as fixed-width rows of `width` (column, value) pairs, row-major: out[j * 2 width + 2 e] the
// column as a double (exact below 2^53; -1 past the row's end), out[j * 2 width + 2 e + 1] its value. The halo
// exchange moves them as it moves a block of 2 width columns.
void pack_rows(const DeviceCsr& m, const int32_t* rows, int64_t count, int32_t width, double* out, cudaStream_t s);
// The CSR of `rows` rows packed as pack_rows writes them, of `cols` columns.
DeviceCsr unpack_rows(const double* packed, int32_t rows, int32_t width, int32_t cols, cudaStream_t s);

// m's entries split by column owner: a column in [own_begin, own_begin + own_count) goes to `local` as
// c - own_begin (own_count columns); any other to `halo` as its slot, the index of c in halo_columns (sorted,
// halo_count of them, device memory), or as c - (own_begin + own_count) when halo_columns is null; with keep_halo
// false those entries are dropped. `unmatched` counts entries kept for the halo whose column has no slot.
struct ColumnSplit {
  DeviceCsr local, halo;
  int64_t unmatched = 0;
};
ColumnSplit split_columns(const DeviceCsr& m, int64_t own_begin, int32_t own_count, const int64_t* halo_columns,
                          int32_t halo_count, bool keep_halo, cudaStream_t s);

// The distinct columns of m outside [own_begin, own_begin + own_count), sorted: a level's halo columns.
DeviceArray<int64_t> columns_outside(const DeviceCsr& m, int64_t own_begin, int32_t own_count, cudaStream_t s);

// A level's pieces as sums over the ranks (AMG's whole coarse levels, gathered on every rank): each rank places its
// rows in arrays of the whole level, zero elsewhere, so that the sum is every rank's pieces side by side (x + 0 = x
// exactly). place_row_lengths: m's row lengths at [first_row, first_row + m.rows) of lengths. place_entries: m's
// columns at [at, at + m.nnz) of entries[0..total) and its values at the same places of entries[total..2 total).
void place_row_lengths(const DeviceCsr& m, int64_t first_row, double* lengths, cudaStream_t s);
void place_entries(const DeviceCsr& m, int64_t at, int64_t total, double* entries, cudaStream_t s);
// The CSR of `rows` x `cols` the summed pieces make (their row lengths, their columns then values).
DeviceCsr csr_from_placed(const double* lengths, const double* entries, int32_t rows, int32_t cols, cudaStream_t s);

// m's rows that hold entries (kernels/halo_product.hpp's CompressedRows).
CompressedRows compress_rows(const DeviceCsr& m, cudaStream_t s);

}  // namespace spcg
