#include "spcg/stats.hpp"

#include <algorithm>
#include <cmath>

#include "sparse/parallel.hpp"

namespace spcg {
namespace {

// Lower-triangle entries seen and upper ones whose mirror was found, for the one-sided symmetry check.
struct SymmetryCounts {
  int64_t lower_entries = 0, matched_upper = 0;
};

// Adds the rows [lo, hi) to t. With both_triangles false, symmetry is checked from the upper triangle only;
// the caller then compares the counts (compute_stats).
void scan_rows(const CsrMatrix& a, int32_t lo, int32_t hi, bool both_triangles, uint8_t* diagonal_seen,
               StatsTotals& out, SymmetryCounts& sym_out) {
  // Accumulated in locals and stored once: the totals of neighbouring ranges share cache lines.
  StatsTotals t;
  SymmetryCounts sym;
  const bool square = a.rows == a.cols;
  for (int32_t i = lo; i < hi; ++i) {
    const int64_t len = a.row_length(i);
    t.row_min = std::min(t.row_min, len);
    t.row_max = std::max(t.row_max, len);
    t.length_sum += len;
    t.length_sum_sq += len * len;
    t.empty_rows += len == 0;
    ++t.histogram[length_bucket(len)];
    double diag = 0, off = 0;
    bool has_diag = false;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t j = a.col_idx[p];
      const double v = a.values[p];
      t.non_finite += !std::isfinite(v);
      t.max_abs_value = std::max(t.max_abs_value, std::abs(v));
      t.explicit_zeros += v == 0.0;
      const int64_t off_ij = int64_t{j} - i;
      t.bandwidth = std::max<int64_t>(t.bandwidth, std::abs(off_ij));
      uint8_t* seen = diagonal_seen + (off_ij + a.rows - 1);
      if (!__atomic_load_n(seen, __ATOMIC_RELAXED)) __atomic_store_n(seen, uint8_t{1}, __ATOMIC_RELAXED);
      if (j == i) {
        diag = v, has_diag = true;
        continue;
      }
      off += std::abs(v);
      if (!square) continue;
      // Symmetry: look up (j, i) by binary search in row j (columns are sorted). From the upper triangle
      // only, unless asked: when every upper entry has its mirror and the triangles hold as many entries,
      // the mirrors are the whole lower triangle.
      if (j < i && !both_triangles) {
        ++sym.lower_entries;
        continue;
      }
      const int32_t* rb = a.col_idx.data() + a.row_ptr[j];
      const int32_t* re = a.col_idx.data() + a.row_ptr[j + 1];
      const int32_t* f = std::lower_bound(rb, re, i);
      double vji = 0;
      if (f == re || *f != i) t.pattern_symmetric = false;  // a missing mirror is a numerical asymmetry unless v is 0
      else vji = a.values[f - a.col_idx.data()], sym.matched_upper += j > i;
      const double scale = std::max(std::abs(v), std::abs(vji));
      if (scale > 0) t.max_asymmetry = std::max(t.max_asymmetry, std::abs(v - vji) / scale);
    }
    t.missing_diagonal += !has_diag;
    if (!(has_diag && diag > 0) && t.nonpositive_diagonal++ == 0) t.first_nonpositive_row = i, t.first_nonpositive_value = diag;
    t.dominant += std::abs(diag) >= off;
    t.strictly_dominant += std::abs(diag) > off;
  }
  out = t, sym_out = sym;
}

// Merges b (rows after a's) into a.
void merge(StatsTotals& a, const StatsTotals& b) {
  a.row_min = std::min(a.row_min, b.row_min);
  a.row_max = std::max(a.row_max, b.row_max);
  a.length_sum += b.length_sum, a.length_sum_sq += b.length_sum_sq;
  for (int k = 0; k < StatsTotals::kBuckets; ++k) a.histogram[k] += b.histogram[k];
  a.empty_rows += b.empty_rows;
  a.bandwidth = std::max(a.bandwidth, b.bandwidth);
  a.missing_diagonal += b.missing_diagonal;
  if (a.nonpositive_diagonal == 0 && b.nonpositive_diagonal > 0)
    a.first_nonpositive_row = b.first_nonpositive_row, a.first_nonpositive_value = b.first_nonpositive_value;
  a.nonpositive_diagonal += b.nonpositive_diagonal;
  a.dominant += b.dominant, a.strictly_dominant += b.strictly_dominant;
  a.explicit_zeros += b.explicit_zeros, a.non_finite += b.non_finite;
  a.max_abs_value = std::max(a.max_abs_value, b.max_abs_value);
  a.max_asymmetry = std::max(a.max_asymmetry, b.max_asymmetry);
  a.pattern_symmetric = a.pattern_symmetric && b.pattern_symmetric;
}

}  // namespace

MatrixStats finish_stats(const StatsTotals& t, int32_t rows, int32_t cols, int64_t nnz, int64_t duplicates_summed) {
  MatrixStats s;
  s.rows = rows, s.cols = cols, s.nnz = nnz;
  s.square = rows == cols;
  s.duplicates_summed = duplicates_summed;
  if (rows == 0) {
    s.pattern_symmetric = s.numerically_symmetric = s.square;
    s.diagonal_positive = true;
    return s;
  }
  s.row_min = static_cast<int32_t>(t.row_min);
  s.row_max = static_cast<int32_t>(t.row_max);
  int last = 0;
  for (int k = 0; k < StatsTotals::kBuckets; ++k)
    if (t.histogram[k]) last = k;
  for (int k = 0; k <= last; ++k)
    s.histogram.push_back({k == 0 ? 0 : (int64_t{1} << (k - 1)), k == 0 ? 0 : (int64_t{1} << k) - 1, t.histogram[k]});
  s.empty_rows = t.empty_rows;
  s.bandwidth = t.bandwidth;
  s.distinct_diagonals = t.distinct_diagonals;
  s.missing_diagonal = t.missing_diagonal;
  s.nonpositive_diagonal = t.nonpositive_diagonal;
  s.first_nonpositive_row = static_cast<int32_t>(t.first_nonpositive_row);
  s.first_nonpositive_value = t.first_nonpositive_value;
  s.diagonally_dominant_rows = t.dominant;
  s.strictly_dominant_rows = t.strictly_dominant;
  s.explicit_zeros = t.explicit_zeros;
  s.non_finite_values = t.non_finite;
  s.max_abs_value = t.max_abs_value;
  s.max_asymmetry = t.max_asymmetry;
  s.row_mean = double(t.length_sum) / rows;
  s.row_stddev = std::sqrt(std::max(0.0, double(t.length_sum_sq) / rows - s.row_mean * s.row_mean));
  s.diagonal_positive = s.square && s.nonpositive_diagonal == 0;
  s.ell_fill = nnz ? double(rows) * s.row_max / double(nnz) : 0;
  s.dia_fill = nnz ? double(rows) * double(s.distinct_diagonals) / double(nnz) : 0;
  s.pattern_symmetric = s.square && t.pattern_symmetric;
  s.numerically_symmetric = s.square && s.max_asymmetry <= 1e-12;
  return s;
}

MatrixStats compute_stats(const CsrMatrix& a, int64_t duplicates_summed, int threads) {
  StatsTotals total;
  if (a.rows > 0) {
    // Rows cut into ranges of about equal entries, a few per thread, merged in range order.
    const int workers = resolve_threads(threads);
    const int64_t parts = std::min<int64_t>(a.rows, int64_t{workers} * 4);
    std::vector<int32_t> bounds(static_cast<size_t>(parts) + 1, a.rows);
    bounds[0] = 0;
    for (int64_t t = 1; t < parts; ++t)
      bounds[t] = std::max(bounds[t - 1], static_cast<int32_t>(std::lower_bound(a.row_ptr.begin(), a.row_ptr.end(),
                                                                                even_split(a.nnz(), parts, t)) -
                                                               a.row_ptr.begin()));
    HostVector<uint8_t> diagonal_seen(static_cast<size_t>(a.rows) + a.cols, 0);
    std::vector<StatsTotals> part;
    auto scan = [&](bool both_triangles) {
      part.assign(static_cast<size_t>(parts), StatsTotals{});
      std::vector<SymmetryCounts> sym(static_cast<size_t>(parts));
      parallel_for(parts, workers, [&](int64_t t) {
        scan_rows(a, bounds[t], bounds[t + 1], both_triangles, diagonal_seen.data(), part[t], sym[t]);
      });
      SymmetryCounts all;
      for (const auto& c : sym) all.lower_entries += c.lower_entries, all.matched_upper += c.matched_upper;
      return all;
    };
    const SymmetryCounts one_sided = scan(false);
    bool found = true;
    for (const auto& p : part) found &= p.pattern_symmetric;
    if (a.rows == a.cols && (!found || one_sided.lower_entries != one_sided.matched_upper)) scan(true);
    for (const auto& p : part) merge(total, p);
    std::vector<int64_t> seen_count(static_cast<size_t>(parts), 0);
    parallel_for(parts, workers, [&](int64_t t) {
      const int64_t lo = even_split(static_cast<int64_t>(diagonal_seen.size()), parts, t);
      const int64_t hi = even_split(static_cast<int64_t>(diagonal_seen.size()), parts, t + 1);
      seen_count[t] = std::count(diagonal_seen.begin() + lo, diagonal_seen.begin() + hi, uint8_t{1});
    });
    for (int64_t c : seen_count) total.distinct_diagonals += c;
  }
  return finish_stats(total, a.rows, a.cols, a.nnz(), duplicates_summed);
}

}  // namespace spcg
