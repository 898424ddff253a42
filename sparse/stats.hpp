#pragma once
// Matrix statistics: what auto-selection, the CLI's `info` and the solver's input checks read.
#include <cstdint>
#include <string>
#include <vector>

#include "csr_matrix.hpp"

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
};

MatrixStats compute_stats(const CsrMatrix& a, int64_t duplicates_summed = 0);

}  // namespace spcg
