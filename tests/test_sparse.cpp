// Generators, statistics, format conversions and the Eigen bridge: all host code, all run in CI.
#include <gtest/gtest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "sparse/eigen_bridge.hpp"
#include "spcg/error.hpp"
#include "sparse/formats.hpp"
#include "spcg/generators.hpp"
#include "sparse/json.hpp"
#include "spcg/matrix_market.hpp"
#include "sparse/parallel.hpp"
#include "spcg/partition.hpp"
#include "sparse/problem.hpp"
#include "sparse/aggregation.hpp"
#include "spcg/stats.hpp"
#include "tests/test_util.hpp"

using namespace spcg;

namespace {
bool is_spd(const CsrMatrix& a) {
  Eigen::MatrixXd d = Eigen::MatrixXd(to_eigen(a));
  Eigen::LLT<Eigen::MatrixXd> llt(d);
  return llt.info() == Eigen::Success;
}
CsrMatrix random_csr(int32_t rows, int32_t cols, double density, uint64_t seed, bool empty_rows = true) {
  SplitMix64 rng(seed);
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t i = 0; i < rows; ++i) {
    if (empty_rows && i % 7 == 3) continue;
    for (int32_t j = 0; j < cols; ++j)
      if (rng.uniform() < density) ti.push_back(i), tj.push_back(j), tv.push_back(rng.uniform() - 0.5);
  }
  return csr_from_triplets(rows, cols, ti, tj, tv);
}
void expect_same(const CsrMatrix& a, const CsrMatrix& b) {
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_EQ(a.row_ptr, b.row_ptr);
  EXPECT_EQ(a.col_idx, b.col_idx);
  EXPECT_EQ(a.values, b.values);
}
}  // namespace

TEST(Generators, ExactNonzeroCounts) {
  EXPECT_EQ(poisson2d_5pt(10).nnz(), 5 * 100 - 4 * 10);
  EXPECT_EQ(poisson2d_9pt(10).nnz(), 9 * 100 - 6 * 10 * 2 + 4);
  EXPECT_EQ(poisson3d_7pt(10).nnz(), 7 * 1000 - 6 * 100);
  EXPECT_EQ(poisson3d_27pt(5).nnz(), 27LL * 125 - (27 * 125 - 13 * 13 * 13));
  EXPECT_EQ(anisotropic3d(6).nnz(), 7 * 216 - 6 * 36);
}

TEST(Generators, SymmetricPositiveDefinite) {
  for (const std::string spec :
       {"poisson2d:9", "poisson2d9:8", "poisson3d:5", "poisson3d27:4", "aniso3d:5", "jump3d:9", "jump3d:8:5", "powerlaw:300"}) {
    const CsrMatrix a = generate(spec);
    a.validate(spec);
    const MatrixStats s = compute_stats(a);
    EXPECT_TRUE(s.numerically_symmetric) << spec;
    EXPECT_TRUE(s.diagonal_positive) << spec;
    EXPECT_TRUE(is_spd(a)) << spec;
  }
}

TEST(Generators, DeterministicFromSeed) {
  const CsrMatrix a = generate("powerlaw:2000:7"), b = generate("powerlaw:2000:7"), c = generate("powerlaw:2000:8");
  expect_same(a, b);
  EXPECT_NE(a.col_idx, c.col_idx);
}

// jump3d: a 7-point pattern; each row's diagonal the sum of its face coefficients, those of interior rows
// exactly the negated off-diagonal sum, boundary rows more (their Dirichlet faces); coefficients spanning the
// jumps asked for; the seed moves the boxes.
TEST(Generators, Jump3dIsADiffusionWithJumps) {
  const int n = 24;
  const CsrMatrix a = jump3d(n, 3);
  a.validate("jump3d");
  EXPECT_EQ(a.nnz(), 7 * n * n * n - 6 * n * n);
  double smallest = 1e300, largest = 0;
  int64_t interior_rows = 0;
  for (int32_t i = 0; i < a.rows; ++i) {
    double diag = 0, off = 0;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      if (a.col_idx[p] == i) diag = a.values[p];
      else {
        EXPECT_LT(a.values[p], 0.0);
        off -= a.values[p];
        smallest = std::min(smallest, -a.values[p]), largest = std::max(largest, -a.values[p]);
      }
    }
    if (a.row_length(i) == 7) {
      ++interior_rows;
      EXPECT_NEAR(diag, off, 1e-12 * diag) << "row " << i;
    } else {
      EXPECT_GT(diag, off) << "row " << i;
    }
  }
  EXPECT_EQ(interior_rows, int64_t{n - 2} * (n - 2) * (n - 2));
  EXPECT_GE(largest / smallest, 1e4) << "the coefficients jump";
  EXPECT_LE(largest, 1e3 * (1 + 1e-12));
  EXPECT_GE(smallest, 1e-3 * (1 - 1e-12));
  expect_same(a, generate("jump3d:24:3"));
  EXPECT_NE(a.values, jump3d(n, 4).values);
  EXPECT_EQ(generate("jump3d:24").values, jump3d(n, 1).values);  // the default seed
}

TEST(Generators, PowerLawHasLongTail) {
  const CsrMatrix a = powerlaw_spd(200000, 42);
  const MatrixStats s = compute_stats(a);
  EXPECT_GT(s.row_max, 1000);
  EXPECT_LT(s.row_mean, 20);
  EXPECT_GT(s.row_stddev / s.row_mean, 1.0);
}

// A 1M-row generation is right (how fast it is is the benchmarks' business, not a test's).
TEST(Generators, LargePoisson) {
  const CsrMatrix a = poisson3d_7pt(100);  // 1M rows; 200^3 is 8x this
  EXPECT_EQ(a.rows, 1000000);
  EXPECT_EQ(a.nnz(), 7 * int64_t{1000000} - 6 * 100 * 100);  // 7 per row less one per boundary face point
  a.validate("poisson3d:100");
}

TEST(Generators, BadSpecsAreClearErrors) {
  for (const std::string spec : {"poisson3d", "poisson3d:x", "poisson3d:-4", "cube:10", "poisson3d:99999", "jump3d:8:x", "jump3d:"}) {
    try {
      generate(spec);
      ADD_FAILURE() << spec;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), spec);
    }
  }
}

TEST(Stats, CountsOnKnownMatrix) {
  // [4 -1 0; -1 4 0; 0 0 0] with an explicit zero at (3,3)... plus an empty row.
  CsrMatrix a;
  a.rows = a.cols = 4;
  a.row_ptr = {0, 2, 4, 5, 5};
  a.col_idx = {0, 1, 0, 1, 2};
  a.values = {4, -1, -1, 4, 0};
  const MatrixStats s = compute_stats(a, 2);
  EXPECT_EQ(s.nnz, 5);
  EXPECT_EQ(s.row_min, 0);
  EXPECT_EQ(s.row_max, 2);
  EXPECT_EQ(s.empty_rows, 1);
  EXPECT_EQ(s.explicit_zeros, 1);
  EXPECT_EQ(s.duplicates_summed, 2);
  EXPECT_EQ(s.bandwidth, 1);
  EXPECT_EQ(s.distinct_diagonals, 3);
  EXPECT_TRUE(s.pattern_symmetric);
  EXPECT_TRUE(s.numerically_symmetric);
  EXPECT_EQ(s.missing_diagonal, 1);
  EXPECT_EQ(s.nonpositive_diagonal, 2);
  EXPECT_FALSE(s.diagonal_positive);
  EXPECT_EQ(s.strictly_dominant_rows, 2);
}

TEST(Stats, DetectsAsymmetry) {
  CsrMatrix a;
  a.rows = a.cols = 2;
  a.row_ptr = {0, 2, 3};
  a.col_idx = {0, 1, 1};
  a.values = {1, 2, 1};  // (1,2) has no partner
  const MatrixStats s = compute_stats(a);
  EXPECT_FALSE(s.pattern_symmetric);
  EXPECT_FALSE(s.numerically_symmetric);
  a.row_ptr = {0, 2, 4};
  a.col_idx = {0, 1, 0, 1};
  a.values = {1, 2, 2.5, 1};
  const MatrixStats t = compute_stats(a);
  EXPECT_TRUE(t.pattern_symmetric);
  EXPECT_FALSE(t.numerically_symmetric);
  EXPECT_NEAR(t.max_asymmetry, 0.2, 1e-12);
}

TEST(Formats, RoundTrips) {
  for (uint64_t seed : {1, 2, 3}) {
    const CsrMatrix a = random_csr(97, 61, 0.1, seed);
    expect_same(coo_to_csr(csr_to_coo(a)), a);
    expect_same(ell_to_csr(csr_to_ell(a, 100)), a);
    expect_same(sell_to_csr(csr_to_sell(a, 32, 1, 100)), a);
    expect_same(sell_to_csr(csr_to_sell(a, 32, 64, 100)), a);
    expect_same(sell_to_csr(csr_to_sell(a, 4, 8, 100)), a);
    expect_same(hyb_to_csr(csr_to_hyb(a)), a);
    expect_same(hyb_to_csr(csr_to_hyb(a, 2)), a);
    expect_same(dia_to_csr(csr_to_dia(a, 1e9)), a);  // no explicit zeros in a
  }
  const CsrMatrix p = poisson3d_7pt(6);
  expect_same(dia_to_csr(csr_to_dia(p)), p);
}

TEST(Formats, EllPaddingUsesLastColumnAndZero) {
  CsrMatrix a;
  a.rows = a.cols = 3;
  a.row_ptr = {0, 1, 3, 3};
  a.col_idx = {2, 0, 1};
  a.values = {5, 6, 7};
  const EllMatrix e = csr_to_ell(a, 10);
  ASSERT_EQ(e.width, 2);
  EXPECT_EQ(e.col_idx[1 * 3 + 0], 2);  // row 0 padded with its last column
  EXPECT_EQ(e.values[1 * 3 + 0], 0.0);
  EXPECT_EQ(e.values[0 * 3 + 2], 0.0);  // empty row
}

TEST(Formats, FillGuardsRefuseWastefulConversions) {
  const CsrMatrix p = powerlaw_spd(5000, 3);
  EXPECT_THROW(csr_to_dia(p), FormatRefused);
  EXPECT_THROW(csr_to_ell(p), FormatRefused);
  const DiaMatrix d = csr_to_dia(poisson3d_7pt(20));
  EXPECT_EQ(d.offsets.size(), 7u);
}

TEST(Formats, SymmetricDiaKeepsTheUpperHalfOnlyWhenExact) {
  const DiaMatrix d = csr_to_dia(poisson3d_7pt(6));
  ASSERT_EQ(d.offsets.size(), 7u);
  EXPECT_TRUE(dia_is_symmetric(d));
  const DiaMatrix u = dia_upper_half(d);
  EXPECT_EQ(u.offsets, (std::vector<int32_t>{0, 1, 6, 36}));
  ASSERT_EQ(u.values.size(), 4u * d.rows);
  for (size_t k = 0; k < u.offsets.size(); ++k)  // stripe k of the half is stripe 3 + k of the whole
    for (int32_t i = 0; i < d.rows; ++i) EXPECT_EQ(u.values[k * d.rows + i], d.values[(3 + k) * d.rows + i]);
  DiaMatrix bent = d;
  bent.values[1 * d.rows + 20] += 1e-15;  // offset -6, row 20: A(20, 14) != A(14, 20)
  EXPECT_FALSE(dia_is_symmetric(bent));
  CsrMatrix rect = poisson2d_5pt(4);
  rect.cols += 1;
  EXPECT_FALSE(dia_is_symmetric(csr_to_dia(rect)));
  // an unsymmetric pattern: one upper entry without its mirror
  CsrMatrix lop = csr_from_triplets(3, 3, {0, 1, 2, 0}, {0, 1, 2, 2}, {1.0, 1.0, 1.0, 0.5});
  EXPECT_FALSE(dia_is_symmetric(csr_to_dia(lop, 10)));
}

TEST(Formats, SymmetricCsrStoresTheStrictUpperHalfOnlyWhenExact) {
  for (const CsrMatrix& a : {poisson3d_7pt(6), powerlaw_spd(3000, 4), CsrMatrix{}}) {
    const SymmetricCsr s = csr_to_symmetric(a);
    EXPECT_EQ(s.upper.nnz() * 2 + a.rows, a.nnz());  // every diagonal entry is stored in these
    for (int32_t i = 0; i < s.upper.rows; ++i)
      for (int32_t p = s.upper.row_ptr[i]; p < s.upper.row_ptr[i + 1]; ++p) ASSERT_GT(s.upper.col_idx[p], i);
    expect_same(symmetric_to_csr(s), a);
  }
  // Empty rows, no diagonal entries at all: the diagonal is zero and the round trip keeps the pattern.
  const CsrMatrix hollow = csr_from_triplets(4, 4, {0, 3, 1, 3}, {3, 0, 3, 1}, {2.0, 2.0, -1.0, -1.0});
  const SymmetricCsr h = csr_to_symmetric(hollow);
  EXPECT_EQ(h.diagonal, (std::vector<double>{0, 0, 0, 0}));
  expect_same(symmetric_to_csr(h), hollow);
  auto refusal = [](const CsrMatrix& a) {
    try {
      csr_to_symmetric(a);
    } catch (const FormatRefused& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CsrMatrix bent = poisson3d_7pt(6);
  bent.values[bent.row_ptr[20] + 1] += 1e-15;  // a lower entry of row 20 no longer equals its mirror
  EXPECT_NE(refusal(bent).find("no equal mirror"), std::string::npos) << refusal(bent);
  EXPECT_NE(refusal(csr_from_triplets(3, 3, {0, 1, 2, 0}, {0, 1, 2, 2}, {1.0, 1.0, 1.0, 0.5})).find("pattern"),
            std::string::npos);
  EXPECT_NE(refusal(random_csr(5, 6, 0.5, 1)).find("5 x 6"), std::string::npos);
}

TEST(Formats, HybWidthFollowsDistribution) {
  const CsrMatrix p = powerlaw_spd(20000, 3);
  const HybMatrix h = csr_to_hyb(p);
  EXPECT_GE(h.ell.width, 2);
  EXPECT_LT(h.ell.width, 64);
  EXPECT_GT(h.coo.values.size(), 0u);
}

TEST(EigenBridge, RoundTripAndReferenceSpmm) {
  const CsrMatrix a = random_csr(50, 40, 0.2, 9);
  expect_same(from_eigen(to_eigen(a)), a);
  DenseBlock x(40, 3), y(50, 3, std::numeric_limits<double>::quiet_NaN());
  SplitMix64 rng(4);
  for (double& v : x.data) v = rng.uniform();
  reference_spmm(a, 2.0, x, 0.0, y);  // beta = 0 must not read the NaN-poisoned y
  const Eigen::MatrixXd ex = Eigen::Map<Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>(x.data.data(), 40, 3);
  const Eigen::MatrixXd ey = 2.0 * (to_eigen(a) * ex);
  for (int i = 0; i < 50; ++i)
    for (int j = 0; j < 3; ++j) EXPECT_NEAR(y.at(i, j), ey(i, j), 1e-13) << i << "," << j;
}

TEST(EigenBridge, HostConjugateGradientSolves) {
  const CsrMatrix a = poisson2d_5pt(20);
  DenseBlock b(a.rows, 2, 1.0);
  const HostSolveResult r = eigen_cg(a, b, 1e-10, 1000, false);
  EXPECT_TRUE(r.all_converged);
  for (double rel : relative_residuals(a, r.x, b)) EXPECT_LT(rel, 1e-9);
  const HostSolveResult rj = eigen_cg(a, b, 1e-10, 1000, true);
  EXPECT_TRUE(rj.all_converged);
}

namespace {
// The partition and halo tests' matrices: 0x0, 1x1, odd sizes, empty rows, a dense row, power-law, real files.
std::vector<std::pair<std::string, CsrMatrix>> partition_matrices() {
  std::vector<std::pair<std::string, CsrMatrix>> m;
  m.emplace_back("0x0", CsrMatrix{});
  CsrMatrix one;
  one.rows = one.cols = 1, one.row_ptr = {0, 1}, one.col_idx = {0}, one.values = {2.0};
  m.emplace_back("1x1", one);
  m.emplace_back("random 97 with empty rows", random_csr(97, 97, 0.05, 11));
  CsrMatrix dense_row = random_csr(301, 301, 0.01, 12);
  {
    std::vector<int32_t> ti, tj;
    std::vector<double> tv;
    for (int32_t i = 0; i < dense_row.rows; ++i)
      for (int32_t q = dense_row.row_ptr[i]; q < dense_row.row_ptr[i + 1]; ++q)
        ti.push_back(i), tj.push_back(dense_row.col_idx[q]), tv.push_back(dense_row.values[q]);
    for (int32_t j = 0; j < dense_row.cols; ++j) ti.push_back(150), tj.push_back(j), tv.push_back(0.5 + j);
    dense_row = csr_from_triplets(301, 301, ti, tj, tv);
  }
  m.emplace_back("dense row", dense_row);
  m.emplace_back("powerlaw:3000", generate("powerlaw:3000"));
  m.emplace_back("jump3d:7", generate("jump3d:7"));
  const char* moved = std::getenv("SPCG_SOURCE_DIR");  // the device machine runs a copy elsewhere
  const std::string inputs = std::string(moved ? moved : SPCG_SOURCE_DIR) + "/inputs/";
  for (const char* f : {"bcsstk01.mtx", "nos4.mtx", "fv1.mtx"}) m.emplace_back(f, read_matrix_market(inputs + f).matrix);
  return m;
}
}  // namespace

TEST(Partition, ContiguousBlocksBalancedByWork) {
  for (const auto& [name, a] : partition_matrices())
    for (int ranks : {1, 2, 3, 5, 400}) {
      const std::string what = name + ", " + std::to_string(ranks) + " ranks";
      const RowPartition p = partition_by_work(a, ranks);
      ASSERT_EQ(p.ranks(), ranks) << what;
      EXPECT_EQ(p.begin(0), 0) << what;
      EXPECT_EQ(p.end(ranks - 1), a.rows) << what;
      int64_t max_row = 0;
      for (int32_t i = 0; i < a.rows; ++i) max_row = std::max<int64_t>(max_row, a.row_length(i) + 1);
      const double mean = double(a.nnz() + a.rows) / ranks;
      for (int r = 0; r < ranks; ++r) {
        EXPECT_LE(p.begin(r), p.end(r)) << what;
        const int64_t work = int64_t{a.row_ptr[p.end(r)]} - a.row_ptr[p.begin(r)] + (p.end(r) - p.begin(r));
        EXPECT_LE(double(work), mean + double(max_row) + 1) << what << ", rank " << r;
        for (int32_t i = p.begin(r); i < p.end(r); ++i) ASSERT_EQ(p.owner(i), r) << what << ", row " << i;
      }
    }
  EXPECT_THROW(partition_by_work(poisson2d_5pt(3), 0), Error);
}

// Every entry lands once, in the local block (own columns) or the halo block (others'), the plans agree on
// both sides, and the distributed SpMV through the in-process exchange equals the global one.
TEST(Partition, HaloPlansGiveTheGlobalSpmv) {
  for (const auto& [name, a] : partition_matrices())
    for (int ranks : {1, 2, 3, 5}) {
      const std::string what = name + ", " + std::to_string(ranks) + " ranks";
      const RowPartition p = partition_by_work(a, ranks);
      const std::vector<RankBlocks> blocks = split_for_ranks(a, p);
      ASSERT_EQ(blocks.size(), static_cast<size_t>(ranks)) << what;
      int64_t entries = 0, sent = 0, received = 0;
      for (const RankBlocks& rb : blocks) {
        rb.local.validate(what + " local");
        rb.halo.validate(what + " halo");
        entries += rb.local.nnz() + rb.halo.nnz();
        sent += rb.plan.send_count(), received += rb.plan.receive_count();
        for (int32_t c : rb.plan.halo_columns) EXPECT_TRUE(c < rb.row_begin || c >= rb.row_end) << what;
        for (int32_t slot = 0; slot < rb.halo.cols; ++slot) {  // every halo slot is used by some entry
          bool used = false;
          for (int32_t c : rb.halo.col_idx) used |= c == slot;
          EXPECT_TRUE(used) << what << ", rank " << rb.rank << " slot " << slot;
        }
        if (ranks == 1) EXPECT_EQ(rb.halo.nnz(), 0) << what;
      }
      EXPECT_EQ(entries, a.nnz()) << what;
      EXPECT_EQ(sent, received) << what;

      DenseBlock x = random_block(a.rows, 1, 5), y(a.rows, 1, 0.0);
      reference_spmm(a, 1.0, x, 0.0, y);
      std::vector<std::vector<double>> x_parts(static_cast<size_t>(ranks));
      for (int r = 0; r < ranks; ++r) x_parts[r].assign(x.data.begin() + p.begin(r), x.data.begin() + p.end(r));
      const std::vector<std::vector<double>> y_parts = distributed_spmv_in_process(blocks, x_parts);
      for (int r = 0; r < ranks; ++r)
        for (int32_t i = p.begin(r); i < p.end(r); ++i) {
          double scale = 0;  // sum |a_ij x_j|: the rounding of any summation order is within eps times this per term
          for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) scale += std::abs(a.values[q] * x.data[a.col_idx[q]]);
          EXPECT_NEAR(y_parts[r][static_cast<size_t>(i - p.begin(r))], y.data[i],
                      4.0 * std::numeric_limits<double>::epsilon() * (a.row_length(i) + 1) * scale)
              << what << ", row " << i;
        }
    }
}

namespace {
// Nodes within two edges of i (i excluded).
std::vector<int32_t> within_two(const CsrMatrix& g, int32_t i) {
  std::vector<int32_t> out;
  for (int32_t p = g.row_ptr[i]; p < g.row_ptr[i + 1]; ++p) {
    const int32_t j = g.col_idx[p];
    out.push_back(j);
    for (int32_t q = g.row_ptr[j]; q < g.row_ptr[j + 1]; ++q) out.push_back(g.col_idx[q]);
  }
  out.erase(std::remove(out.begin(), out.end(), i), out.end());
  return out;
}
}  // namespace

TEST(Aggregation, StrengthGraphKeepsTheStrongConnectionsSymmetrically) {
  const CsrMatrix a = generate("jump3d:9");
  const CsrMatrix all = strength_graph(a, 0.0), strong = strength_graph(a, 0.25);
  all.validate("strength 0"), strong.validate("strength 0.25");
  EXPECT_EQ(all.nnz(), a.nnz() - a.rows);  // every off-diagonal entry (none is zero)
  EXPECT_LT(strong.nnz(), all.nnz());       // the coefficient jumps make some connections weak
  for (const CsrMatrix* g : {&all, &strong}) {
    const CsrMatrix t = transpose(*g);
    EXPECT_EQ(t.row_ptr, g->row_ptr);
    EXPECT_EQ(t.col_idx, g->col_idx);
  }
  // the rule itself, entry by entry
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t j = a.col_idx[p];
      if (j == i) continue;
      double aii = 0, ajj = 0;
      for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) if (a.col_idx[q] == i) aii = a.values[q];
      for (int32_t q = a.row_ptr[j]; q < a.row_ptr[j + 1]; ++q) if (a.col_idx[q] == j) ajj = a.values[q];
      const bool in_graph = std::binary_search(strong.col_idx.begin() + strong.row_ptr[i],
                                               strong.col_idx.begin() + strong.row_ptr[i + 1], j);
      EXPECT_EQ(in_graph, std::abs(a.values[p]) >= 0.25 * std::sqrt(aii * ajj)) << i << "," << j;
    }
}

// MIS-2: no two roots within two edges, every other node within two edges of a root; aggregates partition the
// nodes, each holds one root and is connected; P has orthonormal columns; the same seed gives the same result.
TEST(Aggregation, Mis2AggregatesAndTentativeProlongator) {
  CsrMatrix isolated;  // a diagonal matrix: no strong connections at all
  isolated.rows = isolated.cols = 5, isolated.row_ptr = {0, 1, 2, 3, 4, 5}, isolated.col_idx = {0, 1, 2, 3, 4};
  isolated.values = {1, 2, 3, 4, 5};
  const char* moved = std::getenv("SPCG_SOURCE_DIR");
  const std::string inputs = std::string(moved ? moved : SPCG_SOURCE_DIR) + "/inputs/";
  std::vector<std::pair<std::string, CsrMatrix>> cases = {
      {"0x0", CsrMatrix{}}, {"diagonal", isolated}, {"poisson2d:20", generate("poisson2d:20")},
      {"jump3d:8", generate("jump3d:8")}, {"powerlaw:500", generate("powerlaw:500")},
      {"nos4", read_matrix_market(inputs + "nos4.mtx").matrix}, {"bcsstk01", read_matrix_market(inputs + "bcsstk01.mtx").matrix}};
  for (const auto& [name, a] : cases)
    for (const uint64_t seed : {0, 7}) {
      const std::string what = name + " seed " + std::to_string(seed);
      const CsrMatrix g = strength_graph(a, 0.08);
      const std::vector<uint8_t> root = mis2(g, seed);
      for (int32_t i = 0; i < g.rows; ++i) {
        const std::vector<int32_t> near = within_two(g, i);
        const bool root_near = std::any_of(near.begin(), near.end(), [&](int32_t j) { return root[j] != 0; });
        if (root[i]) EXPECT_FALSE(root_near) << what << ": roots " << i << " within two edges of another";
        else EXPECT_TRUE(root_near) << what << ": node " << i << " not covered";
      }
      const Aggregates agg = aggregate(g, seed);
      ASSERT_EQ(agg.of.size(), static_cast<size_t>(a.rows)) << what;
      std::vector<int32_t> roots_in(static_cast<size_t>(agg.count), 0), size(static_cast<size_t>(agg.count), 0);
      for (int32_t i = 0; i < a.rows; ++i) {
        ASSERT_GE(agg.of[i], 0) << what;
        ASSERT_LT(agg.of[i], agg.count) << what;
        roots_in[agg.of[i]] += root[i], ++size[agg.of[i]];
      }
      for (int32_t c = 0; c < agg.count; ++c) EXPECT_EQ(roots_in[c], 1) << what << ": aggregate " << c;
      // connected: a breadth-first walk inside each aggregate from its root reaches all of it
      std::vector<uint8_t> seen(static_cast<size_t>(a.rows), 0);
      for (int32_t r = 0; r < a.rows; ++r) {
        if (!root[r]) continue;
        std::vector<int32_t> queue{r};
        seen[r] = 1;
        for (size_t h = 0; h < queue.size(); ++h)
          for (int32_t p = g.row_ptr[queue[h]]; p < g.row_ptr[queue[h] + 1]; ++p) {
            const int32_t j = g.col_idx[p];
            if (!seen[j] && agg.of[j] == agg.of[r]) seen[j] = 1, queue.push_back(j);
          }
        EXPECT_EQ(static_cast<int32_t>(queue.size()), size[agg.of[r]]) << what << ": aggregate of root " << r;
      }
      // P'P = I
      const CsrMatrix p = tentative_prolongator(agg);
      p.validate(what + " P");
      std::vector<double> ptp(static_cast<size_t>(agg.count), 0.0);
      for (int32_t i = 0; i < p.rows; ++i) ptp[p.col_idx[i]] += p.values[i] * p.values[i];
      for (int32_t c = 0; c < agg.count; ++c) EXPECT_NEAR(ptp[c], 1.0, 1e-15 * size[c]) << what;
      EXPECT_EQ(aggregate(g, seed).of, agg.of) << what << ": deterministic";
    }
  const CsrMatrix g = strength_graph(generate("poisson2d:30"), 0.08);
  EXPECT_NE(aggregate(g, 0).of, aggregate(g, 1).of);  // the seed moves the roots
  EXPECT_LT(aggregate(g, 0).count, g.rows / 4);        // MIS-2 coarsens a 5-point grid by more than 4x
}

// ---- What else the host code refuses, and its edges ----

TEST(Csr, ValidateNamesEachDefect) {
  const CsrMatrix good = poisson2d_5pt(3);
  good.validate();
  struct Defect {
    std::function<void(CsrMatrix&)> make;
    const char* fragment;
  };
  for (const Defect& d : std::vector<Defect>{
           {[](CsrMatrix& a) { a.rows = -1; }, "negative dimension"},
           {[](CsrMatrix& a) { a.row_ptr.pop_back(); }, "row_ptr has 9 entries, expected rows+1 = 10"},
           {[](CsrMatrix& a) { a.row_ptr[0] = 1; }, "row_ptr[0] = 1, expected 0"},
           {[](CsrMatrix& a) { a.values.pop_back(); }, "values and col_idx differ in size"},
           {[](CsrMatrix& a) { a.row_ptr[a.rows] -= 1; }, "row_ptr[rows] != nnz"},
           {[](CsrMatrix& a) { a.row_ptr[2] = a.row_ptr[1] - 1; }, "row_ptr decreases at row 1"},
           {[](CsrMatrix& a) { a.col_idx[0] = a.cols; }, "column 9 out of range in row 0"},
           {[](CsrMatrix& a) { std::swap(a.col_idx[0], a.col_idx[1]); }, "columns not strictly increasing in row 0"},
           {[](CsrMatrix& a) { a.values[4] = std::nan(""); }, "non-finite value in row 1"}}) {
    CsrMatrix a = good;
    d.make(a);
    try {
      a.validate("m");
      ADD_FAILURE() << "accepted: " << d.fragment;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("m: invalid CSR: ") + d.fragment), std::string::npos) << e.what();
    }
  }
}

TEST(Stats, EmptyMatrix) {
  const MatrixStats s = compute_stats(CsrMatrix{});
  EXPECT_TRUE(s.square);
  EXPECT_TRUE(s.pattern_symmetric);
  EXPECT_TRUE(s.numerically_symmetric);
  EXPECT_TRUE(s.diagonal_positive);
  CsrMatrix wide;
  wide.rows = 0, wide.cols = 3, wide.row_ptr = {0};
  const MatrixStats w = compute_stats(wide);
  EXPECT_FALSE(w.square);
  EXPECT_FALSE(w.numerically_symmetric);
}

TEST(Problem, RightHandSidesFromFilesAndNonFiniteBlocks) {
  const spcg::test::TempDir tmp;
  const std::string path = tmp.file("rhs.mtx");
  DenseBlock b(3, 2);
  for (size_t i = 0; i < b.data.size(); ++i) b.data[i] = 0.25 * double(i) - 1;
  write_dense_matrix_market(path, b);
  const DenseBlock r = make_rhs(path, 3, 2, 0);
  EXPECT_TRUE(std::equal(r.data.begin(), r.data.end(), b.data.begin(), b.data.end()));
  EXPECT_THROW(make_rhs(path, 4, 2, 0), InputError);
  b.at(1, 0) = std::numeric_limits<double>::infinity();
  try {
    require_finite(b, "x0.mtx");
    FAIL() << "accepted an Inf";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "x0.mtx");
    EXPECT_NE(std::string(e.what()).find("entry (2, 1) is NaN or Inf"), std::string::npos) << e.what();
  }
}

// The lowest failed task's exception, on every thread count (tasks after it may still run).
// A process's share of the host's threads (a rank among ranks on one host): every parallel step keeps to it, and
// 0 gives all of them back; the work done is the same.
TEST(Parallel, ThreadBudgetBoundsEveryStep) {
  const int all = hardware_threads();
  set_thread_budget(1);
  EXPECT_EQ(hardware_threads(), 1);
  EXPECT_EQ(resolve_threads(0), 1);
  std::atomic<int> widest{0};
  std::vector<int> seen(1000, 0);
  parallel_for(1000, resolve_threads(0), [&](int64_t t, int worker) {
    int w = widest.load();
    while (worker + 1 > w && !widest.compare_exchange_weak(w, worker + 1)) {}
    seen[static_cast<size_t>(t)] += 1;
  });
  EXPECT_EQ(widest.load(), 1);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 1000);
  set_thread_budget(all + 100);
  EXPECT_EQ(hardware_threads(), all) << "never more than the host has";
  set_thread_budget(0);
  EXPECT_EQ(hardware_threads(), all);
}

TEST(Parallel, FirstFailedTaskIsRethrown) {
  for (int threads : {1, 2, 3, 8}) {
    std::atomic<int> ran{0};
    try {
      parallel_for(200, threads, [&](int64_t t) {
        ++ran;
        if (t == 37 || t == 38 || t == 150) throw std::runtime_error("task " + std::to_string(t));
      });
      ADD_FAILURE() << threads << " threads: no exception";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "task 37") << threads << " threads";
    }
    EXPECT_GE(ran.load(), 38);
  }
}

TEST(Json, QuotesControlCharactersAndNonFiniteNumbers) {
  EXPECT_EQ(Json::quote(std::string("a\"b\\c\n\x01", 7)), "\"a\\\"b\\\\c\\u000a\\u0001\"");
  EXPECT_EQ(Json::number(std::nan("")), "null");
}

TEST(Partition, MismatchedPartitionsAreRefused) {
  const CsrMatrix a = poisson2d_5pt(4);
  EXPECT_THROW(rank_blocks(a, partition_evenly(a.rows + 1, 2), 0), Error);
  EXPECT_THROW(rank_blocks(a, partition_evenly(a.rows, 2), 2), Error);
  EXPECT_THROW(rank_blocks(a, partition_evenly(a.rows, 2), -1), Error);
  EXPECT_THROW(split_for_ranks(a, partition_evenly(a.rows - 1, 3)), Error);
}

TEST(Generators, RowsOutsideACutMatrixAreRefused) {
  EXPECT_THROW(generate_rows("jump3d:4", 3, 100), InputError);
  EXPECT_THROW(generate_rows("powerlaw:50", 10, 5), InputError);
  const GlobalRows rows = generate_rows("jump3d:4", 3, 10);
  EXPECT_EQ(rows.rows, 7);
  EXPECT_EQ(rows.first_row, 3);
  EXPECT_EQ(rows.global_cols, 64);
}

TEST(EigenBridge, HostConjugateGradientFromAnInitialGuess) {
  const CsrMatrix a = poisson2d_5pt(12);
  const DenseBlock b(a.rows, 1, 1.0);
  const HostSolveResult exact = eigen_cg(a, b, 1e-12, 1000, true);
  ASSERT_TRUE(exact.all_converged);
  const HostSolveResult again = eigen_cg(a, b, 1e-8, 1000, true, &exact.x);  // starts at the solution
  EXPECT_TRUE(again.all_converged);
  EXPECT_LE(again.iterations[0], 1);
}
