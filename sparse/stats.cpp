#include "stats.hpp"

#include <algorithm>
#include <cmath>

namespace spcg {

MatrixStats compute_stats(const CsrMatrix& a, int64_t duplicates_summed) {
  MatrixStats s;
  s.rows = a.rows;
  s.cols = a.cols;
  s.nnz = a.nnz();
  s.square = a.rows == a.cols;
  s.duplicates_summed = duplicates_summed;
  if (a.rows == 0) {
    s.pattern_symmetric = s.numerically_symmetric = s.square;
    s.diagonal_positive = true;
    return s;
  }
  s.row_min = a.row_length(0);
  double sum = 0, sum_sq = 0;
  std::vector<uint8_t> diag_seen(static_cast<size_t>(a.rows) + a.cols, 0);
  for (int32_t i = 0; i < a.rows; ++i) {
    const int32_t len = a.row_length(i);
    s.row_min = std::min(s.row_min, len);
    s.row_max = std::max(s.row_max, len);
    sum += len;
    sum_sq += double(len) * len;
    s.empty_rows += len == 0;
    const int bucket = len == 0 ? 0 : 1 + static_cast<int>(std::floor(std::log2(double(len))));
    if (static_cast<int>(s.histogram.size()) <= bucket)
      for (int b = static_cast<int>(s.histogram.size()); b <= bucket; ++b)
        s.histogram.push_back({b == 0 ? 0 : (int64_t{1} << (b - 1)), b == 0 ? 0 : (int64_t{1} << b) - 1, 0});
    ++s.histogram[bucket].rows;
    double diag = 0, off = 0;
    bool has_diag = false;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t j = a.col_idx[p];
      const double v = a.values[p];
      s.max_abs_value = std::max(s.max_abs_value, std::abs(v));
      s.explicit_zeros += v == 0.0;
      const int64_t off_ij = int64_t{j} - i;
      s.bandwidth = std::max<int64_t>(s.bandwidth, std::abs(off_ij));
      uint8_t& seen = diag_seen[static_cast<size_t>(off_ij + a.rows - 1)];
      s.distinct_diagonals += !seen;
      seen = 1;
      if (j == i) diag = v, has_diag = true;
      else off += std::abs(v);
    }
    s.missing_diagonal += !has_diag;
    if (!(has_diag && diag > 0) && s.nonpositive_diagonal++ == 0) s.first_nonpositive_row = i, s.first_nonpositive_value = diag;
    s.diagonally_dominant_rows += std::abs(diag) >= off;
    s.strictly_dominant_rows += std::abs(diag) > off;
  }
  s.row_mean = sum / a.rows;
  s.row_stddev = std::sqrt(std::max(0.0, sum_sq / a.rows - s.row_mean * s.row_mean));
  s.diagonal_positive = s.square && s.nonpositive_diagonal == 0;
  s.ell_fill = s.nnz ? double(a.rows) * s.row_max / double(s.nnz) : 0;
  s.dia_fill = s.nnz ? double(a.rows) * double(s.distinct_diagonals) / double(s.nnz) : 0;

  // Symmetry: look up (j, i) for every (i, j) by binary search in row j (columns are sorted).
  s.pattern_symmetric = s.numerically_symmetric = s.square;
  if (s.square) {
    for (int32_t i = 0; i < a.rows; ++i)
      for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
        const int32_t j = a.col_idx[p];
        if (j == i) continue;  // both triangles: catches entries whose partner is missing on either side
        const int32_t* b = a.col_idx.data() + a.row_ptr[j];
        const int32_t* e = a.col_idx.data() + a.row_ptr[j + 1];
        const int32_t* f = std::lower_bound(b, e, i);
        const double vij = a.values[p];
        double vji = 0;
        if (f == e || *f != i) {
          s.pattern_symmetric = false;  // a missing partner is a numerical asymmetry unless vij is 0
        } else {
          vji = a.values[f - a.col_idx.data()];
        }
        const double scale = std::max(std::abs(vij), std::abs(vji));
        if (scale > 0) s.max_asymmetry = std::max(s.max_asymmetry, std::abs(vij - vji) / scale);
      }
    s.numerically_symmetric = s.max_asymmetry <= 1e-12;
  }
  return s;
}

}  // namespace spcg
