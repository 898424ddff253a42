#pragma once
// One level of smoothed-aggregation AMG over ranks (issue #36), the host reference the device setup is to follow:
//   - aggregates inside each rank: the one-GPU rule (sparse/aggregation.hpp) on the rank's local block only, so
//     none crosses a rank boundary and the tentative prolongator is block diagonal over the ranks (Ginkgo's
//     distributed PGM builds its aggregates the same way, PR #1403);
//   - coarse rows numbered rank by rank (rank r's aggregates after those of ranks 0..r-1): the coarse level's own
//     row partition;
//   - the smoothed prolongator P = (I - omega D^-1 A) P0, row i of it from A's row i and the P0 rows of its
//     columns: a halo column's P0 row (one entry: its aggregate's global number and 1 / sqrt(its size)) travels
//     with the fine level's halo plan, as x does;
//   - the Galerkin product A_c = P' A P: each rank forms A P for its rows (the P rows of its halo columns travel
//     the same way), then P_r' (A P)_r, the partial coarse rows of every coarse row its P rows touch, and sends
//     each partial row to the rank that owns it, which sums them in rank order (the deterministic order the
//     device's sums over ranks keep).
// In-process over all ranks' blocks (as distributed_spmv_in_process is), with std::map accumulation: a reference
// to hold the device to, not a fast path.
#include <cstdint>
#include <vector>

#include "sparse/aggregation.hpp"
#include "spcg/partition.hpp"

namespace spcg {

struct RankAggregationLevel {
  Aggregates aggregates;   // of the rank's local rows, numbered from 0 within the rank
  GlobalIndex first_coarse = 0;  // the rank's first coarse row: its aggregates are coarse rows first_coarse + a
  // The rank's rows of the smoothed prolongator: local rows x global coarse columns (those of its own aggregates
  // and of its neighbours' next to its boundary).
  std::vector<std::vector<std::pair<GlobalIndex, double>>> prolongator;
  // The rank's rows of A_c = P' A P: its coarse rows x global coarse columns, each row sorted by column.
  std::vector<std::vector<std::pair<GlobalIndex, double>>> coarse;
};

// The level for every rank of `ranks` (rank_blocks of one A over partition p), strength threshold theta,
// aggregation seed, and omega the prolongator's damping (the one-GPU rule: 4 / (3 lambda_max(D^-1 A))).
// Error when A has a non-positive diagonal.
std::vector<RankAggregationLevel> distributed_aggregation_level_in_process(const std::vector<RankBlocks>& ranks,
                                                                           const RowPartition& p, double theta,
                                                                           uint64_t seed, double omega);

// The coarse level's row partition: rank r owns coarse rows [first_coarse_r, first_coarse_{r+1}).
RowPartition coarse_partition(const std::vector<RankAggregationLevel>& level);

// A hierarchy over ranks: level 0 the fine blocks; each next level's operator the previous level's P'AP, split over
// the same ranks by the coarse partition into blocks of its own (local, halo, plan: rank_blocks_from_rows), until a
// level has at most `coarsest_rows` rows, `max_levels` levels, or an aggregation that no longer coarsens (fewer
// than 10 % fewer rows). omega on every level is (4/3) / a Gershgorin bound of D^-1 A's largest eigenvalue, the
// bound a max over the ranks (the one-GPU setup takes a Lanczos estimate instead).
struct DistributedLevel {
  RowPartition partition;
  std::vector<RankBlocks> ranks;
  double omega = 0;                          // the prolongator's damping to the next level (none on the last)
  std::vector<RankAggregationLevel> to_next;  // the aggregation, P and P'AP to the next level (none on the last)
};
std::vector<DistributedLevel> distributed_hierarchy_in_process(std::vector<RankBlocks> fine, const RowPartition& p,
                                                               double theta, uint64_t seed, GlobalIndex coarsest_rows,
                                                               int max_levels);

// A level gathered onto its first `ranks` ranks (AmgX's consolidation, hypre's agglomeration: a coarse level too
// small to keep every GPU busy): the rows re-split evenly over those, the other ranks left with none, the operator
// the same. Every rank's rows travel to their new owner (here: read off the level's blocks).
DistributedLevel agglomerated(const DistributedLevel& level, int ranks);

}  // namespace spcg
