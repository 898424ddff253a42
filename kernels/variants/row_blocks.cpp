#include "kernels/variants/row_blocks.hpp"

#include <algorithm>

namespace spcg {

RowBinning make_row_blocks(const RowOffset* row_ptr, int32_t rows) {
  constexpr int tile_entries = RowBlockTuning::tile_entries, max_rows = RowBlockTuning::max_rows,
                piece_entries = RowBlockTuning::piece_entries;
  RowBinning b;
  int32_t first = 0;
  while (first < rows) {
    int32_t last = first;
    int64_t entries = 0;
    while (last < rows && last - first < max_rows && entries + (row_ptr[last + 1] - row_ptr[last]) <= tile_entries) {
      entries += row_ptr[last + 1] - row_ptr[last];
      ++last;
    }
    if (last > first) {
      b.blocks.push_back({first, last, static_cast<int>(row_ptr[first]), static_cast<int>(row_ptr[last]), -1, 0});
    } else {  // one long row
      last = first + 1;
      const int length = static_cast<int>(row_ptr[last] - row_ptr[first]);
      const int pieces = (length + piece_entries - 1) / piece_entries;
      const int slot = static_cast<int>(b.slots.size());
      b.slots.push_back({pieces, b.partials});
      b.partials += pieces;
      for (int q = 0; q < pieces; ++q) {
        const int begin = static_cast<int>(row_ptr[first]) + q * piece_entries;
        b.blocks.push_back({first, last, begin, std::min(begin + piece_entries, static_cast<int>(row_ptr[last])), slot, q});
      }
    }
    first = last;
  }
  return b;
}

}  // namespace spcg
