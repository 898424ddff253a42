#include "spcg/partition.hpp"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>

#include "spcg/error.hpp"
#include "spcg/generators.hpp"
#include "sparse/parallel.hpp"

namespace spcg {

int RowPartition::owner(GlobalIndex row) const {
  const auto it = std::upper_bound(first_row.begin(), first_row.end(), row);
  return static_cast<int>(it - first_row.begin()) - 1;
}

int64_t HaloPlan::send_count() const {
  int64_t n = 0;
  for (const Send& t : send) n += static_cast<int64_t>(t.rows.size());
  return n;
}

RowPartition partition_by_work(const CsrMatrix& a, int ranks) {
  if (ranks < 1) throw Error("partition_by_work: " + std::to_string(ranks) + " ranks (at least 1)");
  const int64_t total = a.nnz() + a.rows;
  RowPartition p;
  p.first_row.assign(static_cast<size_t>(ranks) + 1, a.rows);
  p.first_row[0] = 0;
  // work before row i: row_ptr[i] + i, increasing in i; boundary t at the first row reaching t/ranks of it
  auto work_before = [&](int32_t i) { return int64_t{a.row_ptr[i]} + i; };
  for (int t = 1; t < ranks; ++t) {
    const int64_t target = total * t / ranks;
    int32_t lo = static_cast<int32_t>(p.first_row[t - 1]), hi = a.rows;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (work_before(mid) < target) lo = mid + 1;
      else hi = mid;
    }
    p.first_row[t] = lo;
  }
  return p;
}

namespace {

// The plan's receives: the runs of its (sorted) halo columns by owner.
void receives_by_owner(HaloPlan& plan, const RowPartition& cp) {
  const std::vector<GlobalIndex>& halo = plan.halo_columns;
  for (size_t s = 0; s < halo.size();) {
    const int peer = cp.owner(halo[s]);
    HaloPlan::Receive t;
    t.peer = peer;
    while (s < halo.size() && halo[s] < cp.end(peer)) t.columns.push_back(halo[s++]);
    plan.receive.push_back(std::move(t));
  }
}

// Rank r's local and halo blocks and its receives, from its rows (global columns: GlobalRows' 64-bit ones, or a
// CsrMatrix's 32-bit ones where the whole system's columns fit); rows owned as p says, columns as cp says (p itself
// for a square system; the coarse partition for a prolongator's rows). The rows are taken over: the halo block is copied
// out (a few planes' worth); the local block is what remains of the rows, compacted in place (a rank's share of a
// large system is tens of GB; a copy doubled it), only its columns new when the global ones were 64-bit.
template <class Rows>
RankBlocks split_rows(Rows a, const RowPartition& p, const RowPartition& cp, int r, GlobalIndex column_base = 0) {
  using Column = typename std::remove_reference_t<decltype(a.col_idx)>::value_type;
  // a stored column is column_base less than the global one (generate_rows_window's; 0 for every other input)
  auto global = [column_base](Column stored) { return column_base + GlobalIndex{stored}; };
  RankBlocks rb;
  rb.rank = r, rb.row_begin = p.begin(r), rb.row_end = p.end(r);
  const GlobalIndex b = cp.begin(r), e = cp.end(r);  // the rank's own columns
  const int32_t rows = rb.rows();
  auto outside = [&](GlobalIndex c) { return c < b || c >= e; };
  // rows in parts on every core
  const int64_t parts = rows >= (1 << 16) ? 8 * int64_t{hardware_threads()} : 1;
  auto for_parts = [&](auto&& body) {  // body(first row, end row, part)
    parallel_for(parts, hardware_threads(), [&](int64_t part) {
      body(static_cast<int32_t>(even_split(rows, parts, part)), static_cast<int32_t>(even_split(rows, parts, part + 1)), part);
    });
  };
  // halo columns: the distinct columns outside [b, e), sorted (so grouped by owner, as ranges are contiguous);
  // with each row's halo length
  std::vector<GlobalIndex>& halo = rb.plan.halo_columns;
  std::vector<std::vector<GlobalIndex>> halo_of_part(static_cast<size_t>(parts));
  rb.halo.rows = rows;
  rb.halo.row_ptr.resize(static_cast<size_t>(rows) + 1);
  rb.halo.row_ptr[0] = 0;
  for_parts([&](int32_t first, int32_t last, int64_t part) {
    std::vector<GlobalIndex>& mine = halo_of_part[static_cast<size_t>(part)];
    for (int32_t i = first; i < last; ++i) {
      int32_t out = 0;
      for (RowOffset q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q)
        if (const GlobalIndex c = global(a.col_idx[q]); outside(c)) ++out, mine.push_back(c);
      rb.halo.row_ptr[static_cast<size_t>(i) + 1] = out;
    }
  });
  for (const auto& mine : halo_of_part) halo.insert(halo.end(), mine.begin(), mine.end());
  std::sort(halo.begin(), halo.end());
  halo.erase(std::unique(halo.begin(), halo.end()), halo.end());
  if (halo.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw Error("rank " + std::to_string(r) + " needs " + std::to_string(halo.size()) + " halo entries, more than int32 slots allow");
  rb.halo.cols = static_cast<int32_t>(halo.size());
  for (size_t i = 1; i <= static_cast<size_t>(rows); ++i) rb.halo.row_ptr[i] += rb.halo.row_ptr[i - 1];
  rb.halo.col_idx.resize(static_cast<size_t>(rb.halo.row_ptr.back()));
  rb.halo.values.resize(rb.halo.col_idx.size());
  if (!halo.empty())
    for_parts([&](int32_t first, int32_t last, int64_t) {
      for (int32_t i = first; i < last; ++i) {
        RowOffset h = rb.halo.row_ptr[i];
        for (RowOffset q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) {
          const GlobalIndex c = global(a.col_idx[q]);
          if (!outside(c)) continue;
          // the slot order is the column order: a row's halo entries stay sorted
          rb.halo.col_idx[h] = static_cast<int32_t>(std::lower_bound(halo.begin(), halo.end(), c) - halo.begin());
          rb.halo.values[h++] = a.values[q];
        }
      }
    });
  // the local block: the rows without their halo entries, columns shifted to local indices
  CsrMatrix& local = rb.local;
  local.rows = rows, local.cols = static_cast<int32_t>(e - b);
  constexpr bool in_place = std::is_same_v<Column, int32_t>;
  if constexpr (!in_place) local.col_idx.resize(a.col_idx.size() - static_cast<size_t>(rb.halo.nnz()));
  int32_t* const local_cols = [&] {
    if constexpr (in_place) return a.col_idx.data();  // written at or below where it is read
    else return local.col_idx.data();
  }();
  if (halo.empty()) {
    for_parts([&](int32_t first, int32_t last, int64_t) {
      for (RowOffset q = a.row_ptr[first]; q < a.row_ptr[last]; ++q) local_cols[q] = static_cast<int32_t>(global(a.col_idx[q]) - b);
    });
  } else {
    // Entries move down only: row i's local entries go to old_ptr[i] - (halo entries before row i). Every part of
    // the rows compacts its own in row order, all parts at once. A part's writes reach at most the halo count
    // below its first source, into the tail of the part before it: each part first saves that tail of its own
    // (the window the next part's writes may overwrite: at most the halo's entries), then reads it from there.
    const int64_t compact_parts = std::min<int64_t>(rows, 2 * int64_t{hardware_threads()});
    auto part_first = [&](int64_t t) { return static_cast<int32_t>(even_split(rows, compact_parts, t)); };
    auto destination = [&](int32_t i) { return a.row_ptr[i] - rb.halo.row_ptr[i]; };
    std::vector<RowOffset> window_begin(static_cast<size_t>(compact_parts)), window_end(static_cast<size_t>(compact_parts));
    std::vector<std::vector<Column>> saved_cols(static_cast<size_t>(compact_parts));
    std::vector<std::vector<double>> saved_values(static_cast<size_t>(compact_parts));
    parallel_for(compact_parts, hardware_threads(), [&](int64_t t) {
      const int32_t next = part_first(t + 1);
      const RowOffset lo = next < rows ? destination(next) : a.row_ptr[rows], hi = a.row_ptr[next];
      window_begin[t] = lo, window_end[t] = hi;
      saved_cols[t].assign(a.col_idx.begin() + lo, a.col_idx.begin() + hi);
      saved_values[t].assign(a.values.begin() + lo, a.values.begin() + hi);
    });
    parallel_for(compact_parts, hardware_threads(), [&](int64_t t) {
      const RowOffset lo = window_begin[t];
      RowOffset w = destination(part_first(t));
      for (int32_t i = part_first(t); i < part_first(t + 1); ++i)
        for (RowOffset q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) {
          const bool saved = q >= lo;
          const GlobalIndex c = global(saved ? saved_cols[t][q - lo] : a.col_idx[q]);
          if (outside(c)) continue;
          local_cols[w] = static_cast<int32_t>(c - b), a.values[w++] = saved ? saved_values[t][q - lo] : a.values[q];
        }
    });
    const RowOffset kept = a.row_ptr[rows] - rb.halo.row_ptr[rows];
    for_parts([&](int32_t first, int32_t last, int64_t) {
      for (int32_t i = first; i < last; ++i) a.row_ptr[i] = destination(i);
    });
    a.row_ptr[static_cast<size_t>(rows)] = kept;
    a.values.resize(static_cast<size_t>(kept));
  }
  if constexpr (in_place) {
    a.col_idx.resize(a.values.size());
    local.col_idx = std::move(a.col_idx);
  } else {
    a.col_idx = HostVector<Column>();  // the global columns go before the rest is kept
  }
  local.row_ptr = std::move(a.row_ptr);
  local.values = std::move(a.values);
  receives_by_owner(rb.plan, cp);
  return rb;
}

// Rows [b, e) of a, with global columns.
CsrMatrix row_slice(const CsrMatrix& a, int32_t b, int32_t e) {
  CsrMatrix s;
  s.rows = e - b, s.cols = a.cols;
  s.row_ptr.resize(static_cast<size_t>(e - b) + 1);
  for (int32_t i = b; i <= e; ++i) s.row_ptr[static_cast<size_t>(i - b)] = a.row_ptr[i] - a.row_ptr[b];
  s.col_idx.assign(a.col_idx.begin() + a.row_ptr[b], a.col_idx.begin() + a.row_ptr[e]);
  s.values.assign(a.values.begin() + a.row_ptr[b], a.values.begin() + a.row_ptr[e]);
  return s;
}

void check_partition(const RowPartition& p, GlobalIndex rows, int rank, const char* what) {
  if (p.first_row.front() != 0 || p.first_row.back() != rows)
    throw Error(std::string(what) + ": the partition does not cover the matrix's rows");
  if (rank < 0 || rank >= p.ranks())
    throw Error(std::string(what) + ": rank " + std::to_string(rank) + " of " + std::to_string(p.ranks()));
  if (p.end(rank) - p.begin(rank) > std::numeric_limits<int32_t>::max())
    throw Error(std::string(what) + ": rank " + std::to_string(rank) + "'s " + std::to_string(p.end(rank) - p.begin(rank)) +
                " rows are more than a rank's 32-bit row indices allow: use more ranks");
}

}  // namespace

RankBlocks rank_blocks(const CsrMatrix& a, const RowPartition& p, int rank) {
  if (a.rows != a.cols) throw Error("rank_blocks: the matrix is not square");
  check_partition(p, a.rows, rank, "rank_blocks");
  const int32_t b = static_cast<int32_t>(p.begin(rank)), e = static_cast<int32_t>(p.end(rank));  // a.rows bounds them
  RankBlocks rb = split_rows(row_slice(a, b, e), p, p, rank);
  // sends: for each peer q, the distinct columns in [b, e) that q's rows hold, sorted (= q's receive from us)
  for (int q = 0; q < p.ranks(); ++q) {
    if (q == rank) continue;
    std::vector<int32_t> cols;
    for (int32_t i = static_cast<int32_t>(p.begin(q)); i < p.end(q); ++i)
      for (RowOffset k = a.row_ptr[i]; k < a.row_ptr[i + 1]; ++k)
        if (a.col_idx[k] >= b && a.col_idx[k] < e) cols.push_back(a.col_idx[k] - b);
    if (cols.empty()) continue;
    std::sort(cols.begin(), cols.end());
    cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
    rb.plan.send.push_back({q, std::move(cols)});
  }
  return rb;
}

namespace {

// The sends by structural symmetry: peer q needs x_i exactly when row i has a column that q owns (read off the
// halo block).
// The sends by structural symmetry: peer q needs x_i exactly when row i has a column q owns. for_each_row(visit)
// calls visit(i, slots, count) for the rows that hold halo entries, i increasing, each row's slots sorted.
template <class ForEachRow>
void sends_by_symmetry(HaloPlan& plan, const RowPartition& p, ForEachRow&& for_each_row) {
  std::vector<std::vector<int32_t>> to(static_cast<size_t>(p.ranks()));
  for_each_row([&](int32_t i, const int32_t* slots, int64_t count) {
    int last = -1;
    for (int64_t k = 0; k < count; ++k) {  // sorted slots: owners in increasing order
      const int q = p.owner(plan.halo_columns[static_cast<size_t>(slots[k])]);
      if (q != last) to[static_cast<size_t>(q)].push_back(i), last = q;
    }
  });
  for (int q = 0; q < p.ranks(); ++q)
    if (!to[static_cast<size_t>(q)].empty()) plan.send.push_back({q, std::move(to[static_cast<size_t>(q)])});
}

void sends_by_symmetry(RankBlocks& rb, const RowPartition& p) {
  const CsrMatrix& h = rb.halo;
  sends_by_symmetry(rb.plan, p, [&](auto&& visit) {
    for (int32_t i = 0; i < h.rows; ++i)
      if (h.row_ptr[i + 1] > h.row_ptr[i]) visit(i, h.col_idx.data() + h.row_ptr[i], h.row_ptr[i + 1] - h.row_ptr[i]);
  });
}

}  // namespace

HaloPlan halo_plan(const HeldRows& halo, std::vector<GlobalIndex> halo_columns, const RowPartition& p, int rank) {
  check_partition(p, p.first_row.back(), rank, "halo_plan");
  const size_t held = halo.ids.size();
  if (halo.rows != p.end(rank) - p.begin(rank) || halo.row_ptr.size() != held + 1 || halo.row_ptr.front() != 0 ||
      static_cast<size_t>(halo.row_ptr.back()) != halo.cols.size())
    throw Error("halo_plan: held rows of a " + std::to_string(halo.rows) + "-row halo block for rank " + std::to_string(rank) +
                "'s " + std::to_string(p.end(rank) - p.begin(rank)) + " rows, or their CSR inconsistent");
  if (!std::is_sorted(halo_columns.begin(), halo_columns.end()) ||
      std::adjacent_find(halo_columns.begin(), halo_columns.end()) != halo_columns.end())
    throw Error("halo_plan: the halo columns are not sorted and distinct");
  for (GlobalIndex c : halo_columns)
    if (c >= p.begin(rank) && c < p.end(rank)) throw Error("halo_plan: halo column " + std::to_string(c) + " is the rank's own");
  for (size_t j = 0; j < held; ++j) {
    if (halo.ids[j] < 0 || halo.ids[j] >= halo.rows || (j > 0 && halo.ids[j] <= halo.ids[j - 1]))
      throw Error("halo_plan: held row " + std::to_string(halo.ids[j]) + " out of order or outside the block");
    for (int32_t k = halo.row_ptr[j]; k < halo.row_ptr[j + 1]; ++k)
      if (halo.cols[static_cast<size_t>(k)] < 0 || static_cast<size_t>(halo.cols[static_cast<size_t>(k)]) >= halo_columns.size())
        throw Error("halo_plan: row " + std::to_string(halo.ids[j]) + " uses halo slot " + std::to_string(halo.cols[static_cast<size_t>(k)]) +
                    " of " + std::to_string(halo_columns.size()));
  }
  HaloPlan plan;
  plan.halo_columns = std::move(halo_columns);
  receives_by_owner(plan, p);
  sends_by_symmetry(plan, p, [&](auto&& visit) {
    for (size_t j = 0; j < held; ++j) visit(halo.ids[j], halo.cols.data() + halo.row_ptr[j], halo.row_ptr[j + 1] - halo.row_ptr[j]);
  });
  return plan;
}

RankBlocks rank_blocks_from_rows(GlobalRows rows, const RowPartition& p, int rank) {
  check_partition(p, rows.global_cols, rank, "rank_blocks_from_rows");
  if (rows.first_row != p.begin(rank) || rows.rows != p.end(rank) - p.begin(rank))
    throw Error("rank_blocks_from_rows: rows " + std::to_string(rows.first_row) + ".." + std::to_string(rows.first_row + rows.rows) +
                " given for rank " + std::to_string(rank) + ", which owns " + std::to_string(p.begin(rank)) + ".." +
                std::to_string(p.end(rank)));
  RankBlocks rb = split_rows(std::move(rows), p, p, rank);
  sends_by_symmetry(rb, p);
  return rb;
}

RankBlocks rank_blocks_from_rows(CsrMatrix rows, const RowPartition& p, int rank) {
  check_partition(p, rows.cols, rank, "rank_blocks_from_rows");
  if (rows.rows != p.end(rank) - p.begin(rank))
    throw Error("rank_blocks_from_rows: " + std::to_string(rows.rows) + " rows given for rank " + std::to_string(rank) +
                ", which owns " + std::to_string(p.end(rank) - p.begin(rank)));
  RankBlocks rb = split_rows(std::move(rows), p, p, rank);
  sends_by_symmetry(rb, p);
  return rb;
}

RankBlocks rank_blocks_rectangular(GlobalRows rows, const RowPartition& row_partition,
                                   const RowPartition& column_partition, int rank) {
  check_partition(row_partition, row_partition.first_row.back(), rank, "rank_blocks_rectangular");
  if (column_partition.ranks() != row_partition.ranks() || column_partition.first_row.back() != rows.global_cols)
    throw Error("rank_blocks_rectangular: the column partition does not cover the " + std::to_string(rows.global_cols) +
                " columns over the same ranks");
  if (rows.first_row != row_partition.begin(rank) || rows.rows != row_partition.end(rank) - row_partition.begin(rank))
    throw Error("rank_blocks_rectangular: rows " + std::to_string(rows.first_row) + ".." + std::to_string(rows.first_row + rows.rows) +
                " given for rank " + std::to_string(rank));
  return split_rows(std::move(rows), row_partition, column_partition, rank);
}

void sends_from_receives(std::vector<RankBlocks>& ranks, const RowPartition& column_partition) {
  for (RankBlocks& rb : ranks) rb.plan.send.clear();
  for (const RankBlocks& from : ranks)  // rank `from` receives these columns from each peer: the peer sends them
    for (const HaloPlan::Receive& rcv : from.plan.receive) {
      HaloPlan::Send s;
      s.peer = from.rank;
      for (GlobalIndex c : rcv.columns) s.rows.push_back(static_cast<int32_t>(c - column_partition.begin(rcv.peer)));
      ranks[static_cast<size_t>(rcv.peer)].plan.send.push_back(std::move(s));
    }
  for (RankBlocks& rb : ranks)
    std::sort(rb.plan.send.begin(), rb.plan.send.end(), [](const HaloPlan::Send& x, const HaloPlan::Send& y) { return x.peer < y.peer; });
}

std::vector<std::vector<double>> transpose_spmv_in_process(const std::vector<RankBlocks>& ranks,
                                                           const std::vector<std::vector<double>>& x_parts) {
  const size_t n = ranks.size();
  if (x_parts.size() != n) throw Error("transpose_spmv_in_process: one x part per rank expected");
  std::vector<std::vector<double>> y(n), halo_sums(n);
  for (size_t r = 0; r < n; ++r) {
    const RankBlocks& rb = ranks[r];
    y[r].assign(static_cast<size_t>(rb.local.cols), 0.0);
    halo_sums[r].assign(rb.plan.halo_columns.size(), 0.0);
    for (int32_t i = 0; i < rb.local.rows; ++i) {
      const double xi = x_parts[r].at(static_cast<size_t>(i));
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q) y[r][rb.local.col_idx[q]] += rb.local.values[q] * xi;
      for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q) halo_sums[r][rb.halo.col_idx[q]] += rb.halo.values[q] * xi;
    }
  }
  // the reverse of the halo exchange: each rank's halo sums go back to the columns' owners, added in rank order
  for (size_t q = 0; q < n; ++q)
    for (const HaloPlan::Send& snd : ranks[q].plan.send) {
      const HaloPlan& from = ranks[static_cast<size_t>(snd.peer)].plan;
      size_t offset = 0;
      for (const HaloPlan::Receive& rcv : from.receive) {
        if (rcv.peer == static_cast<int>(q)) {
          for (size_t k = 0; k < snd.rows.size(); ++k)
            y[q][static_cast<size_t>(snd.rows[k])] += halo_sums[static_cast<size_t>(snd.peer)][offset + k];
          break;
        }
        offset += rcv.columns.size();
      }
    }
  return y;
}

RowPartition partition_evenly(GlobalIndex rows, int ranks) {
  if (ranks < 1) throw Error("partition_evenly: " + std::to_string(ranks) + " ranks (at least 1)");
  if (rows < 0) throw Error("partition_evenly: " + std::to_string(rows) + " rows");
  RowPartition p;
  p.first_row.resize(static_cast<size_t>(ranks) + 1);
  // rows / ranks * r + the remainder's share, exact where rows * r would pass 64 bits
  const GlobalIndex q = rows / ranks, m = rows % ranks;
  for (int r = 0; r <= ranks; ++r) p.first_row[static_cast<size_t>(r)] = q * r + m * r / ranks;
  return p;
}

std::vector<RankBlocks> split_for_ranks(const CsrMatrix& a, const RowPartition& p) {
  if (a.rows != a.cols) throw Error("split_for_ranks: the matrix is not square");
  check_partition(p, a.rows, 0, "split_for_ranks");
  std::vector<RankBlocks> out;
  for (int r = 0; r < p.ranks(); ++r) out.push_back(rank_blocks(a, p, r));
  return out;
}

std::vector<std::vector<double>> exchange_halos_in_process(const std::vector<RankBlocks>& ranks,
                                                           const std::vector<std::vector<double>>& x_parts) {
  const size_t n = ranks.size();
  if (x_parts.size() != n) throw Error("exchange_halos_in_process: one x part per rank expected");
  std::vector<std::vector<double>> halo(n);
  for (size_t q = 0; q < n; ++q) halo[q].assign(ranks[q].plan.halo_columns.size(), 0.0);
  // every message as its sender packs it, delivered to the receiver's slots for that sender
  for (size_t r = 0; r < n; ++r)
    for (const HaloPlan::Send& snd : ranks[r].plan.send) {
      std::vector<double> message;
      for (int32_t row : snd.rows) message.push_back(x_parts[r].at(static_cast<size_t>(row)));
      const HaloPlan& to = ranks[static_cast<size_t>(snd.peer)].plan;
      size_t offset = 0;
      bool delivered = false;
      for (const HaloPlan::Receive& rcv : to.receive) {
        if (rcv.peer == static_cast<int>(r)) {
          if (rcv.columns.size() != message.size())
            throw Error("halo plan: rank " + std::to_string(r) + " sends " + std::to_string(message.size()) +
                        " entries to rank " + std::to_string(snd.peer) + ", which expects " + std::to_string(rcv.columns.size()));
          std::copy(message.begin(), message.end(), halo[static_cast<size_t>(snd.peer)].begin() + static_cast<long>(offset));
          delivered = true;
          break;
        }
        offset += rcv.columns.size();
      }
      if (!delivered)
        throw Error("halo plan: rank " + std::to_string(r) + " sends to rank " + std::to_string(snd.peer) +
                    ", which receives nothing from it");
    }
  return halo;
}

std::vector<std::vector<double>> distributed_spmv_in_process(const std::vector<RankBlocks>& ranks,
                                                             const std::vector<std::vector<double>>& x_parts) {
  const std::vector<std::vector<double>> halo = exchange_halos_in_process(ranks, x_parts);
  std::vector<std::vector<double>> y(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankBlocks& rb = ranks[r];
    y[r].assign(static_cast<size_t>(rb.local.rows), 0.0);
    for (int32_t i = 0; i < rb.local.rows; ++i) {
      double s = 0;
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q) s += rb.local.values[q] * x_parts[r][rb.local.col_idx[q]];
      for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q) s += rb.halo.values[q] * halo[r][rb.halo.col_idx[q]];
      y[r][static_cast<size_t>(i)] = s;
    }
  }
  return y;
}

RankBlocks rank_share(const CsrMatrix& a, int ranks, int rank) {
  return rank_blocks(a, partition_by_work(a, ranks), rank);
}

RankBlocks generated_share(const std::string& spec, int ranks, int rank) {
  const RowPartition p = partition_evenly(generated_rows(spec), ranks);
  if (rank < 0 || rank >= ranks) throw Error("generated_share: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  if (p.end(rank) - p.begin(rank) > std::numeric_limits<int32_t>::max())
    throw InputError(spec, 0, std::to_string(p.end(rank) - p.begin(rank)) + " rows a rank on " + std::to_string(ranks) +
                                  " ranks: more than a rank's 32-bit row indices allow (use more ranks)");
  // 32-bit global columns while the system's rows fit them (split in place); past them a stencil's 32-bit columns
  // less the lowest one its rows reach (split in place too); 64-bit ones where neither fits
  if (p.first_row.back() <= std::numeric_limits<int32_t>::max())
    return rank_blocks_from_rows(generate_rows_narrow(spec, p.begin(rank), p.end(rank)), p, rank);
  int64_t column_base = 0;
  if (std::optional<CsrMatrix> rows = generate_rows_window(spec, p.begin(rank), p.end(rank), column_base)) {
    check_partition(p, p.first_row.back(), rank, "generated_share");
    RankBlocks rb = split_rows(std::move(*rows), p, p, rank, column_base);
    sends_by_symmetry(rb, p);
    return rb;
  }
  return rank_blocks_from_rows(generate_rows(spec, p.begin(rank), p.end(rank)), p, rank);
}

}  // namespace spcg
