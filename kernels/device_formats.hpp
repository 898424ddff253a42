#pragma once
// Device copies of the host layouts in sparse/formats.hpp. Uploading records its time and bytes in SetupInfo.
#include <chrono>
#include <limits>
#include <string>

#include "kernels/device_array.hpp"
#include "sparse/formats.hpp"
#include "kernels/linear_operator.hpp"
#include "sparse/timing.hpp"

namespace spcg {

struct DeviceCsr {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  // Row offsets: int32 where the entries fit (every one-GPU matrix; what the CSR kernels read), else 64-bit in
  // wide_row_ptr with row_ptr empty (a rank's share past 2^31 entries: only the setup's statistics, its DIA
  // layout and the diagonal read those; every operator that reads CSR refuses it, require_narrow).
  DeviceArray<int32_t> row_ptr;
  DeviceArray<int64_t> wide_row_ptr;
  DeviceArray<int32_t> col_idx;
  DeviceArray<double> values;
  bool wide() const { return wide_row_ptr.size() > 0; }
  // FormatRefused naming `reader` when the offsets are 64-bit.
  void require_narrow(const std::string& reader) const;
};

// f(offsets) with the row offsets as stored (const int32_t* or const int64_t*): a kernel templated on the offset
// type reads either.
template <class F>
decltype(auto) with_row_offsets(const DeviceCsr& a, F&& f) {
  if (a.wide()) return f(static_cast<const int64_t*>(a.wide_row_ptr.data()));
  return f(static_cast<const int32_t*>(a.row_ptr.data()));
}

// A CSR's 64-bit host offsets as the device stores them (d.nnz set): int32 where the entries fit, else as they are
// (or as they are anyway with force_wide: the tests' small matrices through the wide kernels).
void upload_row_offsets(DeviceCsr& d, const HostVector<RowOffset>& row_ptr, const char* what, bool force_wide = false);
// Its offsets back on the host.
HostVector<RowOffset> download_row_offsets(const DeviceCsr& d);
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
