#pragma once
// CG for small systems in one cooperative launch: launch latency, not bandwidth, bounds a CG iteration on a
// matrix of a few thousand rows (three graph-replayed kernels cost ~12 us; the data sit in L2).
#include <cuda_runtime.h>

#include "linear_operator.hpp"
#include "vector_ops.hpp"

namespace spcg {

struct PersistentCgProblem {
  CsrView a;                     // square
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

// Setup-time choices from the host CSR row pointer (rows + 1 entries): CsrView::lanes_per_row, and
// long_row_entries: rows longer than this are left to whole warps, in pieces of kPersistentCgPieceEntries (the
// owner of CsrView::long_pieces builds them with these numbers).
struct PersistentCgPlan {
  int32_t lanes_per_row = 1;
  int32_t long_row_entries = 0;
};
PersistentCgPlan persistent_cg_plan(const int32_t* row_ptr, int32_t rows);
constexpr int32_t kPersistentCgPieceEntries = 128;

// Whether the persistent path applies (small enough, device supports cooperative launch).
bool persistent_cg_suits(const CsrView& a, bool jacobi);
// Grid size of the launch.
int persistent_cg_blocks(const CsrView& a, bool jacobi);
// Doubles of PersistentCgProblem::partials (per-block sums and long-row piece sums, both double-buffered).
int64_t persistent_cg_partials(const CsrView& a, bool jacobi);
// start: r = b - A x and the first residual first. Then at most `iterations` CG iterations; the state says where
// it stopped (status != running: converged, breakdown, non-finite, max iterations).
void launch_persistent_cg(const PersistentCgProblem& problem, bool start, int iterations, cudaStream_t stream);

}  // namespace spcg
