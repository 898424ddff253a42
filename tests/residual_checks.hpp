#pragma once
// The check every solver test makes of a returned x, on the host: ||b_j - A x_j|| / ||b_j|| <= 2 rtol (the drift
// of the recursive residual) + the rounding floor of any computed x, 16 eps sqrt(n) ||A||_inf ||x_j||_inf / ||b_j||
// (||A x|| <= ||A||_inf sqrt(n) ||x||_inf in 2-norms); every entry of x written (outputs are poisoned with NaN).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg::test {

inline void expect_true_residual(const CsrMatrix& a, const DenseBlock& b, const DenseBlock& x, double rtol,
                                 const std::string& what) {
  ASSERT_EQ(x.rows, a.rows) << what;
  double a_inf = 0;
  for (int32_t i = 0; i < a.rows; ++i) {
    double row = 0;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) row += std::abs(a.values[p]);
    a_inf = std::max(a_inf, row);
  }
  const std::vector<double> rel = relative_residuals(a, x, b);
  for (int j = 0; j < b.cols; ++j) {
    double x_inf = 0, b2 = 0;
    for (int32_t i = 0; i < a.rows; ++i) {
      ASSERT_TRUE(std::isfinite(x.at(i, j))) << what << ": x(" << i << ", " << j << ") not written";
      x_inf = std::max(x_inf, std::abs(x.at(i, j))), b2 += b.at(i, j) * b.at(i, j);
    }
    const double floor = 16 * std::numeric_limits<double>::epsilon() * std::sqrt(double(a.rows)) * a_inf * x_inf / std::sqrt(b2);
    EXPECT_LE(rel[j], 2 * rtol + floor) << what << " column " << j << " (rounding floor " << floor << ")";
  }
}

// The rounding bound of a computed ||b_j - A x_j||, per column: each row's sum carries at most (entries + 1) eps
// (|A| |x| + |b|), so a residual the device computed and the host's differ by at most twice this.
inline std::vector<double> residual_rounding(const CsrMatrix& a, const DenseBlock& x, const DenseBlock& b) {
  std::vector<double> out(static_cast<size_t>(x.cols), 0.0);
  for (int j = 0; j < x.cols; ++j) {
    double sq = 0;
    for (int32_t i = 0; i < a.rows; ++i) {
      double row = std::abs(b.at(i, j));
      for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) row += std::abs(a.values[q] * x.at(a.col_idx[q], j));
      row *= (a.row_ptr[i + 1] - a.row_ptr[i] + 1) * std::numeric_limits<double>::epsilon();
      sq += row * row;
    }
    out[static_cast<size_t>(j)] = std::sqrt(sq);
  }
  return out;
}

// The largest |x - ref| entry relative to the largest |ref| entry (the absolute difference when ref is zero).
inline double max_relative_difference(const DenseBlock& x, const DenseBlock& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < x.data.size(); ++i)
    num = std::max(num, std::abs(x.data[i] - ref.data[i])), den = std::max(den, std::abs(ref.data[i]));
  return den > 0 ? num / den : num;
}

}  // namespace spcg::test
