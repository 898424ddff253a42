#pragma once
// Matrix statistics: what auto-selection, the CLI's `info` and the solver's input checks read.
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg {

struct MatrixStats {
  int32_t rows = 0, cols = 0;
  int64_t nnz = 0;
  int32_t row_min = 0, row_max = 0;
  double row_mean = 0, row_stddev = 0;
  // Row-length histogram: bucket b counts rows with length in [lo_b, hi_b] (0, 1, 2-3, 4-7, ...).
  struct Bucket { int64_t lo, hi, rows; };
  std::vector<Bucket> histogram;
  int64_t empty_rows = 0;
  int64_t bandwidth = 0;              // max |i - j| over stored entries
  int64_t distinct_diagonals = 0;     // number of distinct offsets j - i
  bool square = false;
  bool pattern_symmetric = false;
  bool numerically_symmetric = false;  // |a_ij - a_ji| <= 1e-12 * max(|a_ij|, |a_ji|) for all pairs
  double max_asymmetry = 0;            // max |a_ij - a_ji| / max(|a_ij|, |a_ji|)
  int64_t missing_diagonal = 0;        // rows with no stored diagonal entry
  int64_t nonpositive_diagonal = 0;    // rows whose diagonal is <= 0 (missing counts)
  int32_t first_nonpositive_row = -1;  // 0-based; -1 when every diagonal is positive
  double first_nonpositive_value = 0;  // its diagonal (0 when missing)
  bool diagonal_positive = false;
  int64_t diagonally_dominant_rows = 0;         // |a_ii| >= sum_{j!=i} |a_ij|
  int64_t strictly_dominant_rows = 0;           // |a_ii| >  sum_{j!=i} |a_ij|
  int64_t explicit_zeros = 0;
  int64_t duplicates_summed = 0;       // from the reader; 0 for generated matrices
  double ell_fill = 0;                 // rows * max_row / nnz: padded ELL storage over nnz
  double dia_fill = 0;                 // rows * diagonals / nnz: DIA storage over nnz
  double max_abs_value = 0;
  int64_t non_finite_values = 0;       // NaN or Inf entries (the reader refuses them; arrays given directly may hold them)
};

// What a pass over the rows adds up, before the statistics are derived from it: integer counts and sums (exact
// on any thread count, on the host or the device) and maxima. compute_stats (host) and the device statistics
// (kernels/setup) both fill one and call finish_stats, so they agree to the bit.
struct StatsTotals {
  static constexpr int kBuckets = 33;  // row lengths 0, 1, 2-3, ..., [2^31, 2^32)
  int64_t row_min = INT64_MAX, row_max = 0, length_sum = 0, length_sum_sq = 0;
  int64_t histogram[kBuckets] = {};
  int64_t empty_rows = 0, bandwidth = 0, missing_diagonal = 0, nonpositive_diagonal = 0;
  int64_t first_nonpositive_row = -1;  // lowest such row, -1 when none
  double first_nonpositive_value = 0;
  int64_t dominant = 0, strictly_dominant = 0, explicit_zeros = 0, non_finite = 0;
  int64_t distinct_diagonals = 0;
  double max_abs_value = 0, max_asymmetry = 0;
  bool pattern_symmetric = true;
};
// Histogram bucket of a row length: 0 for empty rows, else 1 + floor(log2(length)).
inline int length_bucket(int64_t len) { return len == 0 ? 0 : 64 - __builtin_clzll(static_cast<uint64_t>(len)); }
MatrixStats finish_stats(const StatsTotals& t, int32_t rows, int32_t cols, int64_t nnz, int64_t duplicates_summed);

// On `threads` threads (0: every hardware thread); the result is the same on every thread count.
MatrixStats compute_stats(const CsrMatrix& a, int64_t duplicates_summed = 0, int threads = 0);

}  // namespace spcg
