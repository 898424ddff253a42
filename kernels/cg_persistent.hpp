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
  double* r = nullptr;
  double* p[2] = {nullptr, nullptr};  // directions, double-buffered: p_new is formed while p_old is gathered
  double* partials = nullptr;    // 3 * persistent_cg_blocks(a) + a.long_piece_count doubles
  CgScalars* state = nullptr;    // tol2, max_iterations, history in; iteration, rr, rz, beta, status, done out
};

// Rows longer than this (16 trips of the row's lane group, at least 64 entries) are left to whole warps, in
// pieces of kPersistentCgPieceEntries: the owner of CsrView::long_pieces builds them with these numbers.
int32_t persistent_cg_long_row_threshold(int32_t rows, int64_t nnz);
constexpr int32_t kPersistentCgPieceEntries = 128;

// Whether the persistent path applies (small enough, device supports cooperative launch).
bool persistent_cg_suits(const CsrView& a, bool jacobi);
// Grid size of the launch (the partial sums need 3 per block).
int persistent_cg_blocks(const CsrView& a, bool jacobi);
// start: r = b - A x and the first residual first. Then at most `iterations` CG iterations; the state says where
// it stopped (status != running: converged, breakdown, non-finite, max iterations).
void launch_persistent_cg(const PersistentCgProblem& problem, bool start, int iterations, cudaStream_t stream);

}  // namespace spcg
