#include "solver/setup_rules.hpp"

#include <cstdio>

namespace spcg {

void check_matrix(const MatrixStats& st, const SolverOptions& o, int64_t first_row, const std::string& block) {
  const std::string& name = o.matrix_name;
  const std::string of = block.empty() ? "" : " (" + block + ")";
  if (!st.square)
    throw MatrixRefusedError(name, "matrix is " + std::to_string(st.rows) + " x " + std::to_string(st.cols) +
                                       ", CG needs a square matrix", false);
  if (st.non_finite_values > 0)
    throw MatrixRefusedError(name, "matrix has " + std::to_string(st.non_finite_values) + " NaN or Inf entries" + of,
                             false);
  if (!st.numerically_symmetric && o.check_matrix)
    throw MatrixRefusedError(name, "matrix is not symmetric" + of + " (max relative asymmetry " +
                                       std::to_string(st.max_asymmetry) + "); CG needs an SPD matrix", true);
  // a_ii = e_i' A e_i > 0 for every SPD A, so a zero, negative or missing diagonal proves A indefinite (or
  // singular) before any iteration runs; the solver would only report a breakdown or a stall later.
  if (!st.diagonal_positive && o.check_matrix) {
    char diag[64];
    std::snprintf(diag, sizeof diag, st.first_nonpositive_value == 0 ? "0 (zero or missing)" : "%.6g",
                  st.first_nonpositive_value);
    throw MatrixRefusedError(name, "matrix is not positive definite: row " +
                                       std::to_string(first_row + st.first_nonpositive_row + 1) + " has diagonal " +
                                       diag + " (" + std::to_string(st.nonpositive_diagonal) +
                                       " such rows" + (block.empty() ? "" : " in " + block) +
                                       "), and an SPD matrix has a positive diagonal", true);
  }
}

}  // namespace spcg
