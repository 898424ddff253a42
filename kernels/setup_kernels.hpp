#pragma once
// Setup on the device, from the device CSR (kernels/setup_kernels.cu): the statistics auto-selection and the
// input checks read, and the DIA, SELL and ELL layouts, so a large matrix is uploaded once and never walked
// on the host again. Each result equals its host counterpart (sparse/stats.cpp, sparse/formats.cpp) exactly.
#include <cuda_runtime.h>

#include <memory>

#include "kernels/device_array.hpp"
#include "kernels/device_formats.hpp"
#include "spcg/stats.hpp"

namespace spcg {

// The statistics' totals of a device CSR (rows x cols), computed in one pass over its rows (a second when the
// one-sided symmetry check finds unmatched entries, as on the host). `diagonal_seen` (rows + cols bytes) is
// left holding 1 for every occupied diagonal offset (index offset + rows - 1): what the DIA build reads.
StatsTotals device_stats_totals(const DeviceCsr& a, DeviceArray<uint8_t>& diagonal_seen, cudaStream_t s = 0);

// The DIA layout of a (diagonals at the occupied offsets of `diagonal_seen`, `diagonals` of them), each
// diagonal's values at d * stride (stride = rows rounded up to stride_multiple, zero padded). With
// allow_symmetric and a matrix whose diagonals mirror exactly (dia_is_symmetric), only the offsets >= 0 are
// kept and `symmetric` is set. Fails nothing: the caller checks the fill and diagonal limits first.
DeviceDia device_dia(const DeviceCsr& a, const DeviceArray<uint8_t>& diagonal_seen, int64_t diagonals,
                     bool allow_symmetric, int stride_multiple, cudaStream_t s = 0);

// to[i] = from[i] for n row offsets that fit in 32 bits (the upload's narrowing, on the device).
void narrow_row_offsets(const int64_t* from, int32_t* to, int64_t n, cudaStream_t s = 0);

// The first index where the device arrays a and b (n entries each) differ, or -1 where they are equal: the
// pattern check of new values given on the device (Solver::update_values), with no copy to the host.
int64_t first_difference(const int32_t* a, const int32_t* b, int64_t n, cudaStream_t s = 0);

// SELL-32-1 (rows in order, slices of 32 rows padded to their longest row; refused past max_fill as
// csr_to_sell refuses) and column-major ELL of width `width` (the longest row; the caller checks the fill), as
// csr_to_sell / csr_to_ell lay them out.
DeviceSell device_sell32(const DeviceCsr& a, double max_fill, cudaStream_t s = 0);
DeviceEll device_ell(const DeviceCsr& a, int32_t width, cudaStream_t s = 0);

// HYB as csr_to_hyb lays it out: the width by cusp's rule (hyb_width_from_lengths over the row lengths counted
// here, the longest `row_max`), the first `width` entries of every row as ELL, the rest in COO, row by row.
struct DeviceHyb {
  DeviceEll ell;
  DeviceCoo coo;
};
DeviceHyb device_hyb(const DeviceCsr& a, int32_t row_max, cudaStream_t s = 0);

// The FP32-values kernels' copy of a layout's values: out[i] = in[i] rounded to the nearest float (one pass;
// the stream waits for it).
DeviceArray<float> device_to_float(const DeviceArray<double>& in, const char* what, cudaStream_t s = 0);

}  // namespace spcg
