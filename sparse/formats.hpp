#pragma once
// Host layouts that the SpMV/SpMM kernels upload, converted from CSR and back (for round-trip tests).
// Every conversion that can blow up storage takes a fill limit and throws FormatRefused past it.
#include <cstdint>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"
#include "spcg/error.hpp"

namespace spcg {

class FormatRefused : public Error {
 public:
  using Error::Error;
};

// Throws FormatRefused when `stored` slots for nnz entries exceed max_fill times the nonzeros (or the padded
// storage cannot be indexed): the one fill rule of every padded layout, host or device built.
void check_format_fill(const char* format, double stored, int64_t nnz, double max_fill);

struct CooMatrix {
  int32_t rows = 0, cols = 0;
  std::vector<int32_t> row_idx, col_idx;  // sorted by row, then column
  std::vector<double> values;
};

// ELLPACK, column-major: entry k of row i at [k * rows + i]. Rows shorter than `width` are padded with
// their last valid column (row 0's column 0 for empty rows) and value 0, so the kernels need no branch
// and padded gathers hit a cache line the row already touched.
struct EllMatrix {
  int32_t rows = 0, cols = 0, width = 0;
  std::vector<int32_t> col_idx;
  std::vector<double> values;
  std::vector<int32_t> row_length;  // host-only, for conversion back
};

// SELL-C-sigma (Kreutzer et al. 2014): rows sorted by length inside windows of `sigma` rows, cut into
// slices of `slice_height` (C) rows; each slice is a column-major ELL block as wide as its longest row.
// Entry k of slice-local row r in slice s lives at slice_ptr[s] + k * C + r.
struct SellMatrix {
  int32_t rows = 0, cols = 0, slice_height = 32, sigma = 1;
  std::vector<int64_t> slice_ptr;   // slices + 1 offsets
  std::vector<int32_t> slice_width;
  std::vector<int32_t> perm;        // sorted position -> original row (empty when sigma == 1)
  std::vector<int32_t> col_idx;
  std::vector<double> values;
  std::vector<int32_t> row_length;  // per sorted position, host-only
  int64_t stored() const { return static_cast<int64_t>(values.size()); }
};

// Diagonal storage: data[d * rows + i] = A(i, i + offsets[d]) (0 where outside the matrix or not stored).
struct DiaMatrix {
  int32_t rows = 0, cols = 0;
  std::vector<int32_t> offsets;  // increasing
  std::vector<double> values;
};

// A symmetric matrix as its strict upper triangle (CSR, columns > row) plus the diagonal: the lower triangle
// is the upper one transposed, so half the off-diagonal entries are stored.
struct SymmetricCsr {
  CsrMatrix upper;               // square, rows == cols, only entries with column > row
  std::vector<double> diagonal;  // rows entries, 0 where A has no stored diagonal entry
};

// HYB (Bell & Garland 2009): ELL of `ell.width` per row plus the rest of each long row in COO.
struct HybMatrix {
  EllMatrix ell;
  CooMatrix coo;
};

CooMatrix csr_to_coo(const CsrMatrix& a);
CsrMatrix coo_to_csr(const CooMatrix& c);

EllMatrix csr_to_ell(const CsrMatrix& a, double max_fill = 3.0);
CsrMatrix ell_to_csr(const EllMatrix& e);

SellMatrix csr_to_sell(const CsrMatrix& a, int32_t slice_height = 32, int32_t sigma = 1, double max_fill = 3.0);
CsrMatrix sell_to_csr(const SellMatrix& s);

// Refuses when rows * diagonals > max_fill * nnz. DIA drops explicit zeros on the way back.
DiaMatrix csr_to_dia(const CsrMatrix& a, double max_fill = 1.5);
// True when the diagonals mirror each other exactly: offset -o row i equals offset +o row i - o (A = A').
bool dia_is_symmetric(const DiaMatrix& d);
// The diagonals with offset >= 0 only: half the value bytes of a symmetric matrix (lower part read shifted).
DiaMatrix dia_upper_half(const DiaMatrix& d);
CsrMatrix dia_to_csr(const DiaMatrix& d);

// Refuses (FormatRefused, naming the first mirror that differs) unless A is square and A(i, j) == A(j, i)
// bitwise for every stored entry, with the same sparsity pattern: the kernels then reproduce A exactly.
SymmetricCsr csr_to_symmetric(const CsrMatrix& a);
CsrMatrix symmetric_to_csr(const SymmetricCsr& s);

// ELL width: the largest K such that at least max(4096, rows / 3) rows have >= K entries (cusp's rule),
// unless `ell_width` >= 0 is given.
HybMatrix csr_to_hyb(const CsrMatrix& a, int32_t ell_width = -1);
CsrMatrix hyb_to_csr(const HybMatrix& h);
int32_t hyb_default_width(const CsrMatrix& a);
// The same rule from rows_of_length[L] = rows with exactly L entries (what the device build counts).
int32_t hyb_width_from_lengths(const std::vector<int64_t>& rows_of_length, int32_t rows);

}  // namespace spcg
