#pragma once
// CG for small systems in one cooperative launch: launch latency, not bandwidth, bounds a CG iteration on a
// matrix of a few thousand rows (three graph-replayed kernels cost ~12 us; the data sit in L2). This header is
// the persistent CG's one home: its size limits, the tables it reads (PersistentCgMatrix owns them) and its
// launch.
#include <cuda_runtime.h>

#include <memory>

#include "kernels/device_array.hpp"
#include "kernels/device_formats.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/solver_ops/cg_ops.hpp"

namespace spcg {

class MatrixSetup;

// Systems the persistent CG takes: beyond these, bandwidth dominates and the graph path is faster.
struct PersistentCgLimits {
  static constexpr int32_t max_rows = 65536;
  static constexpr int64_t max_nnz = 4 << 20;
};

// What the kernel reads: A's CSR arrays on the device and the long-row tables built at setup. Long rows
// (chosen by persistent_cg_plan) are left to a second pass that splits each into pieces:
// long_pieces[i] = {row, begin, end, slot}, long_slots[s] = {first piece, pieces}. A dense row otherwise
// serialises one group of lanes for thousands of entries.
struct PersistentCgView {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  const int32_t* row_ptr = nullptr;
  const int32_t* col = nullptr;
  const double* val = nullptr;
  int32_t lanes_per_row = 0;  // the row-group width chosen at setup (0: from the mean row length)
  const int4* long_pieces = nullptr;
  int32_t long_piece_count = 0;
  const int2* long_slots = nullptr;
  int32_t long_slot_count = 0;
  const int32_t* long_slot_of_row = nullptr;  // rows entries: the row's slot, or -1 for a short row
  explicit operator bool() const { return row_ptr != nullptr; }
};

// The persistent CG's layout of A: the shared device CSR and the long-row tables, owned together.
class PersistentCgMatrix {
 public:
  // Null when A exceeds PersistentCgLimits (or is not square).
  static std::unique_ptr<PersistentCgMatrix> make(const MatrixSetup& a);
  PersistentCgView view() const;
  int64_t device_bytes() const;  // the tables (the CSR is the setup's)

 private:
  std::shared_ptr<const DeviceCsr> csr_;
  DeviceArray<int4> long_pieces_;
  DeviceArray<int2> long_slots_;
  DeviceArray<int32_t> long_slot_of_row_;
  int32_t lanes_per_row_ = 0;
};

struct PersistentCgProblem {
  PersistentCgView a;            // square
  const double* dinv = nullptr;  // Jacobi: inverse diagonal, or null
  const double* b = nullptr;
  double* x = nullptr;
  // r, p and q = A p, double-buffered by iteration parity: iteration i gathers i-1's while it writes its own
  double* r[2] = {nullptr, nullptr};
  double* p[2] = {nullptr, nullptr};
  double* q[2] = {nullptr, nullptr};
  double* partials = nullptr;    // persistent_cg_partials(a, jacobi) doubles
  unsigned int* barrier = nullptr;  // grid barrier counter (zeroed by the launcher before each launch)
  CgScalars* state = nullptr;    // tol2, max_iterations, history in; iteration, rr, rz, alpha, beta, status, done out
};

// Setup-time choices from the host CSR row pointer (rows + 1 entries): PersistentCgView::lanes_per_row, and
// long_row_entries: rows longer than this are left to whole warps, in pieces of kPersistentCgPieceEntries
// (PersistentCgMatrix::make builds the pieces with these numbers).
struct PersistentCgPlan {
  int32_t lanes_per_row = 1;
  int32_t long_row_entries = 0;
};
PersistentCgPlan persistent_cg_plan(const RowOffset* row_ptr, int32_t rows);  // entries that fit int32
constexpr int32_t kPersistentCgPieceEntries = 128;

// Whether the persistent path applies (small enough, device supports cooperative launch).
bool persistent_cg_suits(const PersistentCgView& a, bool jacobi);
// Grid size of the launch.
int persistent_cg_blocks(const PersistentCgView& a, bool jacobi);
// Doubles of PersistentCgProblem::partials (per-block sums and long-row piece sums, both double-buffered).
int64_t persistent_cg_partials(const PersistentCgView& a, bool jacobi);
// start: r = b - A x and the first residual first. Then at most `iterations` CG iterations; the state says where
// it stopped (status != running: converged, breakdown, non-finite, max iterations).
void launch_persistent_cg(const PersistentCgProblem& problem, bool start, int iterations, cudaStream_t stream);

}  // namespace spcg
