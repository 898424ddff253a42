#pragma once
// A matrix on its way to operators; the registry's factories take one. It holds the host CSR, the device CSR
// (uploaded once and shared by every operator built from it), the statistics (computed on the device) and
// the device layouts that several kernels share (DIA). Each is made on first use, timed and kept, so auto's
// candidates, the SpMM kernels of block CG and the persistent CG's CSR view cost one upload and one pass.
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "kernels/device_formats.hpp"
#include "spcg/stats.hpp"

namespace spcg {

// What the setup spent, by phase (the report's upload / statistics / conversion lines).
struct SetupTimes {
  double upload_ms = 0;      // host -> device CSR
  double statistics_ms = 0;  // device statistics
  double conversion_ms = 0;  // device layouts built here (DIA)
};

class MatrixSetup;
// The shared device CSR of m, for an operator that reads plain CSR: records the format and the bytes in info.
std::shared_ptr<const DeviceCsr> shared_csr(const MatrixSetup& m, SetupInfo& info);
// The shared DIA layout of m for a DIA kernel (MatrixSetup::dia's arguments): records the conversion time,
// the format (dia-N, or dia-sym-KofN when the upper half of N diagonals is kept) and the bytes in info.
std::shared_ptr<const DeviceDia> shared_dia(const MatrixSetup& m, const std::string& kernel, double max_fill,
                                            int max_diagonals, bool allow_symmetric, int stride_multiple,
                                            SetupInfo& info);

class MatrixSetup {
 public:
  // From a host CSR, held by reference: it must outlive the setup (not the operators built from it). A
  // temporary is refused at compile time; make_operator(name, CsrMatrix) builds from a setup of its own.
  explicit MatrixSetup(const CsrMatrix& host, int64_t duplicates_summed = 0);
  MatrixSetup(const CsrMatrix&& host, int64_t duplicates_summed = 0) = delete;
  // From a CSR already on the device (the library's device input): the host copy is downloaded only when a
  // layout built on the host asks for it.
  explicit MatrixSetup(std::shared_ptr<const DeviceCsr> device, int64_t duplicates_summed = 0);
  // Both at once (an update's new values: the host CSR, and the device CSR made of the kept pattern and the
  // values uploaded alone): the device CSR must hold the host CSR's arrays. The host copy is held by reference, as
  // above, so that a let-go device CSR can be uploaded again.
  MatrixSetup(const CsrMatrix& host, std::shared_ptr<const DeviceCsr> device, int64_t duplicates_summed = 0);
  MatrixSetup(const CsrMatrix&& host, std::shared_ptr<const DeviceCsr> device, int64_t duplicates_summed = 0) = delete;
  ~MatrixSetup();
  MatrixSetup(const MatrixSetup&) = delete;
  MatrixSetup& operator=(const MatrixSetup&) = delete;

  int32_t rows() const { return rows_; }
  int32_t cols() const { return cols_; }
  int64_t nnz() const { return nnz_; }
  const CsrMatrix& host() const;
  const std::shared_ptr<const DeviceCsr>& device_csr() const;
  const MatrixStats& stats() const;
  // The DIA layout (shared by the DIA kernels that ask for the same storage), built on the device. Throws
  // FormatRefused, naming `kernel`, past max_fill stored slots per nonzero or max_diagonals diagonals.
  std::shared_ptr<const DeviceDia> dia(const std::string& kernel, double max_fill, int max_diagonals,
                                       bool allow_symmetric, int stride_multiple = 1) const;
  const SetupTimes& times() const { return times_; }
  // After a solver's setup: lets go of the device CSR and the DIA layouts that no operator or preconditioner
  // holds (they hold what they read), so that a solve keeps only what it reads (a rank's memory per row decides
  // the largest job it can take). A host input only (a device input's CSR is the host copy's source); a later
  // call that needs one makes it again. Returns the device bytes let go.
  size_t release_unheld() const;

 private:
  const CsrMatrix* host_;
  mutable std::unique_ptr<CsrMatrix> downloaded_;  // device input: the host copy, made on first use
  int32_t rows_, cols_;
  int64_t nnz_;
  int64_t duplicates_summed_;
  mutable std::unique_ptr<PinnedUploader> uploader_;  // keeps the host CSR locked while the setup holds it
  mutable std::shared_ptr<const DeviceCsr> device_;
  mutable std::unique_ptr<MatrixStats> stats_;
  mutable DeviceArray<uint8_t> diagonal_seen_;  // from the statistics: occupied diagonal offsets
  mutable std::map<std::tuple<bool, int64_t>, std::shared_ptr<const DeviceDia>> dia_;  // (symmetric half, stride)
  mutable SetupTimes times_;
};

}  // namespace spcg
