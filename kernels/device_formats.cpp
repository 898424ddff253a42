#include "kernels/device_formats.hpp"

#include <algorithm>

namespace spcg {

namespace {
template <class T, class Alloc>
DeviceArray<T> up(const std::vector<T, Alloc>& h, const char* what, SetupInfo& info) {
  DeviceArray<T> d(h, what);
  info.device_bytes += static_cast<int64_t>(d.bytes());
  return d;
}
}  // namespace

DeviceCsr upload_csr(const CsrMatrix& a, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceCsr d;
  d.rows = a.rows, d.cols = a.cols, d.nnz = a.nnz();
  d.row_ptr = up(a.row_ptr, "CSR row pointers", info);
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
