#include "device_formats.hpp"

#include <algorithm>

namespace spcg {

double elapsed_ms(const std::chrono::steady_clock::time_point& start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

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
  info.upload_ms += elapsed_ms(t0);
  return d;
}

DeviceCoo upload_coo(const CooMatrix& c, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceCoo d;
  d.rows = c.rows, d.cols = c.cols, d.nnz = static_cast<int64_t>(c.values.size());
  d.row_idx = up(c.row_idx, "COO row indices", info);
  d.col_idx = up(c.col_idx, "COO column indices", info);
  d.values = up(c.values, "COO values", info);
  info.upload_ms += elapsed_ms(t0);
  return d;
}

DeviceEll upload_ell(const EllMatrix& e, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceEll d;
  d.rows = e.rows, d.cols = e.cols, d.width = e.width;
  d.col_idx = up(e.col_idx, "ELL column indices", info);
  d.values = up(e.values, "ELL values", info);
  info.upload_ms += elapsed_ms(t0);
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
  info.upload_ms += elapsed_ms(t0);
  return d;
}

DeviceDia upload_dia(const DiaMatrix& m, SetupInfo& info, int stride_multiple) {
  const auto t0 = std::chrono::steady_clock::now();
  DeviceDia d;
  d.rows = m.rows, d.cols = m.cols, d.diagonals = static_cast<int32_t>(m.offsets.size());
  d.min_offset = m.offsets.empty() ? 0 : m.offsets.front();
  d.max_offset = m.offsets.empty() ? 0 : m.offsets.back();
  d.offsets = up(m.offsets, "DIA offsets", info);
  d.stride = (int64_t{m.rows} + stride_multiple - 1) / stride_multiple * stride_multiple;
  if (d.stride == m.rows) {
    d.values = up(m.values, "DIA values", info);
  } else {
    std::vector<double> padded(static_cast<size_t>(d.stride) * m.offsets.size(), 0.0);
    for (size_t k = 0; k < m.offsets.size(); ++k)
      std::copy_n(m.values.begin() + static_cast<int64_t>(k) * m.rows, m.rows,
                  padded.begin() + static_cast<int64_t>(k) * d.stride);
    d.values = up(padded, "DIA values", info);
  }
  info.upload_ms += elapsed_ms(t0);
  return d;
}

DeviceDia build_device_dia(const CsrMatrix& a, double max_fill, int max_diagonals, const std::string& kernel,
                           SetupInfo& info, bool allow_symmetric, int stride_multiple) {
  const auto t0 = std::chrono::steady_clock::now();
  DiaMatrix d = csr_to_dia(a, max_fill);
  if (static_cast<int>(d.offsets.size()) > max_diagonals)
    throw FormatRefused(kernel + " refused: " + std::to_string(d.offsets.size()) + " diagonals (limit " +
                        std::to_string(max_diagonals) + ")");
  const size_t all = d.offsets.size();
  const bool symmetric = allow_symmetric && dia_is_symmetric(d);
  if (symmetric) d = dia_upper_half(d);
  info.convert_ms = elapsed_ms(t0);
  info.format = symmetric ? "dia-sym-" + std::to_string(d.offsets.size()) + "of" + std::to_string(all)
                          : "dia-" + std::to_string(all);
  DeviceDia dev = upload_dia(d, info, stride_multiple);
  if (symmetric) dev.min_offset = -dev.max_offset, dev.symmetric = true;
  return dev;
}

}  // namespace spcg
