#include "solver/small_dense.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace spcg {

Orth pivoted_cholqr(const Small& G, double drop, const std::vector<bool>& excluded) {
  const int m = G.rows;
  std::vector<double> scale(m, 0.0);  // D
  std::vector<bool> out(m, false);
  bool negative_diagonal = false;
  for (int i = 0; i < m; ++i) {
    out[i] = (!excluded.empty() && excluded[i]) || !(G(i, i) > 0) || !std::isfinite(G(i, i));
    negative_diagonal |= (excluded.empty() || !excluded[i]) && G(i, i) < 0;
    if (!out[i]) scale[i] = 1 / std::sqrt(G(i, i));
  }
  Small S(m, m);  // D G D, updated in place to the Schur complements of the pivots taken
  for (int j = 0; j < m; ++j)
    for (int i = 0; i < m; ++i) S(i, j) = out[i] || out[j] ? 0.0 : G(i, j) * scale[i] * scale[j];
  std::vector<int> piv(m);
  std::iota(piv.begin(), piv.end(), 0);
  double rejected = 0;
  Small L(m, m);  // row p belongs to the column in position p of piv: swapped with piv
  int r = 0;
  for (; r < m; ++r) {
    int best = -1;
    for (int i = r; i < m; ++i)
      if (!out[piv[i]] && (best < 0 || S(piv[i], piv[i]) > S(piv[best], piv[best]))) best = i;
    if (best < 0) break;
    std::swap(piv[r], piv[best]);
    for (int c = 0; c < r; ++c) std::swap(L(r, c), L(best, c));  // the factor's rows move with their columns
    const double d = S(piv[r], piv[r]);
    if (!(d > drop)) {
      rejected = d;
      break;
    }
    const double l = std::sqrt(d);
    L(r, r) = l;
    for (int i = r + 1; i < m; ++i) L(i, r) = S(piv[i], piv[r]) / l;
    for (int i = r + 1; i < m; ++i)
      for (int j = r + 1; j <= i; ++j) {
        const double v = S(piv[i], piv[j]) - L(i, r) * L(j, r);
        S(piv[i], piv[j]) = v;
        S(piv[j], piv[i]) = v;
      }
  }
  Orth o;
  o.kept.assign(piv.begin(), piv.begin() + r);
  o.rejected_pivot = rejected, o.negative_diagonal = negative_diagonal;
  if (r > 0) o.pivot_ratio = (L(0, 0) * L(0, 0)) / (L(r - 1, r - 1) * L(r - 1, r - 1));
  // T = D Pi[:, :r] L[:r, :r]^-T: column c of T solves L' t = e_c, placed at the pivoted rows and scaled.
  o.T = Small(m, r);
  std::vector<double> t(r);
  for (int c = 0; c < r; ++c) {
    for (int i = r - 1; i >= 0; --i) {  // back substitution with L' (upper)
      double v = (i == c) ? 1.0 : 0.0;
      for (int j = i + 1; j < r; ++j) v -= L(j, i) * t[j];
      t[i] = v / L(i, i);
    }
    for (int i = 0; i < r; ++i) o.T(piv[i], c) = t[i] * scale[piv[i]];
  }
  return o;
}

bool spd_solve(const Small& S, Small& Y) {
  const int r = S.rows;
  Small L(r, r);
  for (int j = 0; j < r; ++j) {
    double d = S(j, j);
    for (int p = 0; p < j; ++p) d -= L(j, p) * L(j, p);
    if (!(d > 0) || !std::isfinite(d)) return false;
    L(j, j) = std::sqrt(d);
    for (int i = j + 1; i < r; ++i) {
      double v = S(i, j);
      for (int p = 0; p < j; ++p) v -= L(i, p) * L(j, p);
      L(i, j) = v / L(j, j);
    }
  }
  for (int c = 0; c < Y.cols; ++c) {
    for (int i = 0; i < r; ++i) {
      double v = Y(i, c);
      for (int p = 0; p < i; ++p) v -= L(i, p) * Y(p, c);
      Y(i, c) = v / L(i, i);
    }
    for (int i = r - 1; i >= 0; --i) {
      double v = Y(i, c);
      for (int p = i + 1; p < r; ++p) v -= L(p, i) * Y(p, c);
      Y(i, c) = v / L(i, i);
    }
  }
  return true;
}

Small matmul(const Small& A, const Small& B) {
  Small C(A.rows, B.cols);
  for (int j = 0; j < B.cols; ++j)
    for (int p = 0; p < A.cols; ++p)
      for (int i = 0; i < A.rows; ++i) C(i, j) += A(i, p) * B(p, j);
  return C;
}

Small tmatmul(const Small& A, const Small& B) {
  Small C(A.cols, B.cols);
  for (int j = 0; j < B.cols; ++j)
    for (int i = 0; i < A.cols; ++i) {
      double v = 0;
      for (int p = 0; p < A.rows; ++p) v += A(p, i) * B(p, j);
      C(i, j) = v;
    }
  return C;
}

Small sub(const Small& A, int r0, int c0, int rows, int cols) {
  Small S(rows, cols);
  for (int j = 0; j < cols; ++j)
    for (int i = 0; i < rows; ++i) S(i, j) = A(r0 + i, c0 + j);
  return S;
}

}  // namespace spcg
