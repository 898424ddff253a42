#include <cmath>
#include <string>

#include "spcg/error.hpp"
#include "solver/solver.hpp"

namespace spcg {

std::vector<double> jacobi_inverse_diagonal(const CsrMatrix& a) {
  std::vector<double> d(a.rows, 0.0);
  for (int32_t i = 0; i < a.rows; ++i) {
    double diag = 0;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p)
      if (a.col_idx[p] == i) diag = a.values[p];
    if (!(diag > 0))
      throw InputError("", 0, "Jacobi preconditioner needs a positive diagonal, but row " + std::to_string(i + 1) +
                                  " has diagonal " + (diag == 0 ? std::string("0 (zero or missing)") : std::to_string(diag)));
    d[i] = 1.0 / diag;
  }
  return d;
}

bool SolveResult::all_converged() const {
  for (const auto& c : columns)
    if (c.status != ColumnStatus::converged && c.status != ColumnStatus::deflated) return false;
  return true;
}

}  // namespace spcg
