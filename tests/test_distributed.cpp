// Solving on several GPUs (issue #25), with ranks as threads of one process on the one GPU and the in-process
// stand-in communicator (NCCL refuses two ranks on one device): a rank's own rows of a generated problem give
// the same blocks and plan as cutting them from the whole matrix; cg, multi-cg and block-cg, with no
// preconditioner and with Jacobi, on 1, 2, 3 and 5 ranks reach the one-GPU solution (host-checked residual,
// iterations within rounding's reach); a deterministic solve repeats bit for bit and, on one rank, equals the
// one-GPU multi-cg bit for bit; a rank that fails ends every rank with an error, no hang. NCCL with one rank
// runs the same solve. The distributed preconditioners (issue #33, item 5): Chebyshev's interval is the same
// on every rank and one GPU's to rounding, and so is its apply; block-Jacobi inverts the rank-local blocks (cut
// at rank boundaries) the host computes; Chebyshev-PCG and block-Jacobi-PCG on 1, 2, 3 ranks take one GPU's
// iterations within 2 %; auto chooses what is distributed, alike on every rank, and says why; what is not
// distributed is refused by name (host tests). GPU tests skip without a GPU.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <Eigen/Sparse>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>
#include <type_traits>

#include "kernels/communicator.hpp"
#include "kernels/device_array.hpp"
#include "kernels/distributed_operator.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "kernels/registry.hpp"
#include "solver/amg_ranks.hpp"
#include "solver/iteration_engine.hpp"
#include "solver/preconditioner.hpp"
#include "solver/spectrum.hpp"
#include "spcg/distributed.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "spcg/partition.hpp"
#include "spcg/spcg.hpp"
#include "sparse/distributed_aggregation.hpp"
#include "sparse/eigen_bridge.hpp"
#include "sparse/problem.hpp"
#include "tests/residual_checks.hpp"
#include "tests/test_util.hpp"

using namespace spcg;
using spcg::test::max_relative_difference;
using spcg::test::residual_rounding;

namespace {

// ---- host: a rank's own rows ----

void expect_same_csr(const CsrMatrix& a, const CsrMatrix& b, const std::string& what) {
  EXPECT_EQ(a.rows, b.rows) << what;
  EXPECT_EQ(a.cols, b.cols) << what;
  EXPECT_EQ(std::vector<int32_t>(a.row_ptr.begin(), a.row_ptr.end()), std::vector<int32_t>(b.row_ptr.begin(), b.row_ptr.end())) << what;
  EXPECT_EQ(std::vector<int32_t>(a.col_idx.begin(), a.col_idx.end()), std::vector<int32_t>(b.col_idx.begin(), b.col_idx.end())) << what;
  EXPECT_EQ(std::vector<double>(a.values.begin(), a.values.end()), std::vector<double>(b.values.begin(), b.values.end())) << what;
}

// Two plans' receives (peer, global columns) or sends (peer, local rows) are the same.
template <class Transfer>
void expect_same_transfers(const std::vector<Transfer>& a, const std::vector<Transfer>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].peer, b[i].peer) << what << " transfer " << i;
    if constexpr (std::is_same_v<Transfer, HaloPlan::Receive>) EXPECT_EQ(a[i].columns, b[i].columns) << what << " transfer " << i;
    else EXPECT_EQ(a[i].rows, b[i].rows) << what << " transfer " << i;
  }
}

// generate_rows gives exactly generate's rows, and the plan built from them (sends by structural symmetry)
// equals the plan cut from the whole matrix (sends from the peers' rows), for every rank of 1, 2, 3 and 5.
TEST(RankRows, OwnRowsGiveTheWholeMatrixBlocksAndPlan) {
  for (const std::string spec : {"poisson2d:13", "poisson2d9:7", "poisson3d:6", "poisson3d27:4", "aniso3d:5",
                                 "jump3d:6", "powerlaw:300", "poisson2d:1", "poisson3d:0"}) {
    const CsrMatrix a = generate(spec);
    EXPECT_EQ(generated_rows(spec), a.rows) << spec;
    for (const int size : {1, 2, 3, 5}) {
      const RowPartition p = partition_evenly(a.rows, size);
      for (int r = 0; r < size; ++r) {
        const std::string what = spec + " rank " + std::to_string(r) + " of " + std::to_string(size);
        const GlobalRows rows = generate_rows(spec, p.begin(r), p.end(r));
        const RankBlocks own = rank_blocks_from_rows(rows, p, r), cut = rank_blocks(a, p, r);
        // the same rows with 32-bit global columns, split in place
        const RankBlocks narrow = rank_blocks_from_rows(generate_rows_narrow(spec, p.begin(r), p.end(r)), p, r);
        expect_same_csr(narrow.local, cut.local, what + " narrow local");
        expect_same_csr(narrow.halo, cut.halo, what + " narrow halo");
        EXPECT_EQ(narrow.plan.halo_columns, cut.plan.halo_columns) << what;
        expect_same_transfers(narrow.plan.send, cut.plan.send, what + " narrow send");
        expect_same_csr(own.local, cut.local, what + " local");
        expect_same_csr(own.halo, cut.halo, what + " halo");
        EXPECT_EQ(own.plan.halo_columns, cut.plan.halo_columns) << what;
        expect_same_transfers(own.plan.receive, cut.plan.receive, what + " receive");
        expect_same_transfers(own.plan.send, cut.plan.send, what + " send");
      }
    }
  }
  EXPECT_THROW(generate_rows("poisson2d:4", 3, 17), InputError);
  EXPECT_THROW(generate_rows_narrow("poisson3d:1300", 0, 10), InputError);  // 2.197e9 rows: past 32-bit columns
  EXPECT_THROW(rank_blocks_from_rows(generate_rows("poisson2d:4", 0, 5), partition_evenly(16, 2), 0), Error);
}

// The library's partition (what the CLI's ranks use): rank_share is partition_by_work's blocks of the whole
// matrix, generated_share the even partition's blocks made from the rank's own rows; a problem past 32-bit rows
// is refused naming it.
TEST(RankRows, LibraryPartitionGivesEachRankItsShare) {
  for (const std::string spec : {"poisson2d:13", "jump3d:6", "powerlaw:300"}) {
    const CsrMatrix a = generate(spec);
    for (const int size : {1, 3}) {
      const RowPartition by_work = partition_by_work(a, size), even = partition_evenly(a.rows, size);
      for (int r = 0; r < size; ++r) {
        const std::string what = spec + " rank " + std::to_string(r) + " of " + std::to_string(size);
        const RankBlocks read = rank_share(a, size, r), cut = rank_blocks(a, by_work, r);
        EXPECT_EQ(read.row_begin, by_work.begin(r)) << what;
        EXPECT_EQ(read.row_end, by_work.end(r)) << what;
        expect_same_csr(read.local, cut.local, what + " read local");
        expect_same_csr(read.halo, cut.halo, what + " read halo");
        const RankBlocks made = generated_share(spec, size, r), even_cut = rank_blocks(a, even, r);
        EXPECT_EQ(made.row_begin, even.begin(r)) << what;
        EXPECT_EQ(made.row_end, even.end(r)) << what;
        expect_same_csr(made.local, even_cut.local, what + " generated local");
        expect_same_csr(made.halo, even_cut.halo, what + " generated halo");
        expect_same_transfers(made.plan.send, even_cut.plan.send, what + " generated send");
      }
    }
  }
  try {
    generated_share("poisson3d:1300", 1, 0);  // 2.197e9 rows on one rank: past a rank's 32-bit rows, refused unmade
    ADD_FAILURE() << "no refusal";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("poisson3d:1300"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("more ranks"), std::string::npos) << e.what();
  }
}

// ---- 64-bit global indices, without 2^31 rows: a rank of a few thousand rows where the global numbers pass 2^31 ----

// poisson3d:1400 (2.744e9 rows) split so that rank 1 is small and either crosses 2^31 or begins past it: its rows
// as generated, its blocks and its plan against the stencil's columns worked out here in 64-bit arithmetic.
TEST(RankRows, GlobalRowsPast32BitsKeepTheirColumns) {
  const std::string spec = "poisson3d:1400";
  const GlobalIndex n = 1400, rows = n * n * n, two31 = GlobalIndex{1} << 31;
  ASSERT_EQ(generated_rows(spec), rows);
  for (const GlobalIndex first : {two31 - 3000, two31 + 100}) {
    RowPartition p;
    p.first_row = {0, first, first + 6000, rows};
    const std::string what = "rank 1 from row " + std::to_string(first);
    const GlobalRows mine = generate_rows(spec, p.begin(1), p.end(1));
    ASSERT_EQ(mine.rows, 6000) << what;
    ASSERT_EQ(mine.first_row, first) << what;
    ASSERT_EQ(mine.global_cols, rows) << what;
    const RankBlocks rb = rank_blocks_from_rows(mine, p, 1);
    EXPECT_EQ(rb.row_begin, first) << what;
    EXPECT_EQ(rb.rows(), 6000) << what;
    // each row's stencil columns, split by owner: the local block holds the ones in [first, first + 6000)
    std::set<GlobalIndex> halo_expected;
    std::map<int, std::set<int32_t>> sends_expected;  // peer -> local rows that hold a column it owns
    for (int32_t i = 0; i < rb.rows(); ++i) {
      const GlobalIndex g = first + i, x = g % n, y = g / n % n, z = g / (n * n);
      std::vector<GlobalIndex> cols;
      if (z > 0) cols.push_back(g - n * n);
      if (y > 0) cols.push_back(g - n);
      if (x > 0) cols.push_back(g - 1);
      cols.push_back(g);
      if (x + 1 < n) cols.push_back(g + 1);
      if (y + 1 < n) cols.push_back(g + n);
      if (z + 1 < n) cols.push_back(g + n * n);
      std::vector<GlobalIndex> local_cols, halo_cols;
      for (GlobalIndex c : cols) {
        if (c >= p.begin(1) && c < p.end(1)) local_cols.push_back(c);
        else halo_cols.push_back(c), halo_expected.insert(c), sends_expected[p.owner(c)].insert(i);
      }
      ASSERT_EQ(rb.local.row_length(i), static_cast<int32_t>(local_cols.size())) << what << " row " << g;
      for (int32_t q = rb.local.row_ptr[i], t = 0; q < rb.local.row_ptr[i + 1]; ++q, ++t) {
        EXPECT_EQ(first + rb.local.col_idx[q], local_cols[static_cast<size_t>(t)]) << what << " row " << g;
        EXPECT_EQ(rb.local.values[q], local_cols[static_cast<size_t>(t)] == g ? 6.0 : -1.0) << what << " row " << g;
      }
      ASSERT_EQ(rb.halo.row_length(i), static_cast<int32_t>(halo_cols.size())) << what << " row " << g;
      for (int32_t q = rb.halo.row_ptr[i], t = 0; q < rb.halo.row_ptr[i + 1]; ++q, ++t)
        EXPECT_EQ(rb.plan.halo_columns[static_cast<size_t>(rb.halo.col_idx[q])], halo_cols[static_cast<size_t>(t)]) << what << " row " << g;
    }
    EXPECT_EQ(rb.plan.halo_columns, std::vector<GlobalIndex>(halo_expected.begin(), halo_expected.end())) << what;
    ASSERT_EQ(rb.plan.receive.size(), 2u) << what;  // from rank 0 (below) and rank 2 (above)
    EXPECT_EQ(rb.plan.receive[0].peer, 0) << what;
    EXPECT_EQ(rb.plan.receive[1].peer, 2) << what;
    for (const HaloPlan::Receive& r : rb.plan.receive)
      for (GlobalIndex c : r.columns) EXPECT_EQ(p.owner(c), r.peer) << what << " column " << c;
    ASSERT_EQ(rb.plan.send.size(), sends_expected.size()) << what;
    for (const HaloPlan::Send& snd : rb.plan.send)
      EXPECT_EQ(std::set<int32_t>(snd.rows.begin(), snd.rows.end()), sends_expected[snd.peer]) << what << " to " << snd.peer;
  }
}

// Past 2^31 rows generated_share makes a stencil's share with 32-bit columns less the lowest column its rows
// reach (generate_rows_window), split in place: the same blocks and plan as the 64-bit rows give, for ranks below,
// across and past 2^31, on the 7- and 27-point stencils (the 27-point reach, a plane and a row and one, is the
// widest); and the window's columns are the stencil's, less its base.
TEST(RankRows, GeneratedShareWindowEqualsTheWideRows) {
  const GlobalIndex two31 = GlobalIndex{1} << 31;
  for (const std::string spec : {"poisson3d:1300", "poisson3d27:1292"}) {
    const GlobalIndex rows = generated_rows(spec);
    ASSERT_GT(rows, two31) << spec;
    const int ranks = 20000;  // ~110K rows a rank: cheap shares of a system past 2^31 rows
    const RowPartition p = partition_evenly(rows, ranks);
    const int across = p.owner(two31);
    for (const int r : {0, 1, across - 1, across, across + 1, ranks - 1}) {
      const std::string what = spec + " rank " + std::to_string(r) + " (rows " + std::to_string(p.begin(r)) + "..)";
      const RankBlocks window = generated_share(spec, ranks, r);
      const RankBlocks wide = rank_blocks_from_rows(generate_rows(spec, p.begin(r), p.end(r)), p, r);
      EXPECT_EQ(window.row_begin, wide.row_begin) << what;
      EXPECT_EQ(window.row_end, wide.row_end) << what;
      expect_same_csr(window.local, wide.local, what + " local");
      expect_same_csr(window.halo, wide.halo, what + " halo");
      EXPECT_EQ(window.plan.halo_columns, wide.plan.halo_columns) << what;
      expect_same_transfers(window.plan.receive, wide.plan.receive, what + " receive");
      expect_same_transfers(window.plan.send, wide.plan.send, what + " send");
      int64_t base = -1;
      const std::optional<CsrMatrix> rows_made = generate_rows_window(spec, p.begin(r), p.end(r), base);
      ASSERT_TRUE(rows_made.has_value()) << what;
      const GlobalRows reference = generate_rows(spec, p.begin(r), p.end(r));
      EXPECT_LE(base, p.begin(r)) << what;
      ASSERT_EQ(rows_made->col_idx.size(), reference.col_idx.size()) << what;
      for (size_t q = 0; q < reference.col_idx.size(); ++q)
        if (base + rows_made->col_idx[q] != reference.col_idx[q]) {
          ADD_FAILURE() << what << ": entry " << q << " column " << base + rows_made->col_idx[q] << " != " << reference.col_idx[q];
          break;
        }
    }
  }
  int64_t base = 0;
  EXPECT_FALSE(generate_rows_window("jump3d:6", 0, 10, base).has_value());  // made whole: not a window's
  EXPECT_FALSE(generate_rows_window("poisson2d:4", 3, 17, base).has_value());  // outside the grid
}

// The even partition of a system past 2^31 rows: exact boundaries (rows * r / ranks, worked out without overflow),
// owners on both sides of 2^31, and a rank whose rows would pass int32 refused before anything is made.
// halo_plan (a rank's plan from its halo block's held rows alone, AMG's coarse levels) gives what the whole rows'
// split gives: the same halo columns, receives and sends, on 1, 2, 3 and 5 ranks; inconsistent input is refused.
HeldRows held_rows(const CsrMatrix& halo) {
  HeldRows h;
  h.rows = halo.rows;
  for (int32_t i = 0; i < halo.rows; ++i) {
    if (halo.row_ptr[i + 1] == halo.row_ptr[i]) continue;
    h.ids.push_back(i);
    h.cols.insert(h.cols.end(), halo.col_idx.begin() + halo.row_ptr[i], halo.col_idx.begin() + halo.row_ptr[i + 1]);
    h.row_ptr.push_back(static_cast<int32_t>(h.cols.size()));
  }
  return h;
}

TEST(RankRows, HaloPlanAloneIsTheSplitsPlan) {
  for (const std::string spec : {"poisson2d:17", "jump3d:7", "poisson3d27:5"}) {
    const CsrMatrix a = generate(spec);
    for (const int size : {1, 2, 3, 5}) {
      const RowPartition p = partition_by_work(a, size);
      for (int r = 0; r < size; ++r) {
        const std::string what = spec + " rank " + std::to_string(r) + " of " + std::to_string(size);
        const RankBlocks whole = rank_blocks(a, p, r);
        const HeldRows held = held_rows(whole.halo);
        const HaloPlan alone_plan = halo_plan(held, whole.plan.halo_columns, p, r);
        EXPECT_EQ(alone_plan.halo_columns, whole.plan.halo_columns) << what;
        ASSERT_EQ(alone_plan.receive.size(), whole.plan.receive.size()) << what;
        for (size_t i = 0; i < whole.plan.receive.size(); ++i) {
          EXPECT_EQ(alone_plan.receive[i].peer, whole.plan.receive[i].peer) << what;
          EXPECT_EQ(alone_plan.receive[i].columns, whole.plan.receive[i].columns) << what;
        }
        ASSERT_EQ(alone_plan.send.size(), whole.plan.send.size()) << what;
        for (size_t i = 0; i < whole.plan.send.size(); ++i) {
          EXPECT_EQ(alone_plan.send[i].peer, whole.plan.send[i].peer) << what;
          EXPECT_EQ(alone_plan.send[i].rows, whole.plan.send[i].rows) << what;
        }
        if (!whole.plan.halo_columns.empty()) {
          std::vector<GlobalIndex> unsorted = whole.plan.halo_columns;
          std::reverse(unsorted.begin(), unsorted.end());
          if (unsorted.size() > 1) EXPECT_THROW(halo_plan(held, unsorted, p, r), Error) << what;
          std::vector<GlobalIndex> fewer(whole.plan.halo_columns.begin(), whole.plan.halo_columns.end() - 1);
          EXPECT_THROW(halo_plan(held, fewer, p, r), Error) << what;  // a slot the rows use has no column
          HeldRows shuffled = held;
          if (shuffled.ids.size() > 1) {
            std::swap(shuffled.ids.front(), shuffled.ids.back());
            EXPECT_THROW(halo_plan(shuffled, whole.plan.halo_columns, p, r), Error) << what;
          }
          HeldRows shorter = held;
          shorter.rows -= 1;
          EXPECT_THROW(halo_plan(shorter, whole.plan.halo_columns, p, r), Error) << what;
        }
      }
    }
  }
}

TEST(RankRows, EvenPartitionPast32Bits) {
  const GlobalIndex rows = GlobalIndex{1400} * 1400 * 1400;
  for (const int size : {3, 4, 7}) {
    const RowPartition p = partition_evenly(rows, size);
    for (int r = 0; r <= size; ++r)
      EXPECT_EQ(p.first_row[static_cast<size_t>(r)], static_cast<GlobalIndex>(static_cast<__int128>(rows) * r / size)) << size << " ranks";
    for (int r = 0; r < size; ++r) {
      EXPECT_EQ(p.owner(p.begin(r)), r);
      EXPECT_EQ(p.owner(p.end(r) - 1), r);
    }
  }
  const RowPartition four = partition_evenly(rows, 4);
  EXPECT_EQ(four.owner(GlobalIndex{1} << 31), 3);  // rank 3 begins at 2.058e9 and holds 2^31
  RowPartition too_big;
  too_big.first_row = {0, GlobalIndex{3} << 30};  // one rank of 3.2e9 rows
  GlobalRows none;
  none.global_cols = too_big.first_row.back();
  EXPECT_THROW(rank_blocks_from_rows(none, too_big, 0), Error);
  EXPECT_THROW(generate_rows("poisson3d:1400", 0, GlobalIndex{1} << 31), InputError);  // refused before its rows are made
}

// ---- one smoothed-aggregation level over ranks (#36's host reference) ----

// The ranks' rows of a level's prolongator (or coarse operator) as one matrix, rows in rank order.
CsrMatrix assembled(const std::vector<RankAggregationLevel>& level, bool coarse, int64_t cols) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  int32_t row = 0;
  for (const RankAggregationLevel& l : level)
    for (const auto& entries : coarse ? l.coarse : l.prolongator) {
      for (const auto& [c, v] : entries) ti.push_back(row), tj.push_back(static_cast<int32_t>(c)), tv.push_back(v);
      ++row;
    }
  return csr_from_triplets(row, static_cast<int32_t>(cols), ti, tj, tv);
}

// On 1, 2, 3 and 5 ranks: the aggregates stay inside each rank and cover its rows; P0'P0 = I; P = (I - omega
// D^-1 A) P0 and the coarse operator P'AP equal Eigen's products of the whole matrices (the assembled P0 and P);
// the coarse operator is symmetric; on one rank the aggregates are the one-GPU rule's.
TEST(DistributedAggregation, LevelOverRanksIsTheGalerkinProductOfItsProlongator) {
  const double theta = 0.08, omega = 0.5;
  for (const std::string spec : {"poisson2d:23", "jump3d:9", "aniso3d:8", "poisson3d27:6"}) {
    const CsrMatrix a = generate(spec);
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = spec + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(a, size);
      const std::vector<RankBlocks> ranks = split_for_ranks(a, p);
      const std::vector<RankAggregationLevel> level = distributed_aggregation_level_in_process(ranks, p, theta, 7, omega);
      const RowPartition coarse = coarse_partition(level);
      ASSERT_EQ(coarse.ranks(), size) << what;
      const int64_t nc = coarse.first_row.back();
      // aggregates: inside each rank, every row in one, none empty; P0 from them
      std::vector<int32_t> ti, tj;
      std::vector<double> tv;
      for (int r = 0; r < size; ++r) {
        const Aggregates& agg = level[static_cast<size_t>(r)].aggregates;
        ASSERT_EQ(static_cast<int32_t>(agg.of.size()), ranks[static_cast<size_t>(r)].rows()) << what;
        std::vector<int32_t> count(static_cast<size_t>(agg.count), 0);
        for (int32_t of : agg.of) {
          ASSERT_GE(of, 0) << what;
          ASSERT_LT(of, agg.count) << what;
          ++count[static_cast<size_t>(of)];
        }
        for (int32_t c : count) EXPECT_GT(c, 0) << what;
        EXPECT_EQ(coarse.begin(r), level[static_cast<size_t>(r)].first_coarse) << what;
        for (int32_t i = 0; i < ranks[static_cast<size_t>(r)].rows(); ++i) {
          const int32_t of = agg.of[static_cast<size_t>(i)];
          ti.push_back(static_cast<int32_t>(p.begin(r) + i)), tj.push_back(static_cast<int32_t>(coarse.begin(r) + of));
          tv.push_back(1.0 / std::sqrt(static_cast<double>(count[static_cast<size_t>(of)])));
        }
      }
      if (size == 1) {
        const Aggregates whole = aggregate(strength_graph(a, theta), 7);
        EXPECT_EQ(level[0].aggregates.of, whole.of) << what;
      }
      // dense: the test matrices have at most a few hundred rows
      const Eigen::MatrixXd A = Eigen::MatrixXd(to_eigen(a)),
                            P0 = Eigen::MatrixXd(to_eigen(csr_from_triplets(a.rows, static_cast<int32_t>(nc), ti, tj, tv)));
      EXPECT_LE((P0.transpose() * P0 - Eigen::MatrixXd::Identity(nc, nc)).cwiseAbs().maxCoeff(), 1e-14) << what << ": P0'P0";
      const Eigen::VectorXd dinv = A.diagonal().cwiseInverse();
      const Eigen::MatrixXd want_p = P0 - omega * (dinv.asDiagonal() * (A * P0));
      const Eigen::MatrixXd got_p = Eigen::MatrixXd(to_eigen(assembled(level, false, nc)));
      EXPECT_LE((got_p - want_p).cwiseAbs().maxCoeff(), 1e-14 * want_p.cwiseAbs().maxCoeff()) << what << ": P";
      const Eigen::MatrixXd want_c = want_p.transpose() * A * want_p;
      const Eigen::MatrixXd got_c = Eigen::MatrixXd(to_eigen(assembled(level, true, nc)));
      const double c_scale = want_c.cwiseAbs().maxCoeff();
      EXPECT_LE((got_c - want_c).cwiseAbs().maxCoeff(), 1e-13 * c_scale) << what << ": P'AP";
      EXPECT_LE((got_c - got_c.transpose()).cwiseAbs().maxCoeff(), 1e-13 * c_scale) << what << ": symmetric";
    }
  }
}

// A level's operator assembled from its ranks' blocks (global rows and columns).
CsrMatrix assembled_operator(const DistributedLevel& level) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (const RankBlocks& rb : level.ranks)
    for (int32_t i = 0; i < rb.rows(); ++i) {
      const int32_t row = static_cast<int32_t>(rb.row_begin + i);
      for (RowOffset q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q)
        ti.push_back(row), tj.push_back(static_cast<int32_t>(rb.row_begin + rb.local.col_idx[q])), tv.push_back(rb.local.values[q]);
      for (RowOffset q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q)
        ti.push_back(row), tj.push_back(static_cast<int32_t>(rb.plan.halo_columns[static_cast<size_t>(rb.halo.col_idx[q])])),
            tv.push_back(rb.halo.values[q]);
    }
  const int32_t n = static_cast<int32_t>(level.partition.first_row.back());
  return csr_from_triplets(n, n, ti, tj, tv);
}

// PCG iterations to rtol 1e-8 (b = ones) with a V(1,1)-cycle on the hierarchy's assembled operators and
// prolongators: damped Jacobi (1.3 / the Gershgorin bound) before and after, Eigen's LLT on the coarsest.
int pcg_iterations_with_vcycle(const std::vector<DistributedLevel>& levels) {
  std::vector<Eigen::SparseMatrix<double>> A, P;
  std::vector<Eigen::VectorXd> dinv;
  std::vector<double> weight;
  for (size_t l = 0; l < levels.size(); ++l) {
    A.push_back(Eigen::SparseMatrix<double>(to_eigen(assembled_operator(levels[l]))));
    dinv.push_back(Eigen::VectorXd(A.back().diagonal()).cwiseInverse());
    double bound = 0;
    for (int k = 0; k < A.back().outerSize(); ++k) {
      double sum = 0;
      for (Eigen::SparseMatrix<double>::InnerIterator it(A.back(), k); it; ++it) sum += std::abs(it.value());
      bound = std::max(bound, sum * dinv.back()[k]);  // (a symmetric A: column sums are row sums)
    }
    weight.push_back(1.3 / bound);
    if (l + 1 < levels.size())
      P.push_back(Eigen::SparseMatrix<double>(to_eigen(assembled(levels[l].to_next, false, levels[l + 1].partition.first_row.back()))));
  }
  const Eigen::LLT<Eigen::MatrixXd> coarsest(Eigen::MatrixXd(A.back()));
  std::function<Eigen::VectorXd(size_t, const Eigen::VectorXd&)> cycle = [&](size_t l, const Eigen::VectorXd& r) {
    if (l + 1 == A.size()) return Eigen::VectorXd(coarsest.solve(r));
    Eigen::VectorXd x = weight[l] * dinv[l].cwiseProduct(r);
    x += P[l] * cycle(l + 1, P[l].transpose() * (r - A[l] * x));
    x += weight[l] * dinv[l].cwiseProduct(r - A[l] * x);
    return x;
  };
  const Eigen::VectorXd b = Eigen::VectorXd::Ones(A[0].rows());
  Eigen::VectorXd x = Eigen::VectorXd::Zero(b.size()), r = b, z = cycle(0, r), p = z;
  double rz = r.dot(z);
  for (int it = 1; it <= 500; ++it) {
    const Eigen::VectorXd q = A[0] * p;
    const double alpha = rz / p.dot(q);
    x += alpha * p, r -= alpha * q;
    if (r.norm() <= 1e-8 * b.norm()) return it;
    z = cycle(0, r);
    const double rz_next = r.dot(z);
    p = z + (rz_next / rz) * p, rz = rz_next;
  }
  return 501;
}

// The hierarchy over ranks: each level's blocks are its operator's rows split by the coarse partition (the
// assembled operator is P'AP of the level above), and PCG with its V-cycle needs at most 1.3x the iterations of
// one rank's hierarchy (the issue's bound for aggregates kept inside ranks) on 7-point, jumping and anisotropic
// problems over 2, 3 and 5 ranks.
TEST(DistributedAggregation, HierarchyOverRanksConvergesLikeOneRanks) {
  for (const std::string spec : {"poisson3d:16", "jump3d:13", "aniso3d:12"}) {
    const CsrMatrix a = generate(spec);
    int one_rank = 0;
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = spec + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(a, size);
      const std::vector<DistributedLevel> levels =
          distributed_hierarchy_in_process(split_for_ranks(a, p), p, 0.08, 7, 200, 10);
      ASSERT_GE(levels.size(), 2u) << what;
      for (size_t l = 0; l + 1 < levels.size(); ++l) {
        const CsrMatrix fine = assembled_operator(levels[l]), coarse = assembled_operator(levels[l + 1]);
        const EigenCsr Pl = to_eigen(assembled(levels[l].to_next, false, coarse.rows));
        const EigenCsr want = EigenCsr(Pl.transpose()) * to_eigen(fine) * Pl;
        const EigenCsr difference = to_eigen(coarse) - want;
        EXPECT_LE(difference.coeffs().cwiseAbs().maxCoeff(), 1e-12 * want.coeffs().cwiseAbs().maxCoeff())
            << what << " level " << l + 1;
      }
      const int its = pcg_iterations_with_vcycle(levels);
      ASSERT_LE(its, 500) << what << ": did not converge";
      if (size == 1) one_rank = its;
      else EXPECT_LE(its, 1.3 * one_rank + 1) << what << ": " << its << " iterations, one rank " << one_rank;
      std::printf("%s: %zu levels, %d PCG iterations\n", what.c_str(), levels.size(), its);
    }
  }
}

// The prolongator over ranks as rectangular blocks (rows by the fine partition, columns by the coarse one) with the
// plan's sends from the peers' receives: prolongation is the distributed SpMV, restriction its transpose (halo
// sums sent back to the owners), each equal to the assembled P x and P' r on 1, 2, 3 and 5 ranks.
TEST(DistributedAggregation, ProlongationAndRestrictionOverRanks) {
  for (const std::string spec : {"poisson2d:23", "jump3d:9"}) {
    const CsrMatrix a = generate(spec);
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = spec + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(a, size);
      const std::vector<RankAggregationLevel> level =
          distributed_aggregation_level_in_process(split_for_ranks(a, p), p, 0.08, 7, 0.5);
      const RowPartition coarse = coarse_partition(level);
      const int64_t nc = coarse.first_row.back();
      std::vector<RankBlocks> blocks;
      for (int r = 0; r < size; ++r) {
        GlobalRows g;
        g.first_row = p.begin(r), g.global_cols = nc, g.rows = static_cast<int32_t>(p.end(r) - p.begin(r));
        for (const auto& row : level[static_cast<size_t>(r)].prolongator) {
          for (const auto& [c, v] : row) g.col_idx.push_back(c), g.values.push_back(v);
          g.row_ptr.push_back(static_cast<RowOffset>(g.col_idx.size()));
        }
        blocks.push_back(rank_blocks_rectangular(std::move(g), p, coarse, r));
        EXPECT_EQ(blocks.back().local.cols, coarse.end(r) - coarse.begin(r)) << what;
      }
      sends_from_receives(blocks, coarse);
      const Eigen::MatrixXd P = Eigen::MatrixXd(to_eigen(assembled(level, false, nc)));
      const DenseBlock xc = random_block(static_cast<int32_t>(nc), 1, 3), rf = random_block(a.rows, 1, 4);
      std::vector<std::vector<double>> xc_parts, rf_parts;
      for (int r = 0; r < size; ++r) {
        xc_parts.emplace_back(xc.data.begin() + coarse.begin(r), xc.data.begin() + coarse.end(r));
        rf_parts.emplace_back(rf.data.begin() + p.begin(r), rf.data.begin() + p.end(r));
      }
      const Eigen::VectorXd want_f = P * Eigen::Map<const Eigen::VectorXd>(xc.data.data(), nc);
      const Eigen::VectorXd want_c = P.transpose() * Eigen::Map<const Eigen::VectorXd>(rf.data.data(), a.rows);
      const std::vector<std::vector<double>> got_f = distributed_spmv_in_process(blocks, xc_parts),
                                             got_c = transpose_spmv_in_process(blocks, rf_parts);
      for (int r = 0; r < size; ++r) {
        for (GlobalIndex i = p.begin(r); i < p.end(r); ++i)
          EXPECT_NEAR(got_f[static_cast<size_t>(r)][static_cast<size_t>(i - p.begin(r))], want_f[i], 1e-14 * (1 + std::abs(want_f[i]))) << what << " row " << i;
        for (GlobalIndex c = coarse.begin(r); c < coarse.end(r); ++c)
          EXPECT_NEAR(got_c[static_cast<size_t>(r)][static_cast<size_t>(c - coarse.begin(r))], want_c[c], 1e-13 * (1 + std::abs(want_c[c]))) << what << " coarse " << c;
      }
    }
  }
}

// A coarse level gathered onto fewer ranks keeps its operator: the same assembled matrix, the rows of the ranks
// left out empty, each new share's blocks and plan those rank_blocks cuts from the whole matrix.
TEST(DistributedAggregation, AgglomerationKeepsTheLevelsOperator) {
  const CsrMatrix a = generate("jump3d:13");
  const RowPartition p = partition_by_work(a, 5);
  const std::vector<DistributedLevel> levels = distributed_hierarchy_in_process(split_for_ranks(a, p), p, 0.08, 7, 50, 3);
  ASSERT_GE(levels.size(), 2u);
  const DistributedLevel& coarse = levels[1];
  const CsrMatrix want = assembled_operator(coarse);
  for (const int keep : {1, 2, 5}) {
    const DistributedLevel gathered = agglomerated(coarse, keep);
    const CsrMatrix got = assembled_operator(gathered);
    expect_same_csr(got, want, "gathered onto " + std::to_string(keep));
    for (int r = 0; r < coarse.partition.ranks(); ++r) {
      const RankBlocks& rb = gathered.ranks[static_cast<size_t>(r)];
      if (r >= keep) EXPECT_EQ(rb.rows(), 0) << keep << " ranks kept, rank " << r;
      const RankBlocks cut = rank_blocks(want, gathered.partition, r);
      expect_same_csr(rb.local, cut.local, "rank " + std::to_string(r));
      expect_same_csr(rb.halo, cut.halo, "rank " + std::to_string(r));
      expect_same_transfers(rb.plan.send, cut.plan.send, "rank " + std::to_string(r));
    }
  }
  EXPECT_THROW(agglomerated(coarse, 0), Error);
  EXPECT_THROW(agglomerated(coarse, 6), Error);
}

TEST(RankRows, EvenPartitionCoversTheRows) {
  for (const int32_t rows : {0, 1, 7, 1000})
    for (const int size : {1, 2, 3, 5, 8}) {
      const RowPartition p = partition_evenly(rows, size);
      ASSERT_EQ(p.ranks(), size);
      EXPECT_EQ(p.begin(0), 0);
      EXPECT_EQ(p.end(size - 1), rows);
      for (int r = 0; r < size; ++r) {
        EXPECT_LE(p.begin(r), p.end(r));
        EXPECT_LE(p.end(r) - p.begin(r), rows / size + 1);
      }
    }
}

// ---- GPU: solves over in-process ranks ----

class GpuRanks : public ::testing::Test {
 protected:
  void SetUp() override { SPCG_REQUIRE_GPU(); }
  void TearDown() override {
    std::string why;
    if (spcg::test::gpu_available(&why)) ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// Runs body(rank) on one thread per rank; a rank that throws aborts the group (as the launcher ends the other
// processes); returns each rank's failure (null: none).
std::vector<std::exception_ptr> on_ranks(InProcessGroup& group, int size, const std::function<void(int)>& body) {
  return spcg::test::on_threads(size, body, [&] { group.abort(); });
}

struct RanksOutcome {
  DenseBlock x;  // assembled from the ranks' rows
  SolveResult rank0;
  std::vector<PreconditionerReport> reports;  // each rank's preconditioner (kind none where it has none)
};

// The whole solve on in-process ranks, one per block of the partition: each builds its blocks from the whole
// matrix, solves its rows of the random right-hand sides, and writes its rows of x.
RanksOutcome solve_on_ranks(const CsrMatrix& a, const RowPartition& p, const SolverOptions& o, int k, uint64_t seed) {
  const int size = p.ranks();
  InProcessGroup group(size, 30);
  RanksOutcome out;
  out.x = DenseBlock(a.rows, k, std::nan(""));
  out.reports.resize(static_cast<size_t>(size));
  spcg::test::rethrow_first(on_ranks(group, size, [&](int r) {
    RankSolver solver(rank_blocks(a, p, r), a.rows, group.communicator(r), o);
    if (const PreconditionerReport* m = solver.preconditioner()) out.reports[static_cast<size_t>(r)] = *m;
    DenseBlock x;
    SolveResult res = solver.solve(RhsKind::random, k, seed, x);
    for (int32_t i = 0; i < solver.rows(); ++i)
      for (int j = 0; j < k; ++j) out.x.at(solver.row_begin() + i, j) = x.at(i, j);  // disjoint rows per rank
    if (r == 0) out.rank0 = std::move(res);
  }));
  return out;
}
// The same on `size` ranks of the library's partition of a whole matrix (partition_by_work).
RanksOutcome solve_on_ranks(const CsrMatrix& a, int size, const SolverOptions& o, int k, uint64_t seed) {
  return solve_on_ranks(a, partition_by_work(a, size), o, k, seed);
}

SolverOptions options_for(SolverKind solver, Preconditioner pc, int k, bool deterministic = false) {
  SolverOptions o;
  o.solver = solver, o.precond = pc, o.expected_columns = k;
  o.iteration.stop.rtol = 1e-10;
  o.iteration.stop.max_iterations = 5000;
  o.iteration.deterministic = deterministic;
  o.timing = KernelTiming::phases;
  return o;
}


// Every solver x none/Jacobi x 1, 2, 3, 5 ranks against the one-GPU solve of the same system: every column
// converges, the host's ||b - A x|| / ||b|| meets the tolerance, the ranks' own true residual is the host's to
// the rounding of computing it, the solution agrees with one GPU's to the accuracy the tolerance leaves, and
// the iteration counts lie within what rounding alone moves them on one GPU: the spread over three kernels
// (three summation orders), widened by 10 % (a factor of two for block CG without a preconditioner on the
// ill-conditioned systems, whose counts rounding moves further still).
TEST_F(GpuRanks, SolvesMatchOneGpu) {
  std::vector<std::pair<std::string, CsrMatrix>> cases = {
      {"poisson2d:24", generate("poisson2d:24")}, {"jump3d:6", generate("jump3d:6")}, {"powerlaw:500", generate("powerlaw:500")}};
  cases.emplace_back("bcsstk01", read_matrix_market(spcg::test::input("bcsstk01.mtx")).matrix);
  const std::pair<SolverKind, int> solvers[] = {{SolverKind::cg, 1}, {SolverKind::multi_cg, 3}, {SolverKind::block_cg, 3}};
  for (const auto& [name, a] : cases)
    for (const auto& [kind, k] : solvers)
      for (const Preconditioner pc : {Preconditioner::none, Preconditioner::jacobi}) {
        const SolverOptions o = options_for(kind, pc, k);
        DenseBlock x1;
        std::vector<int> fewest(static_cast<size_t>(k), 1 << 30), most(static_cast<size_t>(k), 0);
        // cg's spread covers both recurrences (on ranks auto takes the one-reduction one)
        const std::vector<CgRecurrence> recurrences =
            kind == SolverKind::cg ? std::vector<CgRecurrence>{CgRecurrence::classic, CgRecurrence::one_reduction}
                                   : std::vector<CgRecurrence>{CgRecurrence::automatic};
        for (const char* kernel : {"auto", "csr-scalar", "coo"})
          for (const CgRecurrence rec : recurrences) {
            SolverOptions ok = o;
            ok.kernel = kernel, ok.iteration.recurrence = rec;
            Solver one(CsrMatrix(a), ok);
            DenseBlock x;
            const SolveResult r1 = one.solve(RhsKind::random, k, 11, x);
            ASSERT_TRUE(r1.all_converged()) << name << " " << kernel << " " << name_of(rec);
            for (int j = 0; j < k; ++j) {
              fewest[static_cast<size_t>(j)] = std::min(fewest[static_cast<size_t>(j)], r1.columns[j].iterations);
              most[static_cast<size_t>(j)] = std::max(most[static_cast<size_t>(j)], r1.columns[j].iterations);
            }
            if (x1.data.empty()) x1 = x;
          }
        const DenseBlock b = make_rhs("random", a.rows, k, 11);
        for (const int size : {1, 2, 3, 5})
          for (const CgRecurrence rec : recurrences) {
            SolverOptions orank = o;
            orank.iteration.recurrence = rec == CgRecurrence::one_reduction ? CgRecurrence::automatic : CgRecurrence::classic;
            if (kind != SolverKind::cg) orank.iteration.recurrence = CgRecurrence::automatic;
            const std::string what = name + " " + name_of(kind) + " " + name_of(pc) + " " +
                                     name_of(orank.iteration.recurrence) + " on " + std::to_string(size) + " ranks";
            const RanksOutcome got = solve_on_ranks(a, size, orank, k, 11);
            EXPECT_EQ(got.rank0.used_one_reduction, kind == SolverKind::cg && orank.iteration.recurrence == CgRecurrence::automatic) << what;
            ASSERT_TRUE(got.rank0.all_converged()) << what;
            ASSERT_EQ(got.rank0.columns.size(), static_cast<size_t>(k)) << what;
            const std::vector<double> rel = relative_residuals(a, got.x, b), rounding = residual_rounding(a, got.x, b);
            for (int j = 0; j < k; ++j) {
              EXPECT_LE(rel[j], 1e-9) << what << " column " << j;
              const ColumnResult& c = got.rank0.columns[j];
              // to the rounding of computing it (the half-of-itself slack that block-cg on powerlaw:500 once needed
              // was ||b|| summed before a reduction counter's zero had landed: DeviceArray::zero)
              EXPECT_NEAR(c.true_residual / c.b_norm, rel[j], 2 * rounding[j] / c.b_norm) << what << " column " << j;
              // Block CG without a preconditioner on these ill-conditioned systems: its count is not held here. One
              // GPU's kernels alone move it (bcsstk01 74-93, jump3d:6 103-214), and on ranks it stalls into the
              // multi-cg fallback in some runs (bcsstk01 on 3 ranks: 475-669; open, docs/perf-notes.md); it still
              // converges to the same solution, which the checks above and below hold.
              if (kind == SolverKind::block_cg && pc == Preconditioner::none && name != "poisson2d:24") continue;
              const int lo = fewest[static_cast<size_t>(j)], hi = most[static_cast<size_t>(j)];
              const int slack = std::max(3, hi / 10);
              EXPECT_GE(c.iterations, lo - slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
              EXPECT_LE(c.iterations, hi + slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
            }
            EXPECT_LE(max_relative_difference(got.x, x1), 1e-6) << what;
          }
      }
}

double host_b_norm(const DenseBlock& b, int j) {
  double s = 0;
  for (int32_t i = 0; i < b.rows; ++i) s += b.at(i, j) * b.at(i, j);
  return std::sqrt(s);
}

// The reported true residual is ||b - A x|| of the x the ranks return, to the rounding of computing it: the case
// that once reported 9.3e-11 where the host found 6.8e-11 (block-cg, no preconditioner, powerlaw:500), repeated
// on every rank count, with what decided each run printed when it does not hold.
TEST_F(GpuRanks, ReportedTrueResidualIsTheReturnedXs) {
  const CsrMatrix a = generate("powerlaw:500");
  const int k = 3;
  const SolverOptions o = options_for(SolverKind::block_cg, Preconditioner::none, k);
  const DenseBlock b = make_rhs("random", a.rows, k, 11);
  const int repeats = std::getenv("SPCG_TEST_REPEATS") ? std::atoi(std::getenv("SPCG_TEST_REPEATS")) : 3;
  for (int rep = 0; rep < repeats; ++rep)
    for (const int size : {1, 2, 3, 5}) {
      const RanksOutcome got = solve_on_ranks(a, size, o, k, 11);
      ASSERT_TRUE(got.rank0.all_converged()) << size << " ranks";
      const std::vector<double> rel = relative_residuals(a, got.x, b), rounding = residual_rounding(a, got.x, b);
      for (int j = 0; j < k; ++j) {
        const ColumnResult& c = got.rank0.columns[j];
        EXPECT_NEAR(c.true_residual / c.b_norm, rel[j], 2 * rounding[j] / c.b_norm)
            << size << " ranks, run " << rep << ", column " << j << ": iterations " << c.iterations << ", recursive "
            << c.recursive_residual / c.b_norm << ", fallback columns " << got.rank0.fallback_columns << " ("
            << got.rank0.fallback_reason << "), ||b|| " << c.b_norm << " (host " << host_b_norm(b, j) << ")";
        // ||b|| summed over the ranks: once one rank's share only, when a zeroed reduction counter was not yet
        // zero on the solver's stream (DeviceArray::zero)
        EXPECT_NEAR(c.b_norm, host_b_norm(b, j), 4 * a.rows * std::numeric_limits<double>::epsilon() * c.b_norm)
            << size << " ranks, run " << rep << ", column " << j;
      }
    }
}

// The iteration engine's reduction policy is the only thing ranks change: Jacobi-CG on one GPU and on 1 and 3
// in-process ranks takes the same iterations, and ||r|| read after every iteration (monitor_every 1) agrees to
// the rounding of the sums' order; on one rank (a sum over one rank is the identity) it is one GPU's bit for bit.
TEST_F(GpuRanks, ReductionPolicyKeepsOneGpusIterates) {
  const CsrMatrix a = generate("poisson2d:20");
  SolverOptions o = options_for(SolverKind::multi_cg, Preconditioner::jacobi, 1, /*deterministic=*/true);
  o.iteration.monitor_every = 1, o.iteration.keep_history = true;
  Solver one(CsrMatrix(a), o);
  DenseBlock x1;
  const SolveResult r1 = one.solve(RhsKind::random, 1, 3, x1);
  ASSERT_TRUE(r1.all_converged());
  const std::vector<std::pair<int, double>>& h1 = r1.history.at(0);
  ASSERT_EQ(h1.size(), static_cast<size_t>(r1.columns[0].iterations) + 1);
  for (const int size : {1, 3}) {
    const RanksOutcome got = solve_on_ranks(a, size, o, 1, 3);
    ASSERT_TRUE(got.rank0.all_converged()) << size << " ranks";
    EXPECT_EQ(got.rank0.columns[0].iterations, r1.columns[0].iterations) << size << " ranks";
    const std::vector<std::pair<int, double>>& h = got.rank0.history.at(0);
    ASSERT_EQ(h.size(), h1.size()) << size << " ranks";
    // the last entry is the true residual that confirmed convergence: b - A x, whose rounding (each row's sum in
    // another order on ranks) is residual_rounding's bound, not the recurrence's
    const double true_rounding = residual_rounding(a, x1, make_rhs("random", a.rows, 1, 3))[0];
    for (size_t i = 0; i < h.size(); ++i) {
      EXPECT_EQ(h[i].first, h1[i].first);
      const double tol = i + 1 == h.size() ? 2 * true_rounding : 1e-9 * h1[i].second;
      if (size == 1) EXPECT_EQ(h[i].second, h1[i].second) << "iteration " << i << ": one rank differs from one GPU";
      else EXPECT_NEAR(h[i].second, h1[i].second, tol) << size << " ranks, iteration " << i;
    }
    if (size == 1) EXPECT_EQ(std::memcmp(got.x.data.data(), x1.data.data(), x1.data.size() * sizeof(double)), 0);
  }
}

// Deterministic mode: the same rank count gives the same bits on every run, and one rank gives the one-GPU
// multi-cg's bits (the same kernels; the sum over one rank is the identity).
TEST_F(GpuRanks, DeterministicSolvesRepeatBitForBit) {
  const CsrMatrix a = generate("jump3d:7");
  const SolverOptions o = options_for(SolverKind::multi_cg, Preconditioner::jacobi, 2, /*deterministic=*/true);
  for (const int size : {1, 3}) {
    const RanksOutcome first = solve_on_ranks(a, size, o, 2, 5), second = solve_on_ranks(a, size, o, 2, 5);
    ASSERT_TRUE(first.rank0.all_converged());
    EXPECT_EQ(std::memcmp(first.x.data.data(), second.x.data.data(), first.x.data.size() * sizeof(double)), 0)
        << size << " ranks: two runs differ";
  }
  Solver one(CsrMatrix(a), o);
  DenseBlock x1;
  const SolveResult r1 = one.solve(RhsKind::random, 2, 5, x1);
  const RanksOutcome single = solve_on_ranks(a, 1, o, 2, 5);
  EXPECT_EQ(single.rank0.columns[0].iterations, r1.columns[0].iterations);
  EXPECT_EQ(std::memcmp(single.x.data.data(), x1.data.data(), x1.data.size() * sizeof(double)), 0)
      << "one rank differs from one GPU's multi-cg";
}

// cg on ranks sums once an iteration (auto's one-reduction recurrence): deterministic runs repeat bit for bit on
// a rank count, one rank gives one GPU's one-reduction bits (the sum over one rank is the identity), and 3 ranks
// take the iterations of one GPU's within the spread rounding gives.
TEST_F(GpuRanks, OneReductionCgRepeatsBitForBitAndOneRankIsOneGpu) {
  const CsrMatrix a = generate("jump3d:7");
  for (const Preconditioner pc : {Preconditioner::none, Preconditioner::jacobi}) {
    const SolverOptions o = options_for(SolverKind::cg, pc, 1, /*deterministic=*/true);
    for (const int size : {1, 3}) {
      const RanksOutcome first = solve_on_ranks(a, size, o, 1, 5), second = solve_on_ranks(a, size, o, 1, 5);
      ASSERT_TRUE(first.rank0.all_converged()) << name_of(pc) << " " << size << " ranks";
      EXPECT_TRUE(first.rank0.used_one_reduction);
      EXPECT_EQ(std::memcmp(first.x.data.data(), second.x.data.data(), first.x.data.size() * sizeof(double)), 0)
          << name_of(pc) << " " << size << " ranks: two runs differ";
    }
    SolverOptions one_gpu = o;
    one_gpu.iteration.recurrence = CgRecurrence::one_reduction;
    Solver one(CsrMatrix(a), one_gpu);
    DenseBlock x1;
    const SolveResult r1 = one.solve(RhsKind::random, 1, 5, x1);
    ASSERT_TRUE(r1.used_one_reduction);
    const RanksOutcome single = solve_on_ranks(a, 1, o, 1, 5);
    EXPECT_EQ(single.rank0.columns[0].iterations, r1.columns[0].iterations) << name_of(pc);
    EXPECT_EQ(std::memcmp(single.x.data.data(), x1.data.data(), x1.data.size() * sizeof(double)), 0)
        << name_of(pc) << ": one rank differs from one GPU's one-reduction cg";
  }
}

// Mixed precision on ranks: every rank's local block in FP32 (dia-f32), the exchange and the halo product FP64.
// Where every value is an FP32 number auto takes it on every rank and x is the double run's bit for bit; where
// not (jump3d), auto stays double on every rank and says why, and mixed asked for reaches rtol by the host's
// ||b - A x||; ranks and one GPU agree on the choice.
TEST_F(GpuRanks, MixedPrecisionOnRanksIsEveryRanksChoice) {
  auto run = [](const CsrMatrix& a, int size, Precision p, Preconditioner pc, std::vector<std::string>* reasons) {
    SolverOptions o = options_for(SolverKind::cg, pc, 1, /*deterministic=*/true);
    o.precision = p;
    const RowPartition part = partition_by_work(a, size);
    InProcessGroup group(size, 30);
    RanksOutcome out;
    out.x = DenseBlock(a.rows, 1, std::nan(""));
    reasons->assign(static_cast<size_t>(size), "");
    std::vector<Precision> used(static_cast<size_t>(size));
    spcg::test::rethrow_first(on_ranks(group, size, [&](int r) {
      RankSolver solver(rank_blocks(a, part, r), a.rows, group.communicator(r), o);
      used[static_cast<size_t>(r)] = solver.precision();
      (*reasons)[static_cast<size_t>(r)] = solver.precision_reason();
      DenseBlock x;
      SolveResult res = solver.solve(RhsKind::random, 1, 13, x);
      for (int32_t i = 0; i < solver.rows(); ++i) out.x.at(solver.row_begin() + i, 0) = x.at(i, 0);
      if (r == 0) out.rank0 = std::move(res);
    }));
    for (const Precision u : used) EXPECT_EQ(u, used[0]) << "the ranks took different precisions";
    return std::make_pair(out, used[0]);
  };
  std::vector<std::string> why;
  for (const Preconditioner pc : {Preconditioner::none, Preconditioner::jacobi}) {
    const CsrMatrix a = generate("poisson3d:14");
    for (const int size : {1, 3}) {
      const auto [x64, p64] = run(a, size, Precision::double_precision, pc, &why);
      const auto [x32, p32] = run(a, size, Precision::automatic, pc, &why);
      ASSERT_EQ(p32, Precision::mixed) << size << " ranks: " << why[0];
      ASSERT_TRUE(x32.rank0.all_converged());
      EXPECT_EQ(x32.rank0.columns[0].iterations, x64.rank0.columns[0].iterations) << name_of(pc) << " on " << size << " ranks";
      EXPECT_EQ(std::memcmp(x32.x.data.data(), x64.x.data.data(), x64.x.data.size() * sizeof(double)), 0)
          << name_of(pc) << " on " << size << " ranks: FP32 copies of FP32 numbers changed x";
    }
    const CsrMatrix jump = generate("jump3d:14");  // (large enough that each rank's block takes DIA)
    const DenseBlock b = make_rhs("random", jump.rows, 1, 13);
    const auto [auto_run, p_auto] = run(jump, 3, Precision::automatic, pc, &why);
    EXPECT_EQ(p_auto, Precision::double_precision);
    EXPECT_NE(why[0].find("not FP32 numbers"), std::string::npos) << why[0];
    const auto [mixed, p_mixed] = run(jump, 3, Precision::mixed, pc, &why);
    ASSERT_EQ(p_mixed, Precision::mixed) << why[0];
    ASSERT_TRUE(mixed.rank0.all_converged()) << name_of(pc);
    EXPECT_LE(relative_residuals(jump, mixed.x, b)[0], 1e-10 + 2 * residual_rounding(jump, mixed.x, b)[0] / mixed.rank0.columns[0].b_norm)
        << name_of(pc);
  }
}

// Every rank of `failures` failed: rank `failing` with an InputError whose message holds `message`, the others
// with the CommunicationError its failure reached them as.
void expect_one_rank_failed(const std::vector<std::exception_ptr>& failures, int failing, const std::string& message) {
  for (int r = 0; r < static_cast<int>(failures.size()); ++r) {
    ASSERT_TRUE(failures[static_cast<size_t>(r)]) << "rank " << r << " did not fail";
    try {
      std::rethrow_exception(failures[static_cast<size_t>(r)]);
    } catch (const CommunicationError&) {
      EXPECT_NE(r, failing);
    } catch (const InputError& e) {
      EXPECT_EQ(r, failing);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// A rank whose rows fail the checks (a negative diagonal) throws InputError naming the global row; the others,
// waiting in their first sum, end with CommunicationError at once (no hang, no timeout needed).
TEST_F(GpuRanks, AFailingRankEndsEveryRank) {
  CsrMatrix a = generate("poisson2d:10");
  const RowPartition p = partition_evenly(a.rows, 3);
  const int32_t bad_row = p.begin(1) + 2;
  for (int32_t q = a.row_ptr[bad_row]; q < a.row_ptr[bad_row + 1]; ++q)
    if (a.col_idx[q] == bad_row) a.values[q] = -4;
  const SolverOptions o = options_for(SolverKind::cg, Preconditioner::jacobi, 1);
  InProcessGroup group(3, /*timeout_s=*/20);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::exception_ptr> failures = on_ranks(group, 3, [&](int r) {
    RankSolver solver(rank_blocks(a, p, r), a.rows, group.communicator(r), o);
    DenseBlock x;
    solver.solve(RhsKind::ones, 1, 1, x);
  });
  // not a performance bound: under the group's 20 s timeout by far, so the failing rank ended the others, not
  // the timeout (a GPU test; CI asserts no duration)
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  expect_one_rank_failed(failures, 1, "row " + std::to_string(bad_row + 1));
}

// Options a rank cannot run are refused before any communication.
TEST_F(GpuRanks, RefusesWhatIsNotDistributed) {
  const CsrMatrix a = generate("poisson2d:6");
  const RowPartition p = partition_evenly(a.rows, 1);
  InProcessGroup group(1);
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::jacobi, 1);
  o.iteration.vector_ops = VectorOps::thrust;
  EXPECT_THROW(RankSolver(rank_blocks(a, p, 0), a.rows, group.communicator(0), o), UsageError);
  o.iteration.vector_ops = VectorOps::fused, o.kernel = "csr-vector";
  EXPECT_THROW(RankSolver(rank_blocks(a, p, 0), a.rows, group.communicator(0), o), UsageError);
}

// New values on a rank's Solver are refused (its distributed operator is not remade yet), naming why, and the
// rank solves on with its setup.
TEST_F(GpuRanks, UpdateValuesIsRefusedOnARank) {
  const CsrMatrix a = generate("poisson2d:6");
  const RowPartition p = partition_evenly(a.rows, 1);
  InProcessGroup group(1);
  const SolverOptions o = options_for(SolverKind::cg, Preconditioner::jacobi, 1);
  RankSolver solver(rank_blocks(a, p, 0), a.rows, group.communicator(0), o);
  try {
    solver.update_values(a);
    ADD_FAILURE() << "a rank took new values";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("a rank's Solver"), std::string::npos) << e.what();
  }
  EXPECT_THROW(solver.update_values(a.values.data(), a.nnz()), UsageError);
  DenseBlock x(a.rows, 1, std::numeric_limits<double>::quiet_NaN());
  EXPECT_TRUE(solver.solve(RhsKind::ones, 1, 1, x).all_converged());
}

// NCCL itself with one rank: the solve converges through ncclAllGather and grouped send/receive, and in
// deterministic mode its bits are those of the in-process stand-in's (the same rank-order sums), so what the
// stand-in tests show of several ranks holds for NCCL's.
TEST_F(GpuRanks, NcclOneRankSolves) {
  const CsrMatrix a = generate("poisson2d:40");
  const SolverOptions o = options_for(SolverKind::block_cg, Preconditioner::jacobi, 4, /*deterministic=*/true);
  NcclCommunicator comm(0, 1, NcclCommunicator::unique_id());
  RankSolver solver(rank_blocks(a, partition_by_work(a, 1), 0), a.rows, comm, o);
  DenseBlock x;
  const SolveResult r = solver.solve(RhsKind::random, 4, 3, x);
  ASSERT_TRUE(r.all_converged());
  const RanksOutcome stand_in = solve_on_ranks(a, 1, o, 4, 3);
  EXPECT_EQ(std::memcmp(stand_in.x.data.data(), x.data.data(), x.data.size() * sizeof(double)), 0)
      << "NCCL's one rank differs from the in-process stand-in's";
  const std::vector<double> rel = relative_residuals(a, x, make_rhs("random", a.rows, 4, 3));
  for (double v : rel) EXPECT_LE(v, 1e-9);
  const CommunicationStats st = comm.stats();
  EXPECT_GT(st.sums, 2);  // the norms, the Gram matrices, ...
  EXPECT_GE(st.exchanges, r.operator_applies);  // every apply exchanges
}

// cg over NCCL replays its batches from a CUDA graph (NCCL's sums and exchanges captured), with the one-reduction
// recurrence auto takes on ranks: the in-process stand-in's bits (which runs without graphs), and the calls a
// replayed graph makes counted per replay (one sum and one exchange an iteration at least).
TEST_F(GpuRanks, NcclCgReplaysItsBatchesFromAGraph) {
  const CsrMatrix a = generate("jump3d:10");  // (values not FP32 numbers: double, no restarts)
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::jacobi, 1, /*deterministic=*/true);
  NcclCommunicator comm(0, 1, NcclCommunicator::unique_id());
  RankSolver solver(rank_blocks(a, partition_by_work(a, 1), 0), a.rows, comm, o);
  DenseBlock x;
  const CommunicationStats before = comm.stats();
  const SolveResult r = solver.solve(RhsKind::random, 1, 3, x);
  ASSERT_TRUE(r.all_converged());
  EXPECT_TRUE(r.used_graph);
  EXPECT_TRUE(r.used_one_reduction);
  const RanksOutcome stand_in = solve_on_ranks(a, 1, o, 1, 3);
  EXPECT_FALSE(stand_in.rank0.used_graph);
  EXPECT_EQ(stand_in.rank0.columns[0].iterations, r.columns[0].iterations);
  EXPECT_EQ(std::memcmp(stand_in.x.data.data(), x.data.data(), x.data.size() * sizeof(double)), 0)
      << "NCCL's graph-replayed rank differs from the in-process stand-in's";
  const CommunicationStats st = comm.stats();
  EXPECT_GE(st.sums - before.sums, r.columns[0].iterations);
  EXPECT_GE(st.exchanges - before.exchanges, r.operator_applies);
}

// The smoother's steps fused into level 0's DIA product over the ranks (the rows with halo entries finished after
// the halo product) give the bits of the steps run apart, FP64 and FP32 level 0, on 1, 2 and 3 ranks
// (deterministic mode), and the report names the fused level.
TEST_F(GpuRanks, FusedSmoothingOverRanksIsTheUnfusedBitForBit) {
  // 1M rows: past auto's latency-bound size on every rank, where a banded block takes DIA (the kernel that fuses);
  // the 27-point stencil's blocks (slabs of 33 planes and more) take its plane march
  for (const std::string spec : {"poisson3d:100", "poisson3d27:100"}) {
    const CsrMatrix a = generate(spec);
    for (const Precision precision : {Precision::double_precision, Precision::mixed})
      for (const int size : {1, 2, 3}) {
        const std::string what = spec + " " + name_of(precision) + " on " + std::to_string(size) + " ranks";
        RanksOutcome got[2];
        for (const bool fuse : {true, false}) {
          SolverOptions o = options_for(SolverKind::cg, Preconditioner::amg, 1, /*deterministic=*/true);
          o.precision = precision, o.iteration.stop.rtol = 1e-8;
          o.precond_options.fuse_smoothing = fuse;
          got[fuse ? 0 : 1] = solve_on_ranks(a, size, o, 1, 11);
        }
        ASSERT_EQ(got[0].rank0.columns[0].status, ColumnStatus::converged) << what;
        EXPECT_EQ(got[0].rank0.columns[0].iterations, got[1].rank0.columns[0].iterations) << what;
        ASSERT_EQ(got[0].x.data.size(), got[1].x.data.size()) << what;
        EXPECT_EQ(std::memcmp(got[0].x.data.data(), got[1].x.data.data(), got[0].x.data.size() * sizeof(double)), 0)
            << what << ": fused and apart differ";
        for (const PreconditionerReport& r : got[0].reports) {
          ASSERT_FALSE(r.levels.empty()) << what;
          EXPECT_EQ(r.levels[0].kernel.rfind(precision == Precision::mixed ? "dia-f32" : "dia", 0), 0u) << what << ": " << r.levels[0].kernel;
          EXPECT_NE(r.detail.find("fused into the product on level(s) 0"), std::string::npos) << what << ": " << r.detail;
        }
        for (const PreconditionerReport& r : got[1].reports)
          EXPECT_EQ(r.detail.find("fused into the product"), std::string::npos) << what << ": " << r.detail;
        const DenseBlock b = make_rhs("random", a.rows, 1, 11);
        EXPECT_LE(relative_residuals(a, got[0].x, b)[0], 1e-8 + 2 * residual_rounding(a, got[0].x, b)[0] / got[0].rank0.columns[0].b_norm)
            << what;
      }
  }
}

// Mixed precision on ranks with the classic recurrence: a restart keeps the iteration count (the finish after
// the sum over the ranks, MultiCgStep::restart), and a tolerance the FP64 residual cannot reach ends stagnated on
// every rank alike, never converged and never past the limit.
TEST_F(GpuRanks, MixedRestartsOnRanksKeepCountingAndStagnate) {
  // 333k rows a rank on 3: past auto's latency-bound size, where a banded block takes DIA (the kernel with the FP32
  // variant) from its statistics alone on every GPU (smaller blocks go to a timed trial, which H200s and H100s
  // decide differently). Poisson scaled by 0.1: values that are not FP32 numbers (the copy's claims are checked),
  // and a recursive residual that passes 1e-18 after some hundreds of iterations, so the true residual restarts it
  // (each restart's recurrence takes ~100-200 more to claim again, from the true residual's floor to 1e-18).
  CsrMatrix a = generate("poisson3d:100");
  for (double& v : a.values) v *= 0.1;
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::jacobi, 1);
  o.precision = Precision::mixed, o.iteration.recurrence = CgRecurrence::classic;
  o.iteration.stop.rtol = 1e-18, o.iteration.stop.max_iterations = 6000;
  for (const int size : {1, 3}) {
    const RanksOutcome got = solve_on_ranks(a, size, o, 1, 7);
    std::printf("  mixed rtol 1e-18 on %d ranks: %s after %d iterations, %d restarts, true residual %.3g\n", size,
                to_string(got.rank0.columns[0].status), got.rank0.columns[0].iterations,
                got.rank0.residual_replacements, got.rank0.columns[0].recursive_residual / got.rank0.columns[0].b_norm);
    EXPECT_EQ(got.rank0.columns[0].status, ColumnStatus::stagnated) << size << " ranks: " << to_string(got.rank0.columns[0].status);
    // the count goes on over the restarts: the first claim came after the recurrence's hundreds of iterations, and
    // a restart that set it back would end the solve at a few
    EXPECT_GT(got.rank0.columns[0].iterations, 100) << size << " ranks";
    EXPECT_LT(got.rank0.columns[0].iterations, 6000) << size << " ranks";
    EXPECT_GE(got.rank0.residual_replacements, IterationEngine::RestartRule::unproductive_limit) << size << " ranks";
    for (double v : got.x.data) ASSERT_TRUE(std::isfinite(v));
  }
}

// The general PCG's restarts over the ranks (Chebyshev, FP64): a (re)start is the true residual with P = 0 and its
// sums over the ranks (MultiCgStep::restart), M first applied by the iteration after it. At rtol 1e-18 each claim
// of the recursive residual is rejected by b - A x, which stays at its rounding floor: the column ends stagnated
// after RestartRule's restarts, never converged, below the limit, x at the floor, on 1 and 3 ranks alike.
TEST_F(GpuRanks, GeneralPcgRestartsOnRanksAndStagnatesAtTheFloor) {
  const CsrMatrix a = generate("poisson3d:40");
  const DenseBlock b = make_rhs("random", a.rows, 1, 7);
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::chebyshev, 1);
  o.iteration.stop.rtol = 1e-18, o.iteration.stop.max_iterations = 3000;
  for (const int size : {1, 3}) {
    const std::string what = std::to_string(size) + " ranks";
    const RanksOutcome got = solve_on_ranks(a, size, o, 1, 7);
    const ColumnResult& c = got.rank0.columns[0];
    EXPECT_EQ(c.status, ColumnStatus::stagnated) << what << ": " << to_string(c.status);
    EXPECT_GE(got.rank0.residual_replacements, IterationEngine::RestartRule::unproductive_limit) << what;
    EXPECT_LT(c.iterations, 3000) << what;
    for (double v : got.x.data) ASSERT_TRUE(std::isfinite(v)) << what;
    // the restarts kept x where FP64 puts it: within a few roundings of the residual's floor
    const double rel = relative_residuals(a, got.x, b)[0], floor = residual_rounding(a, got.x, b)[0] / c.b_norm;
    EXPECT_LE(rel, 20 * floor + 1e-14) << what << ": true residual " << rel << ", rounding " << floor;
  }
}

}  // namespace

namespace {

// NCCL's wait: returns once the stream's work is done (its sums included), and its timeout is read from
// SPCG_COMM_TIMEOUT_S, refused when it is not a positive number. (The timeout itself is not exercised here: one
// GPU offers no NCCL operation that stalls on the device, since NCCL refuses an unmatched receive from itself,
// and a host callback's sleep also holds up cudaStreamQuery.)
TEST_F(GpuRanks, NcclWaitReturnsAndReadsItsTimeout) {
  setenv("SPCG_COMM_TIMEOUT_S", "5", 1);
  NcclCommunicator comm(0, 1, NcclCommunicator::unique_id());
  unsetenv("SPCG_COMM_TIMEOUT_S");
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  const std::vector<double> h = {1.5, -2.0, 3.25};
  DeviceArray<double> v(h, "test values");
  comm.allreduce_sum(v.data(), h.size(), s);
  comm.wait(s);
  EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
  EXPECT_EQ(v.download(), h);
  cudaStreamDestroy(s);
  setenv("SPCG_COMM_TIMEOUT_S", "soon", 1);
  EXPECT_THROW(NcclCommunicator(0, 1, NcclCommunicator::unique_id()), UsageError);
  unsetenv("SPCG_COMM_TIMEOUT_S");
}

}  // namespace

// ---- the distributed preconditioners (issue #33, item 5) ----

namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();

// What runs on several GPUs is declared once (runs_on_several_gpus), and the refusal of what does not names it
// and lists what does: every preconditioner (AMG with rank-local coarse levels), auto among them; a rank's
// options refuse with the same words.
TEST(SeveralGpus, CapabilitiesDeclareWhatIsDistributed) {
  EXPECT_EQ(several_gpus_names<Preconditioner>(), "none, jacobi, block-jacobi, chebyshev, amg or auto");
  for (const auto& [p, name] : OptionNames<Preconditioner>::list) {
    EXPECT_TRUE(runs_on_several_gpus(p)) << name;
    EXPECT_EQ(several_gpus_refusal(p), "") << name;
    SolverOptions o;
    o.precond = p;
    EXPECT_EQ(several_gpus_refusal(o), "") << name;  // the options' refusal is the preconditioner's own
  }
  SolverOptions o;
  EXPECT_EQ(several_gpus_refusal(o), "");
  o.iteration.vector_ops = VectorOps::thrust;
  EXPECT_NE(several_gpus_refusal(o).find("(thrust keeps its scalars on one host)"), std::string::npos) << several_gpus_refusal(o);
  o = SolverOptions{};
  o.kernel = "csr-vector";
  EXPECT_NE(several_gpus_refusal(o).find("the kernel is auto"), std::string::npos) << several_gpus_refusal(o);
  o = SolverOptions{};
  o.iteration.interrupted = [] { return false; };  // one rank answering alone would leave the others in a sum
  EXPECT_NE(several_gpus_refusal(o).find("interrupt hook"), std::string::npos) << several_gpus_refusal(o);
}

// A rank's Solver refuses what is not distributed before it touches the device, naming it; everything
// distributed gets past that check (to the setup on a GPU machine, to "a rank needs a GPU" without one).
TEST(SeveralGpus, ARanksSolverRefusesOnlyWhatIsNotDistributed) {
  const CsrMatrix a = generate("poisson2d:6");
  const RowPartition p = partition_evenly(a.rows, 1);
  for (const auto& [pc, name] : OptionNames<Preconditioner>::list) {
    InProcessGroup group(1);
    SolverOptions o;
    o.precond = pc;
    try {
      RankSolver solver(rank_blocks(a, p, 0), a.rows, group.communicator(0), o);
      EXPECT_TRUE(runs_on_several_gpus(pc)) << name << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_FALSE(runs_on_several_gpus(pc)) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(std::string("(") + name + " is not distributed)"), std::string::npos) << e.what();
    } catch (const CudaError& e) {  // no GPU here: past the refusal
      EXPECT_TRUE(runs_on_several_gpus(pc)) << name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find("a rank needs a GPU"), std::string::npos) << e.what();
    }
  }
}

// A rank without rows is refused by name before it touches the device or the other ranks (an empty rank's
// solve waited until the group's timeout on a GPU; until that is diagnosed, no rank may be empty).
TEST(SeveralGpus, ARankWithoutRowsIsRefused) {
  const CsrMatrix a = generate("poisson2d:30");
  RowPartition p;
  p.first_row = {0, 400, 400, a.rows};  // rank 1 holds no rows
  InProcessGroup group(3);
  try {
    RankSolver solver(rank_blocks(a, p, 1), a.rows, group.communicator(1), SolverOptions{});
    ADD_FAILURE() << "a rank without rows was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 holds none of the system's 900 rows"), std::string::npos) << e.what();
  }
}

// A ⊗ C with C the b x b matrix with 4 on its diagonal and 1 elsewhere (SPD: eigenvalues 3 and b + 3): a matrix
// whose unknowns come in nodes of b, every row's entries in whole node blocks, as a finite-element matrix's do.
CsrMatrix with_nodes(const CsrMatrix& a, int b) {
  CsrMatrix m;
  m.rows = m.cols = a.rows * b;
  for (int32_t i = 0; i < a.rows; ++i)
    for (int u = 0; u < b; ++u) {
      for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q)
        for (int v = 0; v < b; ++v) {
          m.col_idx.push_back(a.col_idx[q] * b + v);
          m.values.push_back(a.values[q] * (u == v ? 4.0 : 1.0));
        }
      m.row_ptr.push_back(static_cast<int32_t>(m.col_idx.size()));
    }
  return m;
}

DenseBlock rows_of(const DenseBlock& x, int32_t begin, int32_t end) {
  DenseBlock out(end - begin, x.cols);
  std::copy(x.data.begin() + static_cast<std::ptrdiff_t>(begin) * x.cols,
            x.data.begin() + static_cast<std::ptrdiff_t>(end) * x.cols, out.data.begin());
  return out;
}

double max_abs(const DenseBlock& x) {
  double m = 0;
  for (double v : x.data) m = std::max(m, std::abs(v));
  return m;
}

// Z = M^-1 R on this GPU's rows (on several GPUs collective where M's applies are: every rank calls it).
DenseBlock apply_m(const PreconditionerOp& m, const DenseBlock& r) {
  DeviceBlock R(r.rows, r.cols, "test R"), Z(r.rows, r.cols, "test Z");
  R.values.upload(r.data);
  m.reserve(r.cols);
  m.apply(R.data(), Z.data(), r.cols, 0);
  EXPECT_EQ(cudaStreamSynchronize(0), cudaSuccess);
  DenseBlock z(r.rows, r.cols);
  z.data = Z.values.download<HostVector<double>>();
  return z;
}

// What a rank's Solver builds before it solves: its share as a DistributedOperator (A's product over the ranks)
// and the preconditioner on its diagonal block and that product.
struct RankPreconditioner {
  std::unique_ptr<DistributedOperator> op;
  std::unique_ptr<PreconditionerOp> m;  // after op: it holds a reference to it
};
RankPreconditioner build_on_rank(const CsrMatrix& a, const RowPartition& p, int r, Communicator& comm, Preconditioner kind,
                                 const PreconditionerOptions& po, int k) {
  OperatorOptions oo;
  oo.expected_k = k;
  RankPreconditioner out;
  out.op = std::make_unique<DistributedOperator>(rank_blocks(a, p, r), comm, oo);
  const PreconditionerInputs in{out.op->local_setup(), *out.op, oo, "test matrix", k, 1e-8, p.begin(r)};
  out.m = make_preconditioner(kind, po, in);
  return out;
}

std::vector<std::pair<std::string, CsrMatrix>> distributed_precond_cases() {
  return {{"poisson3d:20", generate("poisson3d:20")},
          {"jump3d:12", generate("jump3d:12")},
          {"fv1", read_matrix_market(spcg::test::input("fv1.mtx")).matrix}};
}

// Chebyshev on 1, 2 and 3 ranks is one GPU's polynomial: the Lanczos estimate over the ranks gives every rank
// the same interval, bit for bit, and one GPU's to the rounding of the sums' order; the apply, whose products
// are the distributed operator's, gives one GPU's M^-1 R to rounding. The bounds: each Lanczos coefficient and
// each product differ from one GPU's by rounding of order n eps (the sums run in another order), which the
// interval's ends and the degree-3 polynomial carry over with a modest factor (1e3 and 1e4 of n eps).
TEST_F(GpuRanks, ChebyshevOnRanksIsOneGpusPolynomial) {
  const int k = 2;
  for (const auto& [name, a] : distributed_precond_cases()) {
    OperatorOptions oo;
    oo.expected_k = k;
    const MatrixSetup setup(a);
    const auto op = make_operator("auto", setup, oo);
    const auto one = make_preconditioner(Preconditioner::chebyshev, PreconditionerOptions{},
                                         PreconditionerInputs{setup, *op, oo, name, k});
    const double lambda = one->report().lambda_max;
    ASSERT_GT(lambda, 0) << name;
    const DenseBlock r = random_block(a.rows, k, 5), z1 = apply_m(*one, r);
    for (const int size : {1, 2, 3}) {
      const std::string what = name + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(a, size);
      InProcessGroup group(size, 30);
      std::vector<PreconditionerReport> reports(static_cast<size_t>(size));
      DenseBlock z(a.rows, k, std::nan(""));
      spcg::test::rethrow_first(on_ranks(group, size, [&](int rank) {
        const RankPreconditioner mine = build_on_rank(a, p, rank, group.communicator(rank), Preconditioner::chebyshev, {}, k);
        reports[static_cast<size_t>(rank)] = mine.m->report();
        const DenseBlock zr = apply_m(*mine.m, rows_of(r, p.begin(rank), p.end(rank)));
        std::copy(zr.data.begin(), zr.data.end(), z.data.begin() + static_cast<std::ptrdiff_t>(p.begin(rank)) * k);
      }));
      for (int rank = 0; rank < size; ++rank) {
        const PreconditionerReport& mine = reports[static_cast<size_t>(rank)];
        EXPECT_EQ(mine.kind, Preconditioner::chebyshev) << what;
        EXPECT_EQ(mine.lambda_max, reports[0].lambda_max) << what << ": rank " << rank << "'s interval differs";
        EXPECT_EQ(mine.lambda_min, reports[0].lambda_min) << what << ": rank " << rank << "'s interval differs";
      }
      EXPECT_NEAR(reports[0].lambda_max, lambda, 1e3 * kEps * a.rows * lambda) << what;
      double diff = 0;
      for (size_t i = 0; i < z.data.size(); ++i) diff = std::max(diff, std::abs(z.data[i] - z1.data[i]));
      EXPECT_LE(diff, 1e4 * kEps * a.rows * max_abs(z1)) << what;  // (a NaN, an entry not written, fails too)
      EXPECT_FALSE(std::isnan(diff)) << what;
    }
  }
}

// A partition of the rows whose interior boundaries are all one past a multiple of b: every node block of b rows
// there straddles two ranks.
RowPartition cutting(int32_t rows, int size, int b) {
  RowPartition p = partition_evenly(rows, size);
  for (size_t r = 1; r + 1 < p.first_row.size(); ++r) p.first_row[r] += 1 - p.first_row[r] % b;
  return p;
}

// Block-Jacobi on 2 and 3 ranks whose boundaries cut node blocks: every rank takes the block size one GPU takes
// (detected over all the ranks' rows, or given), and its M^-1 is the block diagonal of A's node blocks cut at the
// rank's first and last row, each part inverted: the host's inverse of each such block (Eigen) to rounding
// (1e3 eps x the block's size x the largest entries of its inverse and of R).
TEST_F(GpuRanks, BlockJacobiOnRanksInvertsRankLocalBlocks) {
  struct Case {
    std::string name;
    CsrMatrix a;
    int block_size;  // asked for (0: detected)
    int b;           // what every rank takes
  };
  const std::vector<Case> cases = {
      {"poisson2d:8 with 3-unknown nodes", with_nodes(generate("poisson2d:8"), 3), 0, 3},
      {"poisson3d:6 (no node structure)", generate("poisson3d:6"), 0, 4},
      {"poisson2d:15, b = 5 (given)", generate("poisson2d:15"), 5, 5}};
  const int k = 2;
  for (const Case& c : cases) {
    PreconditionerOptions po;
    po.block_size = c.block_size;
    const Eigen::MatrixXd A = Eigen::MatrixXd(to_eigen(c.a));
    const DenseBlock r = random_block(c.a.rows, k, 9);
    for (const int size : {2, 3}) {
      const std::string what = c.name + " on " + std::to_string(size) + " ranks";
      const RowPartition p = cutting(c.a.rows, size, c.b);
      for (int rank = 1; rank < size; ++rank) ASSERT_NE(p.begin(rank) % c.b, 0) << what << ": no block is cut";
      InProcessGroup group(size, 30);
      std::vector<PreconditionerReport> reports(static_cast<size_t>(size));
      DenseBlock z(c.a.rows, k, std::nan(""));
      spcg::test::rethrow_first(on_ranks(group, size, [&](int rank) {
        const RankPreconditioner mine = build_on_rank(c.a, p, rank, group.communicator(rank), Preconditioner::block_jacobi, po, k);
        reports[static_cast<size_t>(rank)] = mine.m->report();
        const DenseBlock zr = apply_m(*mine.m, rows_of(r, p.begin(rank), p.end(rank)));
        std::copy(zr.data.begin(), zr.data.end(), z.data.begin() + static_cast<std::ptrdiff_t>(p.begin(rank)) * k);
      }));
      for (int rank = 0; rank < size; ++rank) {
        EXPECT_EQ(reports[static_cast<size_t>(rank)].block_size, c.b) << what << " rank " << rank;
        EXPECT_NE(reports[static_cast<size_t>(rank)].detail.find("rank-local"), std::string::npos)
            << reports[static_cast<size_t>(rank)].detail;
      }
      int cut = 0;
      for (int rank = 0; rank < size; ++rank)
        for (int32_t lo = p.begin(rank); lo < p.end(rank);) {  // the rank's blocks: A's, cut at its ends
          const int32_t hi = std::min<int32_t>(p.end(rank), (lo / c.b + 1) * c.b), m = hi - lo;
          cut += m < c.b;
          const Eigen::MatrixXd inv = A.block(lo, lo, m, m).inverse();
          Eigen::MatrixXd rb(m, k);
          for (int32_t i = 0; i < m; ++i)
            for (int j = 0; j < k; ++j) rb(i, j) = r.at(lo + i, j);
          const Eigen::MatrixXd want = inv * rb;
          const double tol = 1e3 * kEps * c.b * inv.cwiseAbs().maxCoeff() * rb.cwiseAbs().maxCoeff();
          for (int32_t i = 0; i < m; ++i)
            for (int j = 0; j < k; ++j)
              ASSERT_NEAR(z.at(lo + i, j), want(i, j), tol) << what << ": row " << lo + i << " (block rows " << lo << ".." << hi - 1 << ")";
          lo = hi;
        }
      EXPECT_GE(cut, 2 * (size - 1)) << what;  // each boundary cuts the block it falls in, on both sides
    }
  }
}

// One GPU's solves of a system under three kernels (three summation orders): the band of iteration counts
// rounding alone moves them in, the largest host-checked ||b - A x|| / ||b|| of each column, and one GPU's
// preconditioner report (kernel auto).
struct OneGpuBand {
  std::vector<int> lo, hi;
  std::vector<double> residual;
  PreconditionerReport report;
};
OneGpuBand one_gpu_band(const CsrMatrix& a, const SolverOptions& o, int k, uint64_t seed, const std::string& what) {
  OneGpuBand band;
  band.lo.assign(static_cast<size_t>(k), 1 << 30), band.hi.assign(static_cast<size_t>(k), 0);
  band.residual.assign(static_cast<size_t>(k), 0.0);
  const DenseBlock b = make_rhs("random", a.rows, k, seed);
  for (const char* kernel : {"auto", "csr-scalar", "coo"}) {
    SolverOptions ok = o;
    ok.kernel = kernel;
    Solver one(CsrMatrix(a), ok);
    DenseBlock x;
    const SolveResult r = one.solve(RhsKind::random, k, seed, x);
    EXPECT_TRUE(r.all_converged()) << what << " on one GPU, kernel " << kernel;
    const std::vector<double> rel = relative_residuals(a, x, b);
    for (int j = 0; j < k; ++j) {
      band.lo[static_cast<size_t>(j)] = std::min(band.lo[static_cast<size_t>(j)], r.columns[j].iterations);
      band.hi[static_cast<size_t>(j)] = std::max(band.hi[static_cast<size_t>(j)], r.columns[j].iterations);
      band.residual[static_cast<size_t>(j)] = std::max(band.residual[static_cast<size_t>(j)], rel[static_cast<size_t>(j)]);
    }
    if (std::string(kernel) == "auto" && one.preconditioner()) band.report = *one.preconditioner();
  }
  return band;
}

// p's interior boundaries moved down to multiples of b: no node block of b rows straddles two ranks.
RowPartition aligned(RowPartition p, int b) {
  for (size_t r = 1; r + 1 < p.first_row.size(); ++r) p.first_row[r] -= p.first_row[r] % b;
  return p;
}

// Chebyshev-PCG and block-Jacobi-PCG on 1, 2 and 3 ranks against one GPU's solve of the same system (cg on one
// column, multi-cg and block-cg on two, rtol 1e-8): every column converges; the host's ||b - A x|| / ||b|| meets
// the tolerance: within 10 % of rtol, or as close as one GPU's own x comes (the recursive residual stops at rtol,
// and the true one drifts from it by rounding, which on the jumping coefficients may be more), and the ranks'
// own true residual is the host's to the rounding of computing it; cg's and multi-cg's iteration counts lie
// within 2 % (at least 1) of one GPU's band under three kernels (block CG's are moved further by rounding:
// SolvesMatchOneGpu). Chebyshev: every rank's interval is rank 0's, bit for bit, and one GPU's to rounding.
// Block-Jacobi: every rank takes one GPU's block size, and the partition's boundaries are put on multiples of
// it, so that M is one GPU's M (cut blocks change M: BlockJacobiOnRanksInvertsRankLocalBlocks holds those).
TEST_F(GpuRanks, ChebyshevAndBlockJacobiPcgMatchOneGpu) {
  std::vector<std::pair<std::string, CsrMatrix>> cases = distributed_precond_cases();
  cases.emplace_back("poisson2d:12 with 3-unknown nodes", with_nodes(generate("poisson2d:12"), 3));
  const std::pair<SolverKind, int> solvers[] = {{SolverKind::cg, 1}, {SolverKind::multi_cg, 2}, {SolverKind::block_cg, 2}};
  for (const auto& [name, a] : cases)
    for (const Preconditioner pc : {Preconditioner::chebyshev, Preconditioner::block_jacobi})
      for (const auto& [kind, k] : solvers) {
        const std::string which = name + " " + name_of(kind) + " " + name_of(pc);
        SolverOptions o = options_for(kind, pc, k);
        o.iteration.stop.rtol = 1e-8;
        const OneGpuBand band = one_gpu_band(a, o, k, 11, which);
        ASSERT_EQ(band.report.kind, pc) << which;
        const DenseBlock b = make_rhs("random", a.rows, k, 11);
        for (const int size : {1, 2, 3}) {
          const std::string what = which + " on " + std::to_string(size) + " ranks";
          const RowPartition p = pc == Preconditioner::block_jacobi ? aligned(partition_by_work(a, size), band.report.block_size)
                                                                    : partition_by_work(a, size);
          const RanksOutcome got = solve_on_ranks(a, p, o, k, 11);
          ASSERT_TRUE(got.rank0.all_converged()) << what;
          ASSERT_EQ(got.rank0.columns.size(), static_cast<size_t>(k)) << what;
          const std::vector<double> rel = relative_residuals(a, got.x, b), rounding = residual_rounding(a, got.x, b);
          for (int j = 0; j < k; ++j) {
            const ColumnResult& c = got.rank0.columns[j];
            EXPECT_LE(rel[j], std::max(1.1 * o.iteration.stop.rtol, 1.5 * band.residual[static_cast<size_t>(j)]))
                << what << " column " << j << ": one GPU's x " << band.residual[static_cast<size_t>(j)];
            EXPECT_NEAR(c.true_residual / c.b_norm, rel[j], 2 * rounding[j] / c.b_norm) << what << " column " << j;
            if (kind == SolverKind::block_cg) continue;
            const int lo = band.lo[static_cast<size_t>(j)], hi = band.hi[static_cast<size_t>(j)];
            const int slack = std::max(1, static_cast<int>(std::ceil(0.02 * hi)));
            EXPECT_GE(c.iterations, lo - slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
            EXPECT_LE(c.iterations, hi + slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
          }
          for (int rank = 0; rank < size; ++rank) {
            const PreconditionerReport& mine = got.reports[static_cast<size_t>(rank)];
            EXPECT_EQ(mine.kind, pc) << what << " rank " << rank;
            if (pc == Preconditioner::chebyshev) {
              EXPECT_EQ(mine.lambda_max, got.reports[0].lambda_max) << what << ": rank " << rank << "'s interval differs";
              EXPECT_NEAR(mine.lambda_max, band.report.lambda_max, 1e3 * kEps * a.rows * band.report.lambda_max) << what;
            } else {
              EXPECT_EQ(mine.block_size, band.report.block_size) << what << " rank " << rank;
            }
          }
        }
      }
}

// AMG on ranks (solver/amg.cpp: the levels split over the ranks while large, with the Galerkin product over them,
// then held whole by every rank) on 1, 2, 3 and 5 ranks, each solver: every column converges, the host's
// ||b - A x|| / ||b|| meets the tolerance, one rank takes one GPU's iterations to rounding (its hierarchy is one
// GPU's, level 0 in FP64), and more ranks take at most 1.3x one GPU's AMG iterations (issue #36's bound: the
// aggregates stop at rank boundaries, the coarse couplings do not) and fewer than Jacobi-CG's. CG also runs with
// every level above the coarsest split (whole_level_rows 0). Every rank reports AMG on its own rows.
TEST_F(GpuRanks, AmgOnRanksConvergesLikeOneGpu) {
  std::vector<std::pair<std::string, CsrMatrix>> cases = distributed_precond_cases();
  cases.emplace_back("poisson2d:40", generate("poisson2d:40"));
  cases.emplace_back("aniso3d:14", generate("aniso3d:14"));
  cases.emplace_back("lap2D_5pt_n100", read_matrix_market(spcg::test::input("lap2D_5pt_n100.mtx")).matrix);
  const std::pair<SolverKind, int> solvers[] = {{SolverKind::cg, 1}, {SolverKind::multi_cg, 2}, {SolverKind::block_cg, 2}};
  for (const auto& [name, a] : cases)
    for (const auto& [kind, k] : solvers)
      for (const int64_t whole : {PreconditionerOptions{}.whole_level_rows, int64_t{0}}) {
      if (whole == 0 && kind != SolverKind::cg) continue;
      const std::string which = name + " " + name_of(kind) + " amg" + (whole == 0 ? " (every level split)" : "");
      SolverOptions o = options_for(kind, Preconditioner::amg, k);
      o.iteration.stop.rtol = 1e-8;
      o.precond_options.coarse_rows = 40;  // several levels on these small systems
      o.precond_options.whole_level_rows = whole;
      o.precision = Precision::double_precision;  // level 0 in FP64 on one GPU too, as on ranks
      const OneGpuBand band = one_gpu_band(a, o, k, 11, which);
      SolverOptions jacobi = o;
      jacobi.precond = Preconditioner::jacobi;
      const OneGpuBand jacobi_band = one_gpu_band(a, jacobi, k, 11, which + " (jacobi)");
      ASSERT_EQ(band.report.kind, Preconditioner::amg) << which;
      ASSERT_GE(band.report.levels.size(), 2u) << which;
      const DenseBlock b = make_rhs("random", a.rows, k, 11);
      for (const int size : {1, 2, 3, 5}) {
        const std::string what = which + " on " + std::to_string(size) + " ranks";
        const RanksOutcome got = solve_on_ranks(a, size, o, k, 11);
        ASSERT_TRUE(got.rank0.all_converged()) << what;
        const std::vector<double> rel = relative_residuals(a, got.x, b);
        for (int j = 0; j < k; ++j) {
          const ColumnResult& c = got.rank0.columns[j];
          EXPECT_LE(rel[j], std::max(1.1 * o.iteration.stop.rtol, 1.5 * band.residual[static_cast<size_t>(j)]))
              << what << " column " << j;
          if (kind == SolverKind::block_cg) continue;
          const int lo = band.lo[static_cast<size_t>(j)], hi = band.hi[static_cast<size_t>(j)];
          if (size == 1) {
            const int slack = std::max(1, static_cast<int>(std::ceil(0.02 * hi)));
            EXPECT_GE(c.iterations, lo - slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
            EXPECT_LE(c.iterations, hi + slack) << what << " column " << j << ": one GPU took " << lo << ".." << hi;
          } else {
            EXPECT_LT(c.iterations, jacobi_band.lo[static_cast<size_t>(j)])
                << what << " column " << j << ": Jacobi-CG on one GPU took " << jacobi_band.lo[static_cast<size_t>(j)];
            EXPECT_LE(c.iterations, static_cast<int>(std::ceil(1.3 * hi)) + 1)
                << what << " column " << j << ": one GPU's AMG took " << lo << ".." << hi;
          }
          std::printf("  %s column %d: %d iterations (one GPU's AMG %d..%d, Jacobi %d)\n", what.c_str(), j, c.iterations,
                      lo, hi, jacobi_band.lo[static_cast<size_t>(j)]);
        }
        const RowPartition p = partition_by_work(a, size);  // solve_on_ranks' partition
        for (int rank = 0; rank < size; ++rank) {
          const PreconditionerReport& mine = got.reports[static_cast<size_t>(rank)];
          EXPECT_EQ(mine.kind, Preconditioner::amg) << what << " rank " << rank;
          ASSERT_GE(mine.levels.size(), 2u) << what << " rank " << rank;  // level 0 smooths on every rank
          EXPECT_EQ(mine.levels[0].rows, p.end(rank) - p.begin(rank)) << what << " rank " << rank;  // the rank's own rows
          EXPECT_NE(mine.detail.find("on " + std::to_string(size) + " ranks"), std::string::npos) << what << ": " << mine.detail;
        }
      }
    }
}

// The device's level over ranks (solver/amg_ranks.hpp: aggregates on each rank's local block, P and the rank's rows
// of P' A P through the halo plan's row exchanges) is the host reference's (sparse/distributed_aggregation.hpp) on
// 1, 2, 3 and 5 in-process ranks: the same coarse numbering, P and A_c entry for entry (the same columns; values
// to the rounding of sums taken in another order, a few eps of the largest entry of a row's products).
TEST_F(GpuRanks, GalerkinProductOverRanksIsTheHostReferences) {
  const double theta = 0.08, omega = 0.5;
  const uint64_t seed = 7;
  for (const std::string spec : {"poisson2d:23", "jump3d:9", "aniso3d:8", "poisson3d27:6"}) {
    const CsrMatrix a = generate(spec);
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = spec + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(a, size);
      const std::vector<RankAggregationLevel> ref =
          distributed_aggregation_level_in_process(split_for_ranks(a, p), p, theta, seed, omega);
      double scale = 0;  // the largest |a_ij| of A_c: the sums' rounding is relative to it
      for (const RankAggregationLevel& l : ref)
        for (const auto& row : l.coarse)
          for (const auto& e : row) scale = std::max(scale, std::abs(e.second));
      std::vector<RankGalerkin> got(static_cast<size_t>(size));
      std::vector<CsrMatrix> p_rows(static_cast<size_t>(size)), c_rows(static_cast<size_t>(size));
      InProcessGroup group(size, 30);
      spcg::test::rethrow_first(on_ranks(group, size, [&](int r) {
        DistributedOperator op(rank_blocks(a, p, r), group.communicator(r));
        const DeviceCsr& local = *op.local_setup().device_csr();
        DeviceArray<double> diag(static_cast<size_t>(local.rows), "test diagonal"), dinv(diag.size(), "test dinv");
        launch_diagonal(local, diag.data(), 0);
        inverse_diagonal(local, dinv.data(), 0);
        const DeviceAggregates agg = aggregate_on_device(strength_graph(local, diag.data(), theta, 0), seed, 0);
        RankGalerkin g = rank_galerkin(op, local, agg, dinv.data(), omega, 1, 0);
        p_rows[static_cast<size_t>(r)] = download_csr(g.p);
        c_rows[static_cast<size_t>(r)] = download_csr(g.coarse);
        got[static_cast<size_t>(r)] = std::move(g);
      }));
      const RowPartition coarse = coarse_partition(ref);
      for (int r = 0; r < size; ++r) {
        const RankGalerkin& g = got[static_cast<size_t>(r)];
        const RankAggregationLevel& want = ref[static_cast<size_t>(r)];
        ASSERT_EQ(g.coarse_first_row, coarse.first_row) << what << " rank " << r;
        ASSERT_EQ(g.first_coarse, want.first_coarse) << what << " rank " << r;
        ASSERT_EQ(g.own_coarse, want.aggregates.count) << what << " rank " << r;
        const auto same_rows = [&](const CsrMatrix& m, const std::vector<std::vector<std::pair<GlobalIndex, double>>>& rows,
                                   double tol, const char* name) {
          ASSERT_EQ(m.rows, static_cast<int32_t>(rows.size())) << what << " rank " << r << " " << name;
          for (int32_t i = 0; i < m.rows; ++i) {
            const auto& row = rows[static_cast<size_t>(i)];
            ASSERT_EQ(m.row_ptr[i + 1] - m.row_ptr[i], static_cast<RowOffset>(row.size()))
                << what << " rank " << r << " " << name << " row " << i;
            for (size_t e = 0; e < row.size(); ++e) {
              const RowOffset q = m.row_ptr[i] + static_cast<RowOffset>(e);
              ASSERT_EQ(m.col_idx[q], row[e].first) << what << " rank " << r << " " << name << " row " << i;
              ASSERT_NEAR(m.values[q], row[e].second, tol) << what << " rank " << r << " " << name << " row " << i;
            }
          }
        };
        same_rows(p_rows[static_cast<size_t>(r)], want.prolongator, 64 * kEps, "P");
        same_rows(c_rows[static_cast<size_t>(r)], want.coarse, 256 * kEps * scale, "A_c");
      }
    }
  }
}

// The l1-Jacobi smoother over ranks sums each row's every entry, its halo block's too (a rank's local block alone
// would leave the boundary rows' scaling too large for the smoother to converge): PCG with it on 2 and 3 ranks
// takes at most 1.3x one GPU's iterations on 3D Poisson and coefficient jumps, every level split.
TEST_F(GpuRanks, AmgL1JacobiSmootherOverRanks) {
  for (const std::string spec : {"poisson3d:20", "jump3d:12"}) {
    const CsrMatrix a = generate(spec);
    SolverOptions o = options_for(SolverKind::cg, Preconditioner::amg, 1);
    o.iteration.stop.rtol = 1e-8;
    o.precond_options.coarse_rows = 40, o.precond_options.whole_level_rows = 0;
    o.precond_options.smoother = AmgSmoother::l1_jacobi, o.precond_options.smoother_degree = 2;
    o.precision = Precision::double_precision;
    const OneGpuBand band = one_gpu_band(a, o, 1, 11, spec + " l1-jacobi");
    for (const int size : {2, 3}) {
      const std::string what = spec + " l1-jacobi on " + std::to_string(size) + " ranks";
      const RanksOutcome got = solve_on_ranks(a, size, o, 1, 11);
      ASSERT_TRUE(got.rank0.all_converged()) << what;
      EXPECT_LE(relative_residuals(a, got.x, make_rhs("random", a.rows, 1, 11))[0], 1.1 * o.iteration.stop.rtol) << what;
      EXPECT_LE(got.rank0.columns[0].iterations, static_cast<int>(std::ceil(1.3 * band.hi[0])) + 1)
          << what << ": one GPU took " << band.lo[0] << ".." << band.hi[0];
      std::printf("  %s: %d iterations (one GPU %d..%d)\n", what.c_str(), got.rank0.columns[0].iterations, band.lo[0],
                  band.hi[0]);
    }
  }
}

// An AMG level split over ranks and the level below held whole: the V-cycle on 2 and 3 ranks is a symmetric
// operator (z1' M^-1 z2 = z2' M^-1 z1 over the whole vectors, to rounding) whatever the split, and every rank's
// report names the levels over the ranks.
TEST_F(GpuRanks, AmgOverRanksIsASymmetricPositiveVCycle) {
  const CsrMatrix a = generate("poisson3d:20");
  const int k = 2;
  const DenseBlock r = random_block(a.rows, k, 3);
  for (const int64_t whole : {int64_t{0}, PreconditionerOptions{}.whole_level_rows})
    for (const int size : {2, 3}) {
      const std::string what = "whole_level_rows " + std::to_string(whole) + " on " + std::to_string(size) + " ranks";
      PreconditionerOptions po;
      po.coarse_rows = 40, po.whole_level_rows = whole;
      const RowPartition p = partition_by_work(a, size);
      InProcessGroup group(size, 30);
      std::vector<PreconditionerReport> reports(static_cast<size_t>(size));
      DenseBlock z(a.rows, k, std::nan(""));
      spcg::test::rethrow_first(on_ranks(group, size, [&](int rank) {
        const RankPreconditioner mine = build_on_rank(a, p, rank, group.communicator(rank), Preconditioner::amg, po, k);
        reports[static_cast<size_t>(rank)] = mine.m->report();
        const DenseBlock zr = apply_m(*mine.m, rows_of(r, p.begin(rank), p.end(rank)));
        std::copy(zr.data.begin(), zr.data.end(), z.data.begin() + static_cast<std::ptrdiff_t>(p.begin(rank)) * k);
      }));
      // r_0' M^-1 r_1 against r_1' M^-1 r_0, and r_j' M^-1 r_j > 0
      double r0z1 = 0, r1z0 = 0, r0z0 = 0, r1z1 = 0, norm = 0;
      for (int32_t i = 0; i < a.rows; ++i) {
        r0z1 += r.at(i, 0) * z.at(i, 1), r1z0 += r.at(i, 1) * z.at(i, 0);
        r0z0 += r.at(i, 0) * z.at(i, 0), r1z1 += r.at(i, 1) * z.at(i, 1);
        norm += std::abs(r.at(i, 0) * z.at(i, 1)) + std::abs(r.at(i, 1) * z.at(i, 0));
      }
      EXPECT_LE(std::abs(r0z1 - r1z0), 1e3 * kEps * norm) << what << ": " << r0z1 << " against " << r1z0;
      EXPECT_GT(r0z0, 0) << what;
      EXPECT_GT(r1z1, 0) << what;
      for (int rank = 0; rank < size; ++rank) {
        const PreconditionerReport& mine = reports[static_cast<size_t>(rank)];
        ASSERT_GE(mine.levels.size(), 3u) << what << " rank " << rank << ": " << mine.detail;
        EXPECT_EQ(mine.levels.size(), reports[0].levels.size()) << what << ": the ranks' hierarchies differ in depth";
        EXPECT_EQ(mine.levels[0].global_rows, a.rows) << what;
        EXPECT_FALSE(mine.levels[0].held_whole) << what;
        EXPECT_TRUE(mine.levels.back().held_whole) << what;
        // whole_level_rows 0: every level above the coarsest split; the default: only level 0 (8000 rows)
        EXPECT_EQ(mine.levels[1].held_whole, whole != 0) << what;
        EXPECT_NE(mine.detail.find("split over the ranks"), std::string::npos) << what << ": " << mine.detail;
      }
    }
}

// The V-cycle over ranks as a stationary iteration, e <- (I - M^-1 A) e, on 3D Poisson: the A-norm of the error
// per cycle (after five cycles) stays <= 0.25 (issue #36) on 1, 2, 3 and 5 ranks, with every level above the
// coarsest split and with the default split, and within 0.02 of one rank's (the aggregates cut at rank boundaries
// are what may differ).
TEST_F(GpuRanks, VCycleOverRanksContractsAsOnOneGpu) {
  const CsrMatrix a = generate("poisson3d:16");
  const DenseBlock e0 = random_block(a.rows, 1, 5);
  for (const int64_t whole : {PreconditionerOptions{}.whole_level_rows, int64_t{0}}) {
    double one_rank = -1;
    for (const int size : {1, 2, 3, 5}) {
      const std::string what = "whole_level_rows " + std::to_string(whole) + " on " + std::to_string(size) + " ranks";
      PreconditionerOptions po;
      po.coarse_rows = 100, po.whole_level_rows = whole;
      const RowPartition p = partition_by_work(a, size);
      InProcessGroup group(size, 30);
      std::vector<double> ratio(static_cast<size_t>(size), -1);
      spcg::test::rethrow_first(on_ranks(group, size, [&](int rank) {
        const RankPreconditioner mine = build_on_rank(a, p, rank, group.communicator(rank), Preconditioner::amg, po, 1);
        const int32_t n = mine.op->rows();
        DenseBlock e = rows_of(e0, static_cast<int32_t>(p.begin(rank)), static_cast<int32_t>(p.end(rank)));
        DeviceBlock E(n, 1, "test e"), AE(n, 1, "test A e");
        auto a_norm = [&] {  // sqrt(e' A e) over every rank's rows
          E.values.upload(e.data);
          mine.op->apply(1.0, E.data(), 0.0, AE.data(), 1, 0);
          const HostVector<double> ae = AE.values.download<HostVector<double>>();
          double dot = 0;
          for (int32_t i = 0; i < n; ++i) dot += e.data[static_cast<size_t>(i)] * ae[static_cast<size_t>(i)];
          return std::sqrt(sum_over_ranks(*mine.op, {dot}, 0)[0]);
        };
        double before = a_norm(), r = 1;
        for (int cycle = 0; cycle < 6; ++cycle) {
          E.values.upload(e.data);
          mine.op->apply(1.0, E.data(), 0.0, AE.data(), 1, 0);
          DenseBlock ae(n, 1);
          ae.data = AE.values.download<HostVector<double>>();
          const DenseBlock c = apply_m(*mine.m, ae);
          for (int32_t i = 0; i < n; ++i) e.at(i, 0) -= c.at(i, 0);
          const double after = a_norm();
          r = after / before;
          before = after;
        }
        ratio[static_cast<size_t>(rank)] = r;
      }));
      for (int rank = 0; rank < size; ++rank) EXPECT_EQ(ratio[static_cast<size_t>(rank)], ratio[0]) << what;
      std::printf("  V-cycle contraction, %s: %.4f\n", what.c_str(), ratio[0]);
      EXPECT_LE(ratio[0], 0.25) << what;
      if (size == 1) one_rank = ratio[0];
      EXPECT_LE(ratio[0], one_rank + 0.02) << what << ": one rank's " << one_rank;
    }
  }
}

// A level that does not fit on one rank's GPU ends every rank: that rank with DeviceMemoryError naming AMG's level
// and the rank, the others with the communication's end (none waits in a collective). Rank 1 holds nearly all
// rows; all but 48 MiB of the GPU is taken once both ranks' operators exist.
TEST_F(GpuRanks, AmgOutOfMemoryOnOneRankEndsEveryRank) {
  const CsrMatrix a = generate("poisson3d:64");  // A P of rank 1's rows alone needs ~85 MB
  RowPartition p;
  p.first_row = {0, 512, a.rows};
  {  // kernels loaded (lazily, on their first launch) while memory is plentiful
    InProcessGroup warm(2, 30);
    spcg::test::rethrow_first(on_ranks(warm, 2, [&](int rank) {
      build_on_rank(a, p, rank, warm.communicator(rank), Preconditioner::amg, {}, 1);
    }));
  }
  release_idle_device_memory();
  InProcessGroup group(2, 30);
  std::atomic<int> built{0};
  std::unique_ptr<DeviceArray<char>> rest;
  const std::vector<std::exception_ptr> failures = on_ranks(group, 2, [&](int rank) {
    OperatorOptions oo;
    DistributedOperator op(rank_blocks(a, p, rank), group.communicator(rank), oo);
    if (++built == 2) {  // the second rank to get here takes the memory (the other waits in its first sum)
      const size_t keep = size_t{48} << 20, free_bytes = device_memory_info().free_bytes;
      if (free_bytes > keep) rest = std::make_unique<DeviceArray<char>>(free_bytes - keep, "test: all but 48 MiB");
    }
    while (built < 2) std::this_thread::yield();
    const PreconditionerInputs in{op.local_setup(), op, oo, "poisson3d:64", 1, 1e-8, p.begin(rank)};
    make_preconditioner(Preconditioner::amg, PreconditionerOptions{}, in);
  });
  rest.reset();
  release_idle_device_memory();
  ASSERT_TRUE(failures[1]) << "rank 1's hierarchy fitted in 48 MiB";
  try {
    std::rethrow_exception(failures[1]);
  } catch (const DeviceMemoryError& e) {
    const std::string m = e.what();
    for (const char* text : {"amg setup (level 0", "rank 1 of 2", "not enough GPU memory"})
      EXPECT_NE(m.find(text), std::string::npos) << text << " in: " << m;
  } catch (const std::exception& e) {
    FAIL() << "rank 1: not a DeviceMemoryError: " << e.what();
  }
  ASSERT_TRUE(failures[0]) << "rank 0 finished while rank 1 had failed";
  try {
    std::rethrow_exception(failures[0]);
  } catch (const CommunicationError&) {
  } catch (const DeviceMemoryError& e) {
    SUCCEED() << "rank 0 ran out too: " << e.what();  // the GPU is shared by the in-process ranks
  } catch (const std::exception& e) {
    FAIL() << "rank 0: " << e.what();
  }
}

// AMG on ranks in deterministic mode repeats bit for bit for a rank count (a fresh setup on each run: the same
// hierarchies, the same sums), and a non-positive diagonal on one rank's rows ends every rank, that rank with its
// reason naming the row of the whole system (the others: the communication ended), no rank left waiting in a sum.
TEST_F(GpuRanks, AmgOnRanksRepeatsAndAFailingRankEndsEveryRank) {
  const CsrMatrix a = generate("jump3d:12");
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::amg, 2, /*deterministic=*/true);
  o.solver = SolverKind::block_cg;
  o.iteration.stop.rtol = 1e-8;
  o.precond_options.coarse_rows = 40;
  const RanksOutcome first = solve_on_ranks(a, 3, o, 2, 5), again = solve_on_ranks(a, 3, o, 2, 5);
  ASSERT_TRUE(first.rank0.all_converged());
  EXPECT_EQ(std::memcmp(first.x.data.data(), again.x.data.data(), first.x.data.size() * sizeof(double)), 0);
  // auto's precision (the default) on ranks: the iteration in FP64; each rank's levels run their kernels'
  // FP32-values variants where they have one (the hierarchy's precision says so)
  SolverOptions by_default = options_for(SolverKind::cg, Preconditioner::amg, 1);
  by_default.precision = Precision::automatic;
  by_default.precond_options.coarse_rows = 40;
  const RanksOutcome plain = solve_on_ranks(a, 3, by_default, 1, 5);
  ASSERT_TRUE(plain.rank0.all_converged());
  EXPECT_EQ(plain.rank0.residual_replacements, 0);
  for (const PreconditionerReport& mine : plain.reports) {
    ASSERT_GE(mine.levels.size(), 2u);
    bool fp32 = false;
    for (const AmgLevelReport& level : mine.levels) fp32 |= level.kernel.find("-f32") != std::string::npos;
    EXPECT_EQ(mine.precision, fp32 ? Precision::mixed : Precision::double_precision) << mine.precision_reason;
    if (fp32) EXPECT_NE(mine.precision_reason.find("FP32 values on level(s)"), std::string::npos) << mine.precision_reason;
  }
  CsrMatrix bad = generate("poisson2d:12");
  const RowPartition p = partition_evenly(bad.rows, 3);
  const int32_t bad_row = p.begin(2) + 1;
  for (int32_t q = bad.row_ptr[bad_row]; q < bad.row_ptr[bad_row + 1]; ++q)
    if (bad.col_idx[q] == bad_row) bad.values[q] = -4;
  SolverOptions amg = options_for(SolverKind::cg, Preconditioner::amg, 1);
  amg.check_matrix = false;  // past the setup's own check of the diagonal: AMG's level 0 meets it
  amg.precond_options.coarse_rows = 40;  // 144 rows: level 0 smooths (at <= 250 each rank's block were dense)
  InProcessGroup group(3, /*timeout_s=*/20);
  const std::vector<std::exception_ptr> failures = on_ranks(group, 3, [&](int r) {
    RankSolver solver(rank_blocks(bad, p, r), bad.rows, group.communicator(r), amg);
  });
  expect_one_rank_failed(failures, 2, "amg level 0: smoothing needs a positive diagonal, but row " +
                                          std::to_string(bad_row + 1) + " has diagonal -4");
}

// The trial's prediction in auto's reason ("~N iterations to rtol"), or -1.
int predicted_iterations(const std::string& reason) {
  const size_t at = reason.find("): ~");
  return at == std::string::npos ? -1 : std::atoi(reason.c_str() + at + 4);
}

// auto on 2 and 3 ranks measures what it does on one GPU, over the whole system (the diagonal's span and rows
// gathered over the ranks, the Jacobi-CG trial run over them) and takes what one GPU would; every rank takes the
// same, for the same reason (but the trial's time, each rank's own clock), which names why; the trial's prediction
// is one GPU's to within one iteration (its residuals differ by the sums' rounding). The AMG it picks on the
// jumping coefficients solves them.
TEST_F(GpuRanks, AutoChoosesAmongTheDistributedPreconditioners) {
  CsrMatrix easy = generate("poisson3d:48");  // 110592 rows; Jacobi-CG ~100 iterations (test_precond's case)
  for (int32_t i = 0; i < easy.rows; ++i)
    for (int32_t q = easy.row_ptr[i]; q < easy.row_ptr[i + 1]; ++q)
      if (easy.col_idx[q] == i) easy.values[q] += 0.1 + 0.05 * (i % 3);  // not constant
  struct Case {
    std::string name;
    CsrMatrix a;
    Preconditioner one_gpu, on_ranks;
    std::vector<std::string> words;
  };
  const std::vector<Case> cases = {
      {"poisson3d:20", generate("poisson3d:20"), Preconditioner::none, Preconditioner::none, {"rows < 100000", "constant diagonal"}},
      {"jump3d:12", generate("jump3d:12"), Preconditioner::jacobi, Preconditioner::jacobi, {"rows < 100000"}},
      {"jump3d:48", generate("jump3d:48"), Preconditioner::amg, Preconditioner::amg, {"coefficient jumps"}},
      {"poisson2d:400", generate("poisson2d:400"), Preconditioner::amg, Preconditioner::amg, {"Jacobi-CG trial"}},
      {"poisson3d:48 shifted", easy, Preconditioner::jacobi, Preconditioner::jacobi, {"Jacobi-CG trial", "too few for AMG"}}};
  const std::regex trial_time(", [0-9.]+ ms\\)");
  for (const Case& c : cases) {
    SolverOptions o = options_for(SolverKind::cg, Preconditioner::automatic, 1);
    o.iteration.stop.rtol = 1e-8;  // the tolerance the trial predicts for (test_precond's cases are at 1e-8)
    Solver one(CsrMatrix(c.a), o);
    ASSERT_NE(one.preconditioner(), nullptr) << c.name;
    const std::string one_reason = one.preconditioner()->reason;
    EXPECT_EQ(one.preconditioner()->kind, c.one_gpu) << c.name << ": " << one_reason;
    for (const int size : {2, 3}) {
      const std::string what = c.name + " on " + std::to_string(size) + " ranks";
      const RowPartition p = partition_by_work(c.a, size);
      InProcessGroup group(size, 60);
      std::vector<PreconditionerReport> reports(static_cast<size_t>(size));
      spcg::test::rethrow_first(on_ranks(group, size, [&](int rank) {
        RankSolver solver(rank_blocks(c.a, p, rank), c.a.rows, group.communicator(rank), o);
        ASSERT_NE(solver.preconditioner(), nullptr);
        reports[static_cast<size_t>(rank)] = *solver.preconditioner();
      }));
      for (int rank = 0; rank < size; ++rank) {
        const PreconditionerReport& mine = reports[static_cast<size_t>(rank)];
        EXPECT_EQ(mine.kind, c.on_ranks) << what << " rank " << rank << ": " << mine.reason;
        EXPECT_TRUE(runs_on_several_gpus(mine.kind)) << what;
        for (const std::string& word : c.words) EXPECT_NE(mine.reason.find(word), std::string::npos) << word << " in: " << mine.reason;
        EXPECT_EQ(std::regex_replace(mine.reason, trial_time, ")"), std::regex_replace(reports[0].reason, trial_time, ")"))
            << what << " rank " << rank;
      }
      if (predicted_iterations(one_reason) >= 0)
        EXPECT_NEAR(predicted_iterations(reports[0].reason), predicted_iterations(one_reason), 1)
            << what << ": " << reports[0].reason << "; one GPU: " << one_reason;
    }
  }
  // the AMG auto takes on the jumping coefficients solves them on ranks (to rtol 1e-8; the host's residual
  // within 10x of it, the allowance SolvesMatchOneGpu gives rounding's drift at 1e-10)
  const CsrMatrix jumps = generate("jump3d:48");
  SolverOptions o = options_for(SolverKind::cg, Preconditioner::automatic, 1);
  o.iteration.stop.rtol = 1e-8;
  const RanksOutcome got = solve_on_ranks(jumps, 2, o, 1, 11);
  ASSERT_TRUE(got.rank0.all_converged()) << got.rank0.columns[0].iterations << " iterations";
  EXPECT_EQ(got.reports[0].kind, Preconditioner::amg);
  EXPECT_LE(relative_residuals(jumps, got.x, make_rhs("random", jumps.rows, 1, 11))[0], 1e-7);
}

}  // namespace

namespace {

// ---- a file parsed once across the ranks (file_share) ----

// Every rank reads its part and calls file_share, on in-process ranks; each rank's share, or its failure.
struct FileShares {
  std::vector<FileShare> shares;
  std::vector<std::exception_ptr> failures;
};
FileShares file_shares(const std::string& path, int size) {
  InProcessGroup group(size, 30);
  FileShares out;
  out.shares.resize(static_cast<size_t>(size));
  out.failures = on_ranks(group, size, [&](int r) {
    ReadOptions o;
    o.threads = 2, o.chunk_bytes = 4096, o.part = {r, size};
    MatrixFile part = read_matrix_market(path, o);
    out.shares[static_cast<size_t>(r)] = file_share(std::move(part), path, o, group.communicator(r));
  });
  return out;
}

// A general file whose pattern is not symmetric (row i holds i+3 and i-7, column i-7 holds nothing at i): the sends
// must come from the peers' receives, not from structural symmetry.
CsrMatrix unsymmetric_pattern(int32_t n) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t i = 0; i < n; ++i) {
    ti.push_back(i), tj.push_back(i), tv.push_back(4.0 + i % 3);
    if (i + 3 < n) ti.push_back(i), tj.push_back(i + 3), tv.push_back(-0.5 - i % 5);
    if (i >= 7) ti.push_back(i), tj.push_back(i - 7), tv.push_back(0.25);
  }
  return csr_from_triplets(n, n, ti, tj, tv);
}

}  // namespace

// Each rank's share from the file parsed once across 1, 2, 3 and 5 ranks equals what rank_share cuts from the
// whole file (partition_by_work's rows, local and halo blocks, the plan): the inputs, a symmetric file stored as
// its lower triangle, and a general one whose pattern is not symmetric.
TEST_F(GpuRanks, FileParsedOnceAcrossRanksGivesEachRankItsShare) {
  const spcg::test::TempDir tmp;
  std::vector<std::string> files;
  for (const char* f : {"fv1.mtx", "bcsstk18.mtx"}) files.push_back(spcg::test::source_dir() + "/inputs/" + f);
  WriteOptions lower;
  lower.storage = MatrixStorage::symmetric_lower;
  files.push_back(tmp.file("jump3d_lower.mtx"));
  write_matrix_market(files.back(), generate("jump3d:9"), {}, lower);
  files.push_back(tmp.file("unsymmetric.mtx"));
  write_matrix_market(files.back(), unsymmetric_pattern(3001));
  for (const std::string& path : files) {
    if (!std::filesystem::exists(path)) continue;
    const MatrixFile whole = read_matrix_market(path);
    for (const int size : {1, 2, 3, 5}) {
      const FileShares got = file_shares(path, size);
      spcg::test::rethrow_first(got.failures);
      const RowPartition p = partition_by_work(whole.matrix, size);
      for (int r = 0; r < size; ++r) {
        const std::string what = path + " rank " + std::to_string(r) + " of " + std::to_string(size);
        const FileShare& fs = got.shares[static_cast<size_t>(r)];
        const RankBlocks want = rank_blocks(whole.matrix, p, r);
        EXPECT_EQ(fs.global_rows, whole.matrix.rows) << what;
        EXPECT_EQ(fs.share.row_begin, want.row_begin) << what;
        EXPECT_EQ(fs.share.row_end, want.row_end) << what;
        expect_same_csr(fs.share.local, want.local, what + " local");
        expect_same_csr(fs.share.halo, want.halo, what + " halo");
        EXPECT_EQ(fs.share.plan.halo_columns, want.plan.halo_columns) << what;
        expect_same_transfers(fs.share.plan.receive, want.plan.receive, what + " receive");
        expect_same_transfers(fs.share.plan.send, want.plan.send, what + " send");
        EXPECT_EQ(fs.info.duplicates_summed, whole.info.duplicates_summed) << what;
        EXPECT_EQ(fs.info.explicit_zeros, whole.info.explicit_zeros) << what;
      }
    }
  }
}

// A bad line in one rank's part: that rank names it as the whole read does (file and line); a wrong entry count:
// exactly one rank names it as the whole read does, the others end with CommunicationError.
TEST_F(GpuRanks, FileErrorsAcrossRanksNameTheWholeReadsLine) {
  const spcg::test::TempDir tmp;
  std::string text = "%%MatrixMarket matrix coordinate real general\n% a comment\n40 40 40\n";
  for (int i = 1; i <= 40; ++i) text += std::to_string(i) + " " + std::to_string(i) + " 2.5\n";
  const std::string bad_value = tmp.file("bad_value.mtx"), extra = tmp.file("extra.mtx"), short_file = tmp.file("short.mtx");
  std::string t = text;
  t.replace(t.find("38 38 2.5"), 9, "38 38 2.x");
  std::ofstream(bad_value) << t;
  std::ofstream(extra) << text + "1 2 1.0\n";
  std::ofstream(short_file) << text.substr(0, text.find("40 40 2.5"));
  for (const std::string& path : {bad_value, extra, short_file}) {
    long want_line = 0;
    std::string want_message;
    try {
      read_matrix_market(path);
      FAIL() << path << " accepted";
    } catch (const InputError& e) {
      want_line = e.line(), want_message = e.what();
    }
    for (const int size : {2, 3, 5}) {
      const FileShares got = file_shares(path, size);
      int named = 0, others = 0;
      for (const auto& f : got.failures) {
        try {
          if (f) std::rethrow_exception(f);
        } catch (const InputError& e) {
          ++named;
          EXPECT_EQ(e.line(), want_line) << path << " on " << size << " ranks: " << e.what();
          EXPECT_EQ(std::string(e.what()), want_message) << path << " on " << size << " ranks";
        } catch (const CommunicationError&) {
          ++others;
        }
      }
      EXPECT_EQ(named, 1) << path << " on " << size << " ranks";
      EXPECT_EQ(named + others, size) << path << " on " << size << " ranks: every rank ends";
    }
  }
}
