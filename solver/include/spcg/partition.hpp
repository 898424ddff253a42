#pragma once
// Row partitions for solving on several GPUs (issue #25's first half, host only): contiguous row blocks balanced
// by work, each rank's rows split into a local block (its own columns) and a halo block (columns other ranks
// own), and the halo plan that says which entries of x travel between which ranks. A rank's SpMV is then
//   y = A_local x_local + A_halo x_halo,   x_halo gathered from the peers by the plan,
// the second product after the exchange, so that the first can overlap it. An in-process exchange stands in for
// the communicator on one machine (the tests; NCCL ranks use the same plans).
#include <cstdint>
#include <string>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg {

// A row or column number of the whole system split over ranks: 64-bit, since a system held by several GPUs may
// pass 2^31 rows. A rank's own indices (its rows, its local block's columns, its halo slots) stay int32: 4 of
// CSR's 12 bytes an entry, where 64-bit ones would make it 16.
using GlobalIndex = int64_t;

// Contiguous row blocks: rank r owns rows [first_row[r], first_row[r + 1]).
struct RowPartition {
  std::vector<GlobalIndex> first_row{0};
  int ranks() const { return static_cast<int>(first_row.size()) - 1; }
  GlobalIndex begin(int r) const { return first_row[static_cast<size_t>(r)]; }
  GlobalIndex end(int r) const { return first_row[static_cast<size_t>(r) + 1]; }
  int owner(GlobalIndex row) const;  // the rank owning `row` (a rank with no rows never owns one)
};

// Rows [first_row, first_row + rows) of a system of `global_cols` columns, with global column numbers: one rank's
// rows as it generates, reads or cuts them, before they are split into its local and halo blocks.
struct GlobalRows {
  GlobalIndex first_row = 0, global_cols = 0;
  int32_t rows = 0;
  HostVector<RowOffset> row_ptr{0};
  HostVector<GlobalIndex> col_idx;
  HostVector<double> values;
  int64_t nnz() const { return static_cast<int64_t>(col_idx.size()); }
};

// Blocks of about equal work, work = stored entries + rows (a row costs its pointer and its y entry even when
// empty); boundaries fall between rows, so one rank's work exceeds the mean by at most one row's. `ranks` >= 1;
// ranks beyond the rows get empty blocks.
RowPartition partition_by_work(const CsrMatrix& a, int ranks);

// What one rank exchanges: it receives the halo entries x[halo_columns[i]] (grouped by owner, each group
// sorted) and sends to each peer the entries of its own x that the peer's halo lists, in the peer's order.
struct HaloPlan {
  struct Receive {
    int peer = 0;
    std::vector<GlobalIndex> columns;  // the global columns of the halo slots filled from `peer`, in slot order
  };
  struct Send {
    int peer = 0;
    std::vector<int32_t> rows;  // this rank's local row indices whose x the peer receives, in the peer's order
  };
  std::vector<GlobalIndex> halo_columns;  // global column of each halo slot
  std::vector<Receive> receive;           // by peer rank, increasing; slots of `receive[i]` follow those of receive[i-1]
  std::vector<Send> send;                 // by peer rank, increasing
  int64_t receive_count() const { return static_cast<int64_t>(halo_columns.size()); }
  int64_t send_count() const;
};

// A rank's share of A: its rows, split by column owner.
struct RankBlocks {
  int rank = 0;
  GlobalIndex row_begin = 0, row_end = 0;
  int32_t rows() const { return static_cast<int32_t>(row_end - row_begin); }
  CsrMatrix local;  // (row_end - row_begin) square: columns in [row_begin, row_end), shifted to local indices
  CsrMatrix halo;   // (row_end - row_begin) x halo_columns.size(): columns are halo slots
  HaloPlan plan;
};

// A rank's rows of a rectangular matrix whose columns another partition owns (an AMG prolongator: rows by the fine
// partition, columns by the coarse one), split by column owner into local and halo blocks with the plan's receives.
// Its sends are the peers' receives (sends_from_receives for blocks held in one process; over NCCL, one exchange
// of the receive lists, as file_share makes them).
RankBlocks rank_blocks_rectangular(GlobalRows rows, const RowPartition& row_partition,
                                   const RowPartition& column_partition, int rank);
// Every rank's sends from the other ranks' receives (any pattern), for blocks held in one process.
void sends_from_receives(std::vector<RankBlocks>& ranks, const RowPartition& column_partition);

// Equal row counts (generated stencils, whose rows cost about the same: no whole matrix to weigh).
RowPartition partition_evenly(GlobalIndex rows, int ranks);

// One rank's blocks and plan from the whole matrix (a rank that read the whole file). Any structure.
RankBlocks rank_blocks(const CsrMatrix& a, const RowPartition& p, int rank);
// One rank's blocks and plan from its own rows only (rows.first_row = p.begin(rank), rows.rows its row count,
// rows.global_cols the whole matrix's): what a rank that generated its rows builds. The sends assume a
// structurally symmetric A (every SPD matrix): peer q needs x_i exactly when row i has a column q owns.
// The rows are taken over (their values become the local block's: no copy of a rank's share).
RankBlocks rank_blocks_from_rows(GlobalRows rows, const RowPartition& p, int rank);
// A halo block's rows that hold entries, on the host: their local row indices (increasing) and a CSR over them
// whose columns are halo slots (what a rank's halo block split on the device downloads as: a coarse level's
// millions of rows hold a few hundred thousand halo rows).
struct HeldRows {
  int32_t rows = 0;  // the rank's rows: the block's height
  std::vector<int32_t> ids, row_ptr{0}, cols;
};
// A rank's plan from its halo block's held rows alone (its blocks made elsewhere: AMG's coarse levels, split on the
// device): the slots of halo_columns (sorted, distinct, none the rank's own, one for every slot the rows use), the
// receives grouped by owner, the sends by structural symmetry (as rank_blocks_from_rows').
HaloPlan halo_plan(const HeldRows& halo, std::vector<GlobalIndex> halo_columns, const RowPartition& p, int rank);
// The same from rows whose global columns are 32-bit (rows.cols = the whole matrix's, which fits int32: a file's),
// split in place: no array of the rows is copied but the halo's.
RankBlocks rank_blocks_from_rows(CsrMatrix rows, const RowPartition& p, int rank);

// The library's partition, one rank's share of it (what a rank hands its Solver):
// a whole matrix that every rank holds (each read the file): contiguous blocks of equal work (partition_by_work);
RankBlocks rank_share(const CsrMatrix& a, int ranks, int rank);
// a generated problem (generators.hpp): equal row counts (partition_evenly), only this rank's rows made
// (generate_rows; the system may pass 2^31 rows, a rank's share may not, nor its entries).
RankBlocks generated_share(const std::string& spec, int ranks, int rank);

// Every rank's blocks and consistent plans (each rank's sends are its peers' receives): rank_blocks for each.
// The tests and the in-process path use them all.
std::vector<RankBlocks> split_for_ranks(const CsrMatrix& a, const RowPartition& p);

// The exchange on one machine, in memory: x_parts[r] holds rank r's entries of x (its rows); returns each rank's
// halo vector, filled as the communicator would (every send delivered to its receiver's slots).
std::vector<std::vector<double>> exchange_halos_in_process(const std::vector<RankBlocks>& ranks,
                                                           const std::vector<std::vector<double>>& x_parts);

// y = A' x over the ranks (a restriction P' r): each rank's local block transposed into its own columns, its halo
// block's sums sent back to the columns' owners (the halo exchange reversed) and added in rank order.
std::vector<std::vector<double>> transpose_spmv_in_process(const std::vector<RankBlocks>& ranks,
                                                           const std::vector<std::vector<double>>& x_parts);

// y_parts[r] = A_local x_parts[r] + A_halo x_halo[r] for every rank: the distributed SpMV's host reference.
std::vector<std::vector<double>> distributed_spmv_in_process(const std::vector<RankBlocks>& ranks,
                                                             const std::vector<std::vector<double>>& x_parts);

}  // namespace spcg
