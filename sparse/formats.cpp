#include "sparse/formats.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

namespace spcg {
namespace {
std::string fmt(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", v);
  return b;
}
}  // namespace

void check_format_fill(const char* format, double stored, int64_t nnz, double max_fill) {
  const double fill = nnz ? stored / double(nnz) : (stored > 0 ? 1e30 : 1.0);
  if (fill > max_fill)
    throw FormatRefused(std::string(format) + " refused: storage would be " + fmt(fill) + "x the nonzeros (limit " +
                        fmt(max_fill) + "x)");
  if (stored > double(std::numeric_limits<int32_t>::max()) * 4)
    throw FormatRefused(std::string(format) + " refused: padded storage too large");
}

CooMatrix csr_to_coo(const CsrMatrix& a) {
  CooMatrix c;
  c.rows = a.rows, c.cols = a.cols;
  c.col_idx.assign(a.col_idx.begin(), a.col_idx.end());
  c.values.assign(a.values.begin(), a.values.end());
  c.row_idx.resize(a.col_idx.size());
  for (int32_t i = 0; i < a.rows; ++i)
    std::fill(c.row_idx.begin() + a.row_ptr[i], c.row_idx.begin() + a.row_ptr[i + 1], i);
  return c;
}

CsrMatrix coo_to_csr(const CooMatrix& c) { return csr_from_triplets(c.rows, c.cols, c.row_idx, c.col_idx, c.values); }

EllMatrix csr_to_ell(const CsrMatrix& a, double max_fill) {
  EllMatrix e;
  e.rows = a.rows, e.cols = a.cols;
  for (int32_t i = 0; i < a.rows; ++i) e.width = std::max(e.width, a.row_length(i));
  check_format_fill("ell", double(a.rows) * e.width, a.nnz(), max_fill);
  const size_t total = static_cast<size_t>(a.rows) * e.width;
  e.col_idx.assign(total, 0);
  e.values.assign(total, 0.0);
  e.row_length.resize(a.rows);
  for (int32_t i = 0; i < a.rows; ++i) {
    const int32_t b = a.row_ptr[i], len = a.row_length(i);
    e.row_length[i] = len;
    const int32_t pad_col = len ? a.col_idx[b + len - 1] : 0;
    for (int32_t k = 0; k < e.width; ++k) {
      const size_t at = static_cast<size_t>(k) * a.rows + i;
      e.col_idx[at] = k < len ? a.col_idx[b + k] : pad_col;
      e.values[at] = k < len ? a.values[b + k] : 0.0;
    }
  }
  return e;
}

CsrMatrix ell_to_csr(const EllMatrix& e) {
  CsrMatrix a;
  a.rows = e.rows, a.cols = e.cols;
  a.row_ptr.assign(static_cast<size_t>(e.rows) + 1, 0);
  for (int32_t i = 0; i < e.rows; ++i) {
    for (int32_t k = 0; k < e.row_length[i]; ++k) {
      const size_t at = static_cast<size_t>(k) * e.rows + i;
      a.col_idx.push_back(e.col_idx[at]);
      a.values.push_back(e.values[at]);
    }
    a.row_ptr[i + 1] = static_cast<int32_t>(a.col_idx.size());
  }
  return a;
}

SellMatrix csr_to_sell(const CsrMatrix& a, int32_t slice_height, int32_t sigma, double max_fill) {
  if (slice_height <= 0 || sigma <= 0) throw Error("sell: slice height and sigma must be positive");
  SellMatrix s;
  s.rows = a.rows, s.cols = a.cols, s.slice_height = slice_height, s.sigma = sigma;
  std::vector<int32_t> order(a.rows);
  std::iota(order.begin(), order.end(), 0);
  if (sigma > 1) {
    for (int64_t w = 0; w < a.rows; w += sigma) {
      auto b = order.begin() + w, e = order.begin() + std::min<int64_t>(a.rows, w + sigma);
      std::stable_sort(b, e, [&](int32_t x, int32_t y) { return a.row_length(x) > a.row_length(y); });
    }
    s.perm = order;
  }
  const int64_t slices = (int64_t{a.rows} + slice_height - 1) / slice_height;
  s.slice_ptr.assign(slices + 1, 0);
  s.slice_width.assign(slices, 0);
  for (int64_t sl = 0; sl < slices; ++sl) {
    int32_t w = 0;
    for (int64_t r = sl * slice_height; r < std::min<int64_t>(a.rows, (sl + 1) * slice_height); ++r)
      w = std::max(w, a.row_length(order[r]));
    s.slice_width[sl] = w;
    s.slice_ptr[sl + 1] = s.slice_ptr[sl] + int64_t{w} * slice_height;
  }
  check_format_fill("sell", double(s.slice_ptr[slices]), a.nnz(), max_fill);
  s.col_idx.assign(s.slice_ptr[slices], 0);
  s.values.assign(s.slice_ptr[slices], 0.0);
  s.row_length.assign(static_cast<size_t>(slices * slice_height), 0);
  for (int64_t sl = 0; sl < slices; ++sl)
    for (int32_t r = 0; r < slice_height; ++r) {
      const int64_t pos = sl * slice_height + r;
      const bool real = pos < a.rows;
      const int32_t row = real ? order[pos] : 0;
      const int32_t b = real ? a.row_ptr[row] : 0, len = real ? a.row_length(row) : 0;
      s.row_length[pos] = len;
      const int32_t pad_col = len ? a.col_idx[b + len - 1] : 0;
      for (int32_t k = 0; k < s.slice_width[sl]; ++k) {
        const int64_t at = s.slice_ptr[sl] + int64_t{k} * slice_height + r;
        s.col_idx[at] = k < len ? a.col_idx[b + k] : pad_col;
        s.values[at] = k < len ? a.values[b + k] : 0.0;
      }
    }
  return s;
}

CsrMatrix sell_to_csr(const SellMatrix& s) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  const int64_t slices = static_cast<int64_t>(s.slice_width.size());
  for (int64_t sl = 0; sl < slices; ++sl)
    for (int32_t r = 0; r < s.slice_height; ++r) {
      const int64_t pos = sl * s.slice_height + r;
      if (pos >= s.rows) break;
      const int32_t row = s.perm.empty() ? static_cast<int32_t>(pos) : s.perm[pos];
      for (int32_t k = 0; k < s.row_length[pos]; ++k) {
        const int64_t at = s.slice_ptr[sl] + int64_t{k} * s.slice_height + r;
        ti.push_back(row), tj.push_back(s.col_idx[at]), tv.push_back(s.values[at]);
      }
    }
  return csr_from_triplets(s.rows, s.cols, ti, tj, tv);
}

DiaMatrix csr_to_dia(const CsrMatrix& a, double max_fill) {
  DiaMatrix d;
  d.rows = a.rows, d.cols = a.cols;
  std::vector<uint8_t> seen(static_cast<size_t>(a.rows) + a.cols + 1, 0);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) seen[static_cast<size_t>(int64_t{a.col_idx[p]} - i + a.rows)] = 1;
  for (size_t o = 0; o < seen.size(); ++o)
    if (seen[o]) d.offsets.push_back(static_cast<int32_t>(int64_t(o) - a.rows));
  check_format_fill("dia", double(a.rows) * double(d.offsets.size()), a.nnz(), max_fill);
  std::vector<int32_t> slot(seen.size(), -1);
  for (size_t k = 0; k < d.offsets.size(); ++k) slot[static_cast<size_t>(int64_t{d.offsets[k]} + a.rows)] = static_cast<int32_t>(k);
  d.values.assign(static_cast<size_t>(a.rows) * d.offsets.size(), 0.0);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t k = slot[static_cast<size_t>(int64_t{a.col_idx[p]} - i + a.rows)];
      d.values[static_cast<size_t>(k) * a.rows + i] = a.values[p];
    }
  return d;
}

bool dia_is_symmetric(const DiaMatrix& d) {
  if (d.rows != d.cols) return false;
  const size_t m = d.offsets.size();
  for (size_t k = 0; k < m; ++k) {
    const int32_t o = d.offsets[k];
    if (o >= 0) break;
    const size_t up = m - 1 - k;  // offsets are increasing: -o sits at the mirrored position if the set is symmetric
    if (d.offsets[up] != -o) return false;
    // A(i, i + o) == A(i + o, i) for every row i >= -o
    for (int32_t i = -o; i < d.rows; ++i)
      if (d.values[k * d.rows + i] != d.values[up * d.rows + (i + o)]) return false;
  }
  size_t negative = 0, positive = 0;
  for (int32_t o : d.offsets) negative += o < 0, positive += o > 0;
  return negative == positive;
}

DiaMatrix dia_upper_half(const DiaMatrix& d) {
  DiaMatrix u;
  u.rows = d.rows, u.cols = d.cols;
  for (size_t k = 0; k < d.offsets.size(); ++k) {
    if (d.offsets[k] < 0) continue;
    u.offsets.push_back(d.offsets[k]);
    u.values.insert(u.values.end(), d.values.begin() + k * d.rows, d.values.begin() + (k + 1) * d.rows);
  }
  return u;
}

CsrMatrix dia_to_csr(const DiaMatrix& d) {
  CsrMatrix a;
  a.rows = d.rows, a.cols = d.cols;
  a.row_ptr.assign(static_cast<size_t>(d.rows) + 1, 0);
  for (int32_t i = 0; i < d.rows; ++i) {
    for (size_t k = 0; k < d.offsets.size(); ++k) {
      const int64_t j = int64_t{i} + d.offsets[k];
      const double v = d.values[k * d.rows + i];
      if (j < 0 || j >= d.cols || v == 0.0) continue;
      a.col_idx.push_back(static_cast<int32_t>(j));
      a.values.push_back(v);
    }
    a.row_ptr[i + 1] = static_cast<int32_t>(a.col_idx.size());
  }
  return a;
}

SymmetricCsr csr_to_symmetric(const CsrMatrix& a) {
  if (a.rows != a.cols)
    throw FormatRefused("symmetric CSR refused: matrix is " + std::to_string(a.rows) + " x " + std::to_string(a.cols));
  SymmetricCsr s;
  s.upper.rows = s.upper.cols = a.rows;
  s.upper.row_ptr.assign(static_cast<size_t>(a.rows) + 1, 0);
  s.diagonal.assign(static_cast<size_t>(a.rows), 0.0);
  // The strictly lower entries transposed: row c of `mirror` lists (i, A(i, c)) for i > c, in increasing i
  // because rows are visited in order. A is symmetric exactly when this equals the strict upper triangle.
  std::vector<int32_t> mirror_ptr(static_cast<size_t>(a.rows) + 1, 0);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t c = a.col_idx[p];
      if (c < i) ++mirror_ptr[c + 1];
      else if (c > i) ++s.upper.row_ptr[i + 1];
      else s.diagonal[i] = a.values[p];
    }
  for (int32_t i = 0; i < a.rows; ++i) {
    mirror_ptr[i + 1] += mirror_ptr[i];
    s.upper.row_ptr[i + 1] += s.upper.row_ptr[i];
  }
  if (!std::equal(mirror_ptr.begin(), mirror_ptr.end(), s.upper.row_ptr.begin(), s.upper.row_ptr.end()))
    throw FormatRefused("symmetric CSR refused: the sparsity pattern is not symmetric");
  std::vector<int32_t> mirror_col(static_cast<size_t>(mirror_ptr.back())), fill(mirror_ptr.begin(), mirror_ptr.end() - 1);
  std::vector<double> mirror_val(mirror_col.size());
  s.upper.col_idx.reserve(mirror_col.size());
  s.upper.values.reserve(mirror_col.size());
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t c = a.col_idx[p];
      if (c < i) {
        mirror_col[fill[c]] = i, mirror_val[fill[c]] = a.values[p];
        ++fill[c];
      } else if (c > i) {
        s.upper.col_idx.push_back(c), s.upper.values.push_back(a.values[p]);
      }
    }
  for (size_t q = 0; q < mirror_col.size(); ++q)
    if (mirror_col[q] != s.upper.col_idx[q] || mirror_val[q] != s.upper.values[q]) {
      const auto row = std::upper_bound(s.upper.row_ptr.begin(), s.upper.row_ptr.end(), static_cast<int32_t>(q)) -
                       s.upper.row_ptr.begin() - 1;
      throw FormatRefused("symmetric CSR refused: A(" + std::to_string(row) + ", " + std::to_string(s.upper.col_idx[q]) +
                          ") has no equal mirror entry");
    }
  return s;
}

CsrMatrix symmetric_to_csr(const SymmetricCsr& s) {
  const CsrMatrix& u = s.upper;
  CsrMatrix a;
  a.rows = a.cols = u.rows;
  a.row_ptr.assign(static_cast<size_t>(u.rows) + 1, 0);
  std::vector<int32_t> lower_count(static_cast<size_t>(u.rows), 0);
  for (int32_t i = 0; i < u.rows; ++i)
    for (int32_t p = u.row_ptr[i]; p < u.row_ptr[i + 1]; ++p) ++lower_count[u.col_idx[p]];
  for (int32_t i = 0; i < u.rows; ++i)
    a.row_ptr[i + 1] = a.row_ptr[i] + lower_count[i] + (s.diagonal[i] != 0.0) + u.row_length(i);
  a.col_idx.resize(static_cast<size_t>(a.row_ptr.back()));
  a.values.resize(a.col_idx.size());
  std::vector<int32_t> next(a.row_ptr.begin(), a.row_ptr.end() - 1);
  for (int32_t i = 0; i < u.rows; ++i) {  // row i's lower part arrives from rows r < i, in increasing r
    if (s.diagonal[i] != 0.0) a.col_idx[next[i]] = i, a.values[next[i]++] = s.diagonal[i];
    for (int32_t p = u.row_ptr[i]; p < u.row_ptr[i + 1]; ++p) {
      const int32_t c = u.col_idx[p];
      a.col_idx[next[c]] = i, a.values[next[c]++] = u.values[p];
    }
    for (int32_t p = u.row_ptr[i]; p < u.row_ptr[i + 1]; ++p)
      a.col_idx[next[i]] = u.col_idx[p], a.values[next[i]++] = u.values[p];
  }
  return a;
}

int32_t hyb_width_from_lengths(const std::vector<int64_t>& rows_of_length, int32_t rows) {
  if (rows == 0 || rows_of_length.empty()) return 0;
  const int32_t max_len = static_cast<int32_t>(rows_of_length.size()) - 1;
  std::vector<int64_t> at_least(rows_of_length);  // rows with length >= k
  at_least.push_back(0);
  for (int32_t k = max_len - 1; k >= 0; --k) at_least[k] += at_least[k + 1];
  const int64_t threshold = std::min<int64_t>(rows, std::max<int64_t>(4096, rows / 3));
  int32_t width = 0;
  for (int32_t k = 1; k <= max_len; ++k)
    if (at_least[k] >= threshold) width = k;
  return width;
}

int32_t hyb_default_width(const CsrMatrix& a) {
  if (a.rows == 0) return 0;
  int32_t max_len = 0;
  for (int32_t i = 0; i < a.rows; ++i) max_len = std::max(max_len, a.row_length(i));
  std::vector<int64_t> rows_of_length(static_cast<size_t>(max_len) + 1, 0);
  for (int32_t i = 0; i < a.rows; ++i) ++rows_of_length[a.row_length(i)];
  return hyb_width_from_lengths(rows_of_length, a.rows);
}

HybMatrix csr_to_hyb(const CsrMatrix& a, int32_t ell_width) {
  const int32_t w = ell_width >= 0 ? ell_width : hyb_default_width(a);
  CsrMatrix head;  // first w entries of every row
  head.rows = a.rows, head.cols = a.cols;
  head.row_ptr.assign(static_cast<size_t>(a.rows) + 1, 0);
  HybMatrix h;
  h.coo.rows = a.rows, h.coo.cols = a.cols;
  for (int32_t i = 0; i < a.rows; ++i) {
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      if (p - a.row_ptr[i] < w) {
        head.col_idx.push_back(a.col_idx[p]), head.values.push_back(a.values[p]);
      } else {
        h.coo.row_idx.push_back(i), h.coo.col_idx.push_back(a.col_idx[p]), h.coo.values.push_back(a.values[p]);
      }
    }
    head.row_ptr[i + 1] = static_cast<int32_t>(head.col_idx.size());
  }
  h.ell = csr_to_ell(head, 1e30);
  return h;
}

CsrMatrix hyb_to_csr(const HybMatrix& h) {
  CsrMatrix head = ell_to_csr(h.ell);
  CooMatrix all = csr_to_coo(head);
  all.row_idx.insert(all.row_idx.end(), h.coo.row_idx.begin(), h.coo.row_idx.end());
  all.col_idx.insert(all.col_idx.end(), h.coo.col_idx.begin(), h.coo.col_idx.end());
  all.values.insert(all.values.end(), h.coo.values.begin(), h.coo.values.end());
  return coo_to_csr(all);
}

}  // namespace spcg
