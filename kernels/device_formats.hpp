#pragma once
// Device copies of the host layouts in sparse/formats.hpp. Uploading records its time and bytes in SetupInfo.
#include <chrono>

#include "kernels/device_array.hpp"
#include "sparse/formats.hpp"
#include "kernels/linear_operator.hpp"
#include "sparse/timing.hpp"

namespace spcg {

struct DeviceCsr {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  DeviceArray<int32_t> row_ptr, col_idx;
  DeviceArray<double> values;
};
struct DeviceCoo {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  DeviceArray<int32_t> row_idx, col_idx;
  DeviceArray<double> values;
};
struct DeviceEll {
  int32_t rows = 0, cols = 0, width = 0;
  DeviceArray<int32_t> col_idx;
  DeviceArray<double> values;
};
struct DeviceSell {
  int32_t rows = 0, cols = 0, slice_height = 32, slices = 0;
  DeviceArray<int64_t> slice_ptr;
  DeviceArray<int32_t> slice_width, perm, col_idx;
  DeviceArray<double> values;
  int64_t stored = 0;
};
struct DeviceDia {
  int32_t rows = 0, cols = 0, diagonals = 0;
  int32_t min_offset = 0, max_offset = 0;  // rows in [-min_offset, cols - max_offset) need no bounds test
  bool symmetric = false;                  // only offsets >= 0 stored; offset -o of row i is offset o of row i - o
  int64_t stride = 0;                      // diagonal d's values start at d * stride (rows, or rows padded)
  DeviceArray<int32_t> offsets;
  DeviceArray<double> values;
};

DeviceCsr upload_csr(const CsrMatrix& a, SetupInfo& info);
DeviceCoo upload_coo(const CooMatrix& c, SetupInfo& info);
DeviceEll upload_ell(const EllMatrix& e, SetupInfo& info);
DeviceSell upload_sell(const SellMatrix& s, SetupInfo& info);

}  // namespace spcg
