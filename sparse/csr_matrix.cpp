#include "spcg/csr_matrix.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "spcg/error.hpp"

namespace spcg {

HostVector<int32_t> row_offsets32(const CsrMatrix& a) {
  if (a.nnz() > std::numeric_limits<int32_t>::max())
    throw Error("row_offsets32: " + std::to_string(a.nnz()) + " entries do not fit 32-bit row offsets");
  HostVector<int32_t> out(a.row_ptr.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int32_t>(a.row_ptr[i]);
  return out;
}

void CsrMatrix::validate(const std::string& what) const {
  auto fail = [&](const std::string& m) { throw Error(what + ": invalid CSR: " + m); };
  if (rows < 0 || cols < 0) fail("negative dimension");
  if (row_ptr.size() != static_cast<size_t>(rows) + 1) fail("row_ptr has " + std::to_string(row_ptr.size()) +
                                                             " entries, expected rows+1 = " + std::to_string(rows + 1));
  if (row_ptr[0] != 0) fail("row_ptr[0] = " + std::to_string(row_ptr[0]) + ", expected 0");
  if (values.size() != col_idx.size()) fail("values and col_idx differ in size");
  if (static_cast<int64_t>(row_ptr[rows]) != nnz()) fail("row_ptr[rows] != nnz");
  for (int32_t i = 0; i < rows; ++i) {
    if (row_ptr[i + 1] < row_ptr[i]) fail("row_ptr decreases at row " + std::to_string(i));
    for (int32_t p = row_ptr[i]; p < row_ptr[i + 1]; ++p) {
      const int32_t c = col_idx[p];
      if (c < 0 || c >= cols) fail("column " + std::to_string(c) + " out of range in row " + std::to_string(i));
      if (p > row_ptr[i] && c <= col_idx[p - 1])
        fail("columns not strictly increasing in row " + std::to_string(i));
      if (!std::isfinite(values[p])) fail("non-finite value in row " + std::to_string(i));
    }
  }
}

CsrMatrix csr_from_triplets(int32_t rows, int32_t cols, const std::vector<int32_t>& ti,
                            const std::vector<int32_t>& tj, const std::vector<double>& tv,
                            int64_t* duplicates_summed) {
  const size_t m = ti.size();
  // Counting sort by row (stable), then sort each row by column and merge duplicates.
  std::vector<int64_t> count(static_cast<size_t>(rows) + 1, 0);
  for (size_t e = 0; e < m; ++e) ++count[ti[e] + 1];
  for (int32_t i = 0; i < rows; ++i) count[i + 1] += count[i];
  std::vector<int32_t> col(m);
  std::vector<double> val(m);
  {
    std::vector<int64_t> next(count.begin(), count.end() - 1);
    for (size_t e = 0; e < m; ++e) {
      const int64_t p = next[ti[e]]++;
      col[p] = tj[e];
      val[p] = tv[e];
    }
  }
  CsrMatrix a;
  a.rows = rows;
  a.cols = cols;
  a.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  a.col_idx.reserve(m);
  a.values.reserve(m);
  int64_t dups = 0;
  std::vector<std::pair<int32_t, double>> row;
  for (int32_t i = 0; i < rows; ++i) {
    const int64_t b = count[i], e = count[i + 1];
    bool sorted = true;
    for (int64_t p = b + 1; p < e; ++p) sorted &= col[p - 1] < col[p];
    if (sorted) {
      a.col_idx.insert(a.col_idx.end(), col.begin() + b, col.begin() + e);
      a.values.insert(a.values.end(), val.begin() + b, val.begin() + e);
    } else {
      row.clear();
      for (int64_t p = b; p < e; ++p) row.emplace_back(col[p], val[p]);
      std::stable_sort(row.begin(), row.end(), [](auto& x, auto& y) { return x.first < y.first; });
      for (size_t q = 0; q < row.size(); ++q) {
        if (q > 0 && row[q].first == row[q - 1].first) {
          a.values.back() += row[q].second;
          ++dups;
        } else {
          a.col_idx.push_back(row[q].first);
          a.values.push_back(row[q].second);
        }
      }
    }
    a.row_ptr[i + 1] = static_cast<int32_t>(a.col_idx.size());
  }
  if (duplicates_summed) *duplicates_summed = dups;
  return a;
}

CsrMatrix transpose(const CsrMatrix& a) {
  CsrMatrix t;
  t.rows = a.cols;
  t.cols = a.rows;
  t.row_ptr.assign(static_cast<size_t>(a.cols) + 1, 0);
  t.col_idx.resize(a.col_idx.size());
  t.values.resize(a.values.size());
  for (int32_t c : a.col_idx) ++t.row_ptr[c + 1];
  for (int32_t j = 0; j < a.cols; ++j) t.row_ptr[j + 1] += t.row_ptr[j];
  std::vector<int32_t> next(t.row_ptr.begin(), t.row_ptr.end() - 1);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t q = next[a.col_idx[p]]++;
      t.col_idx[q] = i;
      t.values[q] = a.values[p];
    }
  return t;
}

void reference_spmm(const CsrMatrix& a, double alpha, const DenseBlock& x, double beta, DenseBlock& y) {
  if (x.rows != a.cols || y.rows != a.rows || x.cols != y.cols) throw Error("reference_spmm: shape mismatch");
  const int32_t k = x.cols;
  std::vector<long double> acc(k);
  for (int32_t i = 0; i < a.rows; ++i) {
    std::fill(acc.begin(), acc.end(), 0.0L);
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p)
      for (int32_t j = 0; j < k; ++j) acc[j] += static_cast<long double>(a.values[p]) * x.at(a.col_idx[p], j);
    for (int32_t j = 0; j < k; ++j)
      y.at(i, j) = beta == 0.0 ? static_cast<double>(alpha * acc[j])
                               : static_cast<double>(alpha * acc[j] + static_cast<long double>(beta) * y.at(i, j));
  }
}

std::vector<double> relative_residuals(const CsrMatrix& a, const DenseBlock& x, const DenseBlock& b) {
  DenseBlock r = b;
  reference_spmm(a, -1.0, x, 1.0, r);
  std::vector<double> out(b.cols);
  for (int32_t j = 0; j < b.cols; ++j) {
    long double rr = 0, bb = 0;
    for (int32_t i = 0; i < b.rows; ++i) rr += (long double)r.at(i, j) * r.at(i, j), bb += (long double)b.at(i, j) * b.at(i, j);
    out[j] = bb > 0 ? static_cast<double>(std::sqrt(rr / bb)) : static_cast<double>(std::sqrt(rr));
  }
  return out;
}

}  // namespace spcg
