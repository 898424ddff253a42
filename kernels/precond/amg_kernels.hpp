#pragma once
// The device half of smoothed-aggregation AMG's setup (solver/amg.cpp runs it level by level): the diagonal,
// the strength graph, the distance-2 maximal independent set and the aggregates (the rule of
// sparse/aggregation.cpp, bit for bit), the tentative prolongator, the row-wise products (smoothing, A P,
// R (A P)), the transpose, cuSPARSE SpGEMM (for a product too wide for ours) and the dense copy of the coarsest
// level.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "kernels/device_formats.hpp"

namespace spcg {

// d[i] = a_ii (0 when row i stores no diagonal entry).
void launch_diagonal(const DeviceCsr& a, double* d, cudaStream_t s);
// What inverse_diagonal found: the first row (0-based) whose diagonal is not positive (INT32_MAX: none) and
// the smallest and largest diagonal entry (when all are positive).
struct DiagonalSummary {
  int32_t first_nonpositive = INT32_MAX;
  double first_value = 0;  // that row's diagonal
  double min = 0, max = 0;
};
// dinv[i] = 1 / a_ii in one pass (no library call: a few microseconds on small matrices), with the summary;
// `diagonal` (when not null) takes a_ii in the same pass.
DiagonalSummary inverse_diagonal(const DeviceCsr& a, double* dinv, cudaStream_t s, double* diagonal = nullptr);
// l1[i] = 1 / (a_ii + sum_{j != i} |a_ij|): the l1-Jacobi smoother's scaling (Baker, Falgout, Kolev & Yang
// 2011), convergent for every SPD A without an eigenvalue estimate. Requires a_ii > 0.
void launch_l1_inverse(const DeviceCsr& a, double* l1, cudaStream_t s);

// Strong connections j != i, |a_ij| >= theta sqrt(|a_ii a_jj|), a_ij != 0: the pattern only (values empty).
DeviceCsr strength_graph(const DeviceCsr& a, const double* diag, double theta, cudaStream_t s);

struct DeviceAggregates {
  DeviceArray<int32_t> of;  // of[i]: row i's aggregate
  int32_t count = 0;
  int mis_rounds = 0;  // rounds of the independent-set iteration
};
// Distance-2 MIS with hashed priorities, then aggregates from its roots (numbered in index order), exactly as
// aggregate() in sparse/aggregation.cpp. Throws Error if a node stays unassigned (graph not symmetric).
DeviceAggregates aggregate_on_device(const DeviceCsr& graph, uint64_t seed, cudaStream_t s);

// The tentative prolongator: n x count, P(i, of[i]) = 1 / sqrt(size of i's aggregate).
DeviceCsr tentative_prolongator(const DeviceAggregates& agg, int32_t rows, cudaStream_t s);
// The row-wise product kernel's shape (amg_kernels.cu): G lanes per row of C, G from the mean products per row
// (a 7-point P0 smoothing has 8, A P 30-60, a 3D R (A P) several hundred). Each row's hash table has 16 G slots
// (a warp's tables: 2 KB of keys for every G), so at most 8 G distinct columns: a row past that sends the
// product to G = 32 (256 columns), and past that to cuSPARSE.
struct RowProductTuning {
  static constexpr int kWarpsPerBlock = 4;
  static constexpr int kSlotsPerLane = 16;
  static constexpr int kMaxColumns = 8 * 32;  // at G = 32
  static constexpr int kHashBits(int g) { return g == 4 ? 6 : g == 8 ? 7 : g == 16 ? 8 : 9; }
  static constexpr int group_lanes(double mean_products) {
    return mean_products <= 16 ? 4 : mean_products <= 48 ? 8 : mean_products <= 96 ? 16 : 32;
  }
};
// C = diag(s0 * dinv) A B + E (dinv null: s0 A B; E null: no term), a group of lanes per row: each row's distinct
// columns (at most 256) in a shared-memory hash, summed in the row's order (the same bits for the same input)
// and written sorted. A row with more columns makes the whole product cuSPARSE's (then the scaling and E), and
// sets *by_cusparse. For AMG: the smoothed prolongator P0 - omega D^-1 A P0 (s0 = -omega, E = P0), each further
// smoothing step, and both Galerkin products A P and R (A P).
//
// The product's shape depends on the patterns alone, and `shape` (when given) learns it a step at a time. An
// empty one (lanes 0: a setup) receives the row offsets and the lanes a row took. One with offsets (an update's
// new values) skips the counting pass and the scan -- the fill pass alone -- and receives the columns it found.
// One with columns too makes the values alone (no hash, each product summed into its kept column). Every step
// writes the bits a whole product would. The columns are kept only where memory is plentiful (a saving, not a
// need: room_to_keep). A product by cuSPARSE's fallback leaves the shape empty: it is made whole again next time.
struct RowProductShape {
  std::shared_ptr<const DeviceArray<int32_t>> row_ptr;  // rows + 1 offsets
  std::shared_ptr<const DeviceArray<int32_t>> col_idx;  // nnz columns, sorted in each row (learned by an update)
  int lanes = 0;
  int64_t nnz = 0;
};
DeviceCsr row_product(const DeviceCsr& a, const DeviceCsr& b, const DeviceCsr* e, const double* dinv, double s0,
                      cudaStream_t s, bool* by_cusparse = nullptr, RowProductShape* shape = nullptr);

// A transpose's pattern-made part: its entry k is A's entry order[k], and its offsets and columns.
struct TransposeShape {
  std::shared_ptr<const DeviceArray<int32_t>> order, row_ptr, col_idx;
};
// A' (columns sorted in every row; a stable sort, so the same input gives the same bits). `shape` (when given):
// an empty one learns the transpose's shape (where memory is plentiful); a learned one, on the same
// pattern, makes A' by gathering the new values through it (the same bits: a transpose only moves values).
DeviceCsr transpose(const DeviceCsr& a, cudaStream_t s, TransposeShape* shape = nullptr);
// C = A B by cuSPARSE SpGEMM (deterministic algorithm; cuSPARSE is loaded on first use).
DeviceCsr spgemm(const DeviceCsr& a, const DeviceCsr& b, cudaStream_t s);

// out (rows x rows, column-major) = the dense copy of a square CSR.
void launch_csr_to_dense(const DeviceCsr& a, double* out, cudaStream_t s);
// Z (n x k, row-major) = M (n x n, row-major, symmetric) R (n x k, row-major): the coarsest level's solve with
// its explicit inverse. One warp per row; fixed summation order.
void launch_dense_apply(int32_t n, int k, const double* m, const double* r, double* z, cudaStream_t s);

// A CSR of rows x cols with room for nnz entries (offsets, columns and values unwritten).
DeviceCsr empty_csr(int32_t rows, int32_t cols, int64_t nnz, const char* what);
// A CSR of `rows` x `cols` whose row i holds count[i] entries (device counts): the offsets scanned, the columns and
// values allocated for a fill pass to write. Error past 32-bit offsets.
DeviceCsr csr_from_counts(const int32_t* count, int32_t rows, int32_t cols, const char* what, cudaStream_t s);

// Host copy of a device CSR (small levels: the coarsest factorisation, tests).
CsrMatrix download_csr(const DeviceCsr& a);
// Device copy of a host CSR (tests).
std::shared_ptr<DeviceCsr> upload_csr_shared(const CsrMatrix& a);

}  // namespace spcg
