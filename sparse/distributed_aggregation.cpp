#include "sparse/distributed_aggregation.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>

#include "spcg/error.hpp"

namespace spcg {
namespace {

using SparseRow = std::map<GlobalIndex, double>;  // a row by global column, summed as entries arrive

std::vector<std::pair<GlobalIndex, double>> entries_of(const SparseRow& row) { return {row.begin(), row.end()}; }

// Where rank r's halo slot h points: the owning rank and that rank's local row.
struct HaloSource {
  int rank;
  int32_t row;
};
HaloSource source_of(const std::vector<RankBlocks>& ranks, const RowPartition& p, int r, int32_t slot) {
  const GlobalIndex column = ranks[static_cast<size_t>(r)].plan.halo_columns[static_cast<size_t>(slot)];
  const int q = p.owner(column);
  return {q, static_cast<int32_t>(column - p.begin(q))};
}

// row i of M (a rank's local and halo blocks) times the rows `rows_of(rank, local row)` of a matrix whose rows the
// ranks own, into `out` scaled by `scale`.
template <class RowsOf>
void add_row_times(const std::vector<RankBlocks>& ranks, const RowPartition& p, int r, int32_t i, double scale,
                   const RowsOf& rows_of, SparseRow& out) {
  const RankBlocks& rb = ranks[static_cast<size_t>(r)];
  for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q)
    for (const auto& [c, v] : rows_of(r, rb.local.col_idx[q])) out[c] += scale * rb.local.values[q] * v;
  for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q) {
    const HaloSource s = source_of(ranks, p, r, rb.halo.col_idx[q]);  // (the halo exchange's delivery)
    for (const auto& [c, v] : rows_of(s.rank, s.row)) out[c] += scale * rb.halo.values[q] * v;
  }
}

}  // namespace

std::vector<RankAggregationLevel> distributed_aggregation_level_in_process(const std::vector<RankBlocks>& ranks,
                                                                           const RowPartition& p, double theta,
                                                                           uint64_t seed, double omega) {
  const int n_ranks = static_cast<int>(ranks.size());
  if (n_ranks != p.ranks()) throw Error("distributed aggregation: " + std::to_string(n_ranks) + " blocks for " +
                                        std::to_string(p.ranks()) + " ranks");
  std::vector<RankAggregationLevel> level(ranks.size());
  // aggregates inside each rank, numbered rank by rank
  GlobalIndex coarse_rows = 0;
  for (int r = 0; r < n_ranks; ++r) {
    RankAggregationLevel& l = level[static_cast<size_t>(r)];
    l.aggregates = aggregate(strength_graph(ranks[static_cast<size_t>(r)].local, theta), seed);
    l.first_coarse = coarse_rows;
    coarse_rows += l.aggregates.count;
  }
  // P0's rows: one entry, the row's aggregate (global number) and 1 / sqrt(its size)
  std::vector<std::vector<int32_t>> sizes(ranks.size());
  for (int r = 0; r < n_ranks; ++r) {
    const Aggregates& a = level[static_cast<size_t>(r)].aggregates;
    sizes[static_cast<size_t>(r)].assign(static_cast<size_t>(a.count), 0);
    for (int32_t of : a.of) ++sizes[static_cast<size_t>(r)][static_cast<size_t>(of)];
  }
  auto tentative_row = [&](int r, int32_t row) {
    const RankAggregationLevel& l = level[static_cast<size_t>(r)];
    const int32_t of = l.aggregates.of[static_cast<size_t>(row)];
    return std::vector<std::pair<GlobalIndex, double>>{
        {l.first_coarse + of, 1.0 / std::sqrt(static_cast<double>(sizes[static_cast<size_t>(r)][static_cast<size_t>(of)]))}};
  };
  // P = (I - omega D^-1 A) P0, row by row
  for (int r = 0; r < n_ranks; ++r) {
    const RankBlocks& rb = ranks[static_cast<size_t>(r)];
    RankAggregationLevel& l = level[static_cast<size_t>(r)];
    l.prolongator.resize(static_cast<size_t>(rb.local.rows));
    for (int32_t i = 0; i < rb.local.rows; ++i) {
      double d = 0;
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q)
        if (rb.local.col_idx[q] == i) d = rb.local.values[q];
      if (!(d > 0))
        throw Error("distributed aggregation: row " + std::to_string(rb.row_begin + i + 1) + " has diagonal " + std::to_string(d));
      SparseRow row;
      for (const auto& [c, v] : tentative_row(r, i)) row[c] += v;
      add_row_times(ranks, p, r, i, -omega / d, tentative_row, row);
      l.prolongator[static_cast<size_t>(i)] = entries_of(row);
    }
  }
  // A P for each rank's rows (the halo rows of P travel), then P_r' (A P)_r: partial coarse rows, summed by their
  // owners in rank order
  auto prolongator_row = [&](int r, int32_t row) -> const std::vector<std::pair<GlobalIndex, double>>& {
    return level[static_cast<size_t>(r)].prolongator[static_cast<size_t>(row)];
  };
  std::vector<std::map<GlobalIndex, SparseRow>> partial(ranks.size());  // by sending rank: coarse row -> entries
  for (int r = 0; r < n_ranks; ++r)
    for (int32_t i = 0; i < ranks[static_cast<size_t>(r)].local.rows; ++i) {
      SparseRow ap;
      add_row_times(ranks, p, r, i, 1.0, prolongator_row, ap);
      for (const auto& [c, pic] : prolongator_row(r, i)) {
        SparseRow& to = partial[static_cast<size_t>(r)][c];
        for (const auto& [k, v] : ap) to[k] += pic * v;
      }
    }
  const RowPartition coarse = coarse_partition(level);
  for (int o = 0; o < n_ranks; ++o) {
    RankAggregationLevel& l = level[static_cast<size_t>(o)];
    std::vector<SparseRow> rows(static_cast<size_t>(coarse.end(o) - coarse.begin(o)));
    for (int r = 0; r < n_ranks; ++r)  // the senders in rank order
      for (auto it = partial[static_cast<size_t>(r)].lower_bound(coarse.begin(o));
           it != partial[static_cast<size_t>(r)].end() && it->first < coarse.end(o); ++it)
        for (const auto& [k, v] : it->second) rows[static_cast<size_t>(it->first - coarse.begin(o))][k] += v;
    l.coarse.clear();
    for (const SparseRow& row : rows) l.coarse.push_back(entries_of(row));
  }
  return level;
}

RowPartition coarse_partition(const std::vector<RankAggregationLevel>& level) {
  RowPartition p;
  p.first_row.clear();
  for (const RankAggregationLevel& l : level) p.first_row.push_back(l.first_coarse);
  p.first_row.push_back(level.empty() ? 0 : level.back().first_coarse + level.back().aggregates.count);
  return p;
}

namespace {

// max over the rows of sum_j |a_ij| / a_ii: a bound of D^-1 A's eigenvalues, taken over every rank's rows.
double gershgorin_bound(const std::vector<RankBlocks>& ranks) {
  double bound = 0;
  for (const RankBlocks& rb : ranks)
    for (int32_t i = 0; i < rb.local.rows; ++i) {
      double d = 0, sum = 0;
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q) {
        sum += std::abs(rb.local.values[q]);
        if (rb.local.col_idx[q] == i) d = rb.local.values[q];
      }
      for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q) sum += std::abs(rb.halo.values[q]);
      if (d > 0) bound = std::max(bound, sum / d);
    }
  return bound;
}

}  // namespace

std::vector<DistributedLevel> distributed_hierarchy_in_process(std::vector<RankBlocks> fine, const RowPartition& p,
                                                               double theta, uint64_t seed, GlobalIndex coarsest_rows,
                                                               int max_levels) {
  std::vector<DistributedLevel> levels;
  levels.push_back({p, std::move(fine), 0, {}});
  while (static_cast<int>(levels.size()) < max_levels && levels.back().partition.first_row.back() > coarsest_rows) {
    DistributedLevel& at = levels.back();
    at.omega = 4.0 / (3.0 * gershgorin_bound(at.ranks));
    at.to_next = distributed_aggregation_level_in_process(at.ranks, at.partition, theta, seed, at.omega);
    const RowPartition coarse = coarse_partition(at.to_next);
    const GlobalIndex rows = at.partition.first_row.back(), next_rows = coarse.first_row.back();
    if (next_rows == 0 || next_rows > rows - rows / 10) {  // no longer coarsens: this level is the last
      at.to_next.clear(), at.omega = 0;
      break;
    }
    std::vector<RankBlocks> next;
    for (int r = 0; r < coarse.ranks(); ++r) {
      const RankAggregationLevel& l = at.to_next[static_cast<size_t>(r)];
      GlobalRows g;
      g.first_row = coarse.begin(r), g.global_cols = next_rows, g.rows = static_cast<int32_t>(coarse.end(r) - coarse.begin(r));
      g.row_ptr.assign(1, 0);
      for (const auto& row : l.coarse) {
        for (const auto& [c, v] : row) g.col_idx.push_back(c), g.values.push_back(v);
        g.row_ptr.push_back(static_cast<RowOffset>(g.col_idx.size()));
      }
      next.push_back(rank_blocks_from_rows(std::move(g), coarse, r));
    }
    levels.push_back({coarse, std::move(next), 0, {}});
  }
  return levels;
}

DistributedLevel agglomerated(const DistributedLevel& level, int ranks) {
  const int all = level.partition.ranks();
  if (ranks < 1 || ranks > all)
    throw Error("agglomerated: " + std::to_string(ranks) + " ranks of " + std::to_string(all));
  const GlobalIndex n = level.partition.first_row.back();
  RowPartition p = partition_evenly(n, ranks);
  p.first_row.resize(static_cast<size_t>(all) + 1, n);  // the ranks past `ranks` own no rows
  // each new owner's rows with global columns, gathered from the blocks that hold them
  DistributedLevel out;
  out.partition = p;
  for (int r = 0; r < all; ++r) {
    GlobalRows g;
    g.first_row = p.begin(r), g.global_cols = n, g.rows = static_cast<int32_t>(p.end(r) - p.begin(r));
    g.row_ptr.assign(1, 0);
    for (GlobalIndex row = p.begin(r); row < p.end(r); ++row) {
      const int from = level.partition.owner(row);
      const RankBlocks& rb = level.ranks[static_cast<size_t>(from)];
      const int32_t i = static_cast<int32_t>(row - rb.row_begin);
      std::vector<std::pair<GlobalIndex, double>> entries;
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q)
        entries.emplace_back(rb.row_begin + rb.local.col_idx[q], rb.local.values[q]);
      for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q)
        entries.emplace_back(rb.plan.halo_columns[static_cast<size_t>(rb.halo.col_idx[q])], rb.halo.values[q]);
      std::sort(entries.begin(), entries.end());
      for (const auto& [c, v] : entries) g.col_idx.push_back(c), g.values.push_back(v);
      g.row_ptr.push_back(static_cast<RowOffset>(g.col_idx.size()));
    }
    out.ranks.push_back(rank_blocks_from_rows(std::move(g), p, r));
  }
  return out;
}

}  // namespace spcg
