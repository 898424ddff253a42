#pragma once
// How dia reads a symmetric matrix whose diagonals are a box stencil's, for its plane march (spmv_dia_box.cu).
#include <cstdint>
#include <optional>
#include <vector>

namespace spcg {

// Rows read as `planes` planes of `lines` lines of `line` rows, row = (z * lines + y) * line + x, and the stored
// diagonals (offsets >= 0) those of the upper half of a 27-point stencil: 0, 1, line - 1, line, line + 1, and
// plane + dy * line + dx for dy, dx in {-1, 0, 1}. Only the order in which rows are visited depends on this
// reading: every product is the matrix's own.
struct DiaBox {
  int32_t line = 0, lines = 0, planes = 0;
  int64_t plane = 0;  // line * lines
};

// The box reading of a symmetric DIA's offsets (ascending, offsets[0] == 0), or nothing: other offsets than a
// 27-point stencil's, fewer than two planes, or lines shorter than 16 rows (more than half of each warp idle).
std::optional<DiaBox> find_dia_box(const std::vector<int32_t>& offsets, int32_t rows);

}  // namespace spcg
