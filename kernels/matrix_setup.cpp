#include "kernels/matrix_setup.hpp"

#include <chrono>
#include <limits>

#include "sparse/formats.hpp"
#include "kernels/setup_kernels.hpp"

namespace spcg {

std::shared_ptr<const DeviceCsr> shared_csr(const MatrixSetup& m, SetupInfo& info) {
  const std::shared_ptr<const DeviceCsr>& c = m.device_csr();
  c->require_narrow("a CSR kernel");
  info.format = "csr";
  info.device_bytes += static_cast<int64_t>(c->row_ptr.bytes() + c->wide_row_ptr.bytes() + c->col_idx.bytes() + c->values.bytes());
  return c;
}

std::shared_ptr<const DeviceDia> shared_dia(const MatrixSetup& m, const std::string& kernel, double max_fill,
                                            int max_diagonals, bool allow_symmetric, int stride_multiple,
                                            SetupInfo& info) {
  // (the layout's conversion time is the setup's own, times().conversion_ms, where a layout shared by several
  // kernels is counted once; a kernel's info counts what it converts beyond it)
  std::shared_ptr<const DeviceDia> d = m.dia(kernel, max_fill, max_diagonals, allow_symmetric, stride_multiple);
  const std::string all = std::to_string(m.stats().distinct_diagonals);
  info.format = d->symmetric ? "dia-sym-" + std::to_string(d->diagonals) + "of" + all : "dia-" + all;
  info.device_bytes = static_cast<int64_t>(d->values.bytes() + d->offsets.bytes());
  return d;
}

MatrixSetup::MatrixSetup(const CsrMatrix& host, int64_t duplicates_summed)
    : host_(&host), rows_(host.rows), cols_(host.cols), nnz_(host.nnz()), duplicates_summed_(duplicates_summed) {}

MatrixSetup::MatrixSetup(std::shared_ptr<const DeviceCsr> device, int64_t duplicates_summed)
    : host_(nullptr), rows_(device->rows), cols_(device->cols), nnz_(device->nnz), duplicates_summed_(duplicates_summed),
      device_(std::move(device)) {}

MatrixSetup::MatrixSetup(const CsrMatrix& host, std::shared_ptr<const DeviceCsr> device, int64_t duplicates_summed)
    : host_(&host), rows_(host.rows), cols_(host.cols), nnz_(host.nnz()), duplicates_summed_(duplicates_summed),
      device_(std::move(device)) {
  if (device_->rows != rows_ || device_->cols != cols_ || device_->nnz != nnz_)
    throw Error("MatrixSetup: the device CSR is " + std::to_string(device_->rows) + " x " + std::to_string(device_->cols) +
                " with " + std::to_string(device_->nnz) + " entries, the host CSR " + std::to_string(rows_) + " x " +
                std::to_string(cols_) + " with " + std::to_string(nnz_));
}

MatrixSetup::~MatrixSetup() = default;

size_t MatrixSetup::release_unheld() const {
  if (!host_) return 0;
  size_t bytes = 0;
  if (device_ && device_.use_count() == 1) {
    bytes += device_->row_ptr.bytes() + device_->wide_row_ptr.bytes() + device_->col_idx.bytes() + device_->values.bytes();
    device_.reset();
  }
  for (auto it = dia_.begin(); it != dia_.end();) {
    if (it->second.use_count() == 1) {
      bytes += it->second->offsets.bytes() + it->second->values.bytes();
      it = dia_.erase(it);
    } else {
      ++it;
    }
  }
  return bytes;
}

const CsrMatrix& MatrixSetup::host() const {
  if (host_) return *host_;
  if (!downloaded_) {
    auto h = std::make_unique<CsrMatrix>();
    h->rows = rows_, h->cols = cols_;
    h->row_ptr = download_row_offsets(*device_);
    h->col_idx = device_->col_idx.download<HostVector<int32_t>>();
    h->values = device_->values.download<HostVector<double>>();
    downloaded_ = std::move(h);
  }
  return *downloaded_;
}

const std::shared_ptr<const DeviceCsr>& MatrixSetup::device_csr() const {
  if (!device_) {
    const CsrMatrix& host = *host_;
    const auto t0 = std::chrono::steady_clock::now();
    auto d = std::make_shared<DeviceCsr>();
    d->rows = host.rows, d->cols = host.cols, d->nnz = host.nnz();
    // The 64-bit row offsets go up as they are, beside the other arrays, and are narrowed on the device where
    // they fit: narrowed on the host, they took a host pass and a pageable copy of their own (poisson3d:200's
    // 8M rows: 3-6 ms and 3-5 ms, one H100 run)
    const bool narrow = d->nnz <= std::numeric_limits<int32_t>::max();
    DeviceArray<int64_t> offsets(host.row_ptr.size(), "CSR row pointers");
    d->col_idx = DeviceArray<int32_t>(host.col_idx.size(), "CSR column indices");
    d->values = DeviceArray<double>(host.values.size(), "CSR values");
    uploader_ = std::make_unique<PinnedUploader>();
    uploader_->copy(offsets.data(), host.row_ptr.data(), offsets.bytes());
    uploader_->copy(d->col_idx.data(), host.col_idx.data(), d->col_idx.bytes());
    uploader_->copy(d->values.data(), host.values.data(), d->values.bytes());
    uploader_->finish();
    if (narrow) {
      d->row_ptr = DeviceArray<int32_t>(offsets.size(), "CSR row pointers");
      narrow_row_offsets(offsets.data(), d->row_ptr.data(), static_cast<int64_t>(offsets.size()), cudaStreamLegacy);
      CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    } else {
      d->wide_row_ptr = std::move(offsets);
    }
    device_ = std::move(d);
    times_.upload_ms += ms_since(t0);
  }
  return device_;
}

const MatrixStats& MatrixSetup::stats() const {
  if (!stats_) {
    const DeviceCsr& a = *device_csr();
    const auto t0 = std::chrono::steady_clock::now();
    const StatsTotals totals = device_stats_totals(a, diagonal_seen_);
    stats_ = std::make_unique<MatrixStats>(finish_stats(totals, a.rows, a.cols, a.nnz, duplicates_summed_));
    times_.statistics_ms += ms_since(t0);
  }
  return *stats_;
}

std::shared_ptr<const DeviceDia> MatrixSetup::dia(const std::string& kernel, double max_fill, int max_diagonals,
                                                  bool allow_symmetric, int stride_multiple) const {
  const MatrixStats& st = stats();
  const double stored = double(st.rows) * double(st.distinct_diagonals);
  // csr_to_dia's refusal first (the fill), then the kernel's diagonal limit, with the host build's messages.
  check_format_fill("dia", stored, st.nnz, max_fill);
  if (st.distinct_diagonals > max_diagonals)
    throw FormatRefused(kernel + " refused: " + std::to_string(st.distinct_diagonals) + " diagonals (limit " +
                        std::to_string(max_diagonals) + ")");
  const int64_t stride = (int64_t{st.rows} + stride_multiple - 1) / stride_multiple * stride_multiple;
  auto& slot = dia_[{allow_symmetric, stride}];
  if (!slot) {
    const auto t0 = std::chrono::steady_clock::now();
    slot = std::make_shared<const DeviceDia>(
        device_dia(*device_csr(), diagonal_seen_, st.distinct_diagonals, allow_symmetric, stride_multiple));
    times_.conversion_ms += ms_since(t0);
  }
  return slot;
}

}  // namespace spcg
