#pragma once
// Row binning shared by the CSR-adaptive kernels (csr-adaptive, csr-sym): consecutive short rows are grouped
// into row blocks whose entries fit a shared-memory tile, and a row longer than the tile is cut into pieces of
// a fixed number of entries (Greathouse & Daga, SC 2014; the long-row split of Daga & Greathouse, HiPC 2015).
// Plain structs: the device reads them too.
#include <cstdint>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg {

// A block is either a run of short rows [first, last) (slot < 0) or piece `piece` of long row `first`,
// entries [nz_begin, nz_end), whose partial sums may live at partials[partial_offset[slot] + piece].
struct RowBlock {
  int first, last, nz_begin, nz_end, slot, piece;
};
struct LongRowSlot {
  int pieces, partial_offset;
};
// Shared by both kernels (measured for csr-adaptive on power-law matrices, docs/perf-notes.md).
struct RowBlockTuning {
  static constexpr int threads = 256;
  static constexpr int tile_entries = 1024;  // shared-memory entries per row block
  static constexpr int max_rows = threads;   // every row of a block gets at least one thread
  static constexpr int piece_entries = 2048; // long rows: entries per block (8 per thread)
  static constexpr int unroll = 4;           // independent loads in flight per thread on long rows
};

struct RowBinning {
  std::vector<RowBlock> blocks;
  std::vector<LongRowSlot> slots;
  int partials = 0;
};

// Greedy: extend a block while its entries fit the tile and it has at most max_rows rows; a row longer than the
// tile becomes ceil(length / piece_entries) pieces (RowBlockTuning).
RowBinning make_row_blocks(const RowOffset* row_ptr, int32_t rows);  // entries that fit int32

}  // namespace spcg
