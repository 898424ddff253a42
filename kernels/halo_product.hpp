#pragma once
// The halo block of a rank's rows, compressed to the rows that hold halo entries, and its product
// (kernels/halo_product.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/device_array.hpp"
#include "kernels/linear_operator.hpp"

namespace spcg {

// Device arrays (owned by the caller): rows row_ids[0..rows) of the local block, CSR over those rows with
// columns that are halo slots.
struct HaloRows {
  int32_t rows = 0;
  const int32_t* row_ids = nullptr;
  const int32_t* row_ptr = nullptr;  // rows + 1
  const int32_t* cols = nullptr;
  const double* values = nullptr;
};

// The same arrays owned: a halo block's rows that hold entries, their indices and a CSR over them.
struct CompressedRows {
  int32_t rows = 0;
  DeviceArray<int32_t> ids, row_ptr, cols;
  DeviceArray<double> values;
  HaloRows view() const { return {rows, ids.data(), row_ptr.data(), cols.data(), values.data()}; }
};

// mask[row_ids[i]] = 1 for the held rows (mask: the rank's rows, zeroed by the caller): the rows a fused smoothing
// step leaves apart (kernels/linear_operator.hpp's FusedSmoothing).
void launch_mark_rows(const HaloRows& h, uint8_t* mask, cudaStream_t s);

// y[row_ids[i], :] += alpha * H(i, :) x_halo for the n x k blocks. sink (k = 1): *sink->result +=
// sum_i x_local[row_ids[i]] * (alpha H x_halo)_i, deterministic.
void launch_halo_product(const HaloRows& h, int k, const double* x_halo, double alpha, double* y, const double* x_local,
                         const DotSink* sink, cudaStream_t s);

}  // namespace spcg
