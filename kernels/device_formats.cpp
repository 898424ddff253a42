#include "kernels/device_formats.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "sparse/parallel.hpp"

namespace spcg {

namespace {
template <class T, class Alloc>
DeviceArray<T> up(const std::vector<T, Alloc>& h, const char* what, SetupInfo& info) {
  DeviceArray<T> d(h, what);
  info.device_bytes += static_cast<int64_t>(d.bytes());
  return d;
}
}  // namespace

void DeviceCsr::require_narrow(const std::string& reader) const {
  if (wide())
    throw FormatRefused(reader + " refused: " + std::to_string(nnz) + " entries, more than its 32-bit row offsets address");
}

void upload_row_offsets(DeviceCsr& d, const HostVector<RowOffset>& row_ptr, const char* what, bool force_wide) {
  if (force_wide || d.nnz > std::numeric_limits<int32_t>::max()) {
    d.row_ptr = DeviceArray<int32_t>();
    d.wide_row_ptr = DeviceArray<int64_t>(row_ptr, what);
    return;
  }
  // narrowed on every core: this pass sits in every setup's upload (8M rows: ~15 ms on one thread)
  HostVector<int32_t> narrow(row_ptr.size());
  const int64_t n = static_cast<int64_t>(row_ptr.size());
  const int64_t parts = n >= (int64_t{1} << 20) ? 4 * int64_t{hardware_threads()} : 1;
  parallel_for(parts, hardware_threads(), [&](int64_t t) {
    for (int64_t i = even_split(n, parts, t); i < even_split(n, parts, t + 1); ++i) narrow[i] = static_cast<int32_t>(row_ptr[i]);
  });
  d.wide_row_ptr = DeviceArray<int64_t>();
  d.row_ptr = DeviceArray<int32_t>(narrow, what);
}

HostVector<RowOffset> download_row_offsets(const DeviceCsr& d) {
  if (d.wide()) return d.wide_row_ptr.download<HostVector<RowOffset>>();
  const HostVector<int32_t> narrow = d.row_ptr.download<HostVector<int32_t>>();
  return HostVector<RowOffset>(narrow.begin(), narrow.end());
}

DeviceCsr upload_csr(const CsrMatrix& a, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceCsr d;
  d.rows = a.rows, d.cols = a.cols, d.nnz = a.nnz();
  upload_row_offsets(d, a.row_ptr, "CSR row pointers");
  info.device_bytes += static_cast<int64_t>(d.row_ptr.bytes() + d.wide_row_ptr.bytes());
  d.col_idx = up(a.col_idx, "CSR column indices", info);
  d.values = up(a.values, "CSR values", info);
  info.upload_ms += ms_since(t0);
  return d;
}

DeviceCoo upload_coo(const CooMatrix& c, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceCoo d;
  d.rows = c.rows, d.cols = c.cols, d.nnz = static_cast<int64_t>(c.values.size());
  d.row_idx = up(c.row_idx, "COO row indices", info);
  d.col_idx = up(c.col_idx, "COO column indices", info);
  d.values = up(c.values, "COO values", info);
  info.upload_ms += ms_since(t0);
  return d;
}

DeviceEll upload_ell(const EllMatrix& e, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceEll d;
  d.rows = e.rows, d.cols = e.cols, d.width = e.width;
  d.col_idx = up(e.col_idx, "ELL column indices", info);
  d.values = up(e.values, "ELL values", info);
  info.upload_ms += ms_since(t0);
  return d;
}

DeviceSell upload_sell(const SellMatrix& s, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceSell d;
  d.rows = s.rows, d.cols = s.cols, d.slice_height = s.slice_height;
  d.slices = static_cast<int32_t>(s.slice_width.size());
  d.slice_ptr = up(s.slice_ptr, "SELL slice pointers", info);
  d.slice_width = up(s.slice_width, "SELL slice widths", info);
  d.perm = up(s.perm, "SELL permutation", info);
  d.col_idx = up(s.col_idx, "SELL column indices", info);
  d.values = up(s.values, "SELL values", info);
  d.stored = s.stored();
  info.upload_ms += ms_since(t0);
  return d;
}

}  // namespace spcg
