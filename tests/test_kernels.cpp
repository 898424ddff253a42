// Every registry kernel against the long-double host reference on synthetic edge cases and real SuiteSparse
// files, for several block widths, random alpha/beta, beta = 0 with a NaN-poisoned Y, outputs poisoned before
// every run. Skipped (with the reason) where there is no CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "kernels/bench/bench_probes.hpp"
#include "kernels/solver_ops/blas1.hpp"
#include "kernels/solver_ops/block_ops.hpp"
#include "kernels/variants/dia_box.hpp"
#include "sparse/eigen_bridge.hpp"
#include "sparse/formats.hpp"
#include "spcg/generators.hpp"
#include "kernels/kernel_timer.hpp"
#include "kernels/kernel_preload.hpp"
#include "spcg/matrix_market.hpp"
#include "kernels/cuda_libraries.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/registry.hpp"
#include "kernels/setup_kernels.hpp"
#include "spcg/stats.hpp"
#include "tests/test_util.hpp"
#include "kernels/variants/row_blocks.hpp"
#include "kernels/solver_ops/vector_ops.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "tests/host_operator.hpp"

using namespace spcg;

namespace {

struct NamedMatrix {
  std::string name;
  CsrMatrix a;
};

CsrMatrix from_triplets_random(int32_t rows, int32_t cols, uint64_t seed, double density, int dense_row = -1,
                               int empty_every = 0) {
  SplitMix64 rng(seed);
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t i = 0; i < rows; ++i) {
    if (empty_every && i % empty_every == 1) continue;
    for (int32_t j = 0; j < cols; ++j)
      if (i == dense_row || rng.uniform() < density) ti.push_back(i), tj.push_back(j), tv.push_back(rng.uniform() - 0.5);
  }
  return csr_from_triplets(rows, cols, ti, tj, tv);
}

// Symmetric with random values (csr-sym takes only exactly symmetric matrices): pairs (i, j), i < j, drawn with
// `density` or always when i or j is in `dense`; rows i % empty_every == 1 stay empty (no diagonal either).
CsrMatrix symmetric_random(int32_t n, uint64_t seed, double density, const std::vector<int32_t>& dense = {},
                           int empty_every = 0) {
  SplitMix64 rng(seed);
  auto empty = [&](int32_t i) { return empty_every && i % empty_every == 1; };
  auto is_dense = [&](int32_t i) { return std::find(dense.begin(), dense.end(), i) != dense.end(); };
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t i = 0; i < n; ++i) {
    if (empty(i)) continue;
    ti.push_back(i), tj.push_back(i), tv.push_back(rng.uniform() + 0.5);
    for (int32_t j = i + 1; j < n; ++j)
      if (!empty(j) && (is_dense(i) || is_dense(j) || rng.uniform() < density)) {
        const double v = rng.uniform() - 0.5;
        ti.push_back(i), tj.push_back(j), tv.push_back(v);
        ti.push_back(j), tj.push_back(i), tv.push_back(v);
      }
  }
  return csr_from_triplets(n, n, ti, tj, tv);
}

// n x n with the given diagonals (the entries that fall inside the matrix), values uniform in [-1, 1).
CsrMatrix banded_random(int32_t n, const std::vector<int32_t>& offsets, uint64_t seed) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  SplitMix64 rng(seed);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t o : offsets)
      if (i + o >= 0 && i + o < n) ti.push_back(i), tj.push_back(i + o), tv.push_back(2 * rng.uniform() - 1);
  return csr_from_triplets(n, n, ti, tj, tv);
}

// A symmetric stencil on an nx x ny x nz box (7 or 27 points), values uniform in [-1, 1) mirrored across the
// diagonal: dia keeps the upper half and, lines of at least 16 rows, takes the plane march (spmv_dia_box.cu).
CsrMatrix symmetric_box_stencil(int32_t nx, int32_t ny, int32_t nz, int points, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t z = 0; z < nz; ++z)
    for (int32_t y = 0; y < ny; ++y)
      for (int32_t x = 0; x < nx; ++x) {
        const int32_t i = (z * ny + y) * nx + x;
        ti.push_back(i), tj.push_back(i), tv.push_back(2 * rng.uniform() - 1);
        for (int dz = 0; dz <= 1; ++dz)
          for (int dy = -1; dy <= 1; ++dy)
            for (int dx = -1; dx <= 1; ++dx) {
              const bool upper = dz > 0 || dy > 0 || (dy == 0 && dx > 0);
              const bool seven = std::abs(dx) + std::abs(dy) + dz == 1;
              if (!upper || (points == 7 && !seven)) continue;
              if (x + dx < 0 || x + dx >= nx || y + dy < 0 || y + dy >= ny || z + dz >= nz) continue;
              const int32_t j = ((z + dz) * ny + (y + dy)) * nx + (x + dx);
              const double v = 2 * rng.uniform() - 1;
              ti.push_back(i), tj.push_back(j), tv.push_back(v);
              ti.push_back(j), tj.push_back(i), tv.push_back(v);
            }
      }
  const int32_t n = nx * ny * nz;
  return csr_from_triplets(n, n, ti, tj, tv);
}

// Symmetric, n x n, with the 27 diagonals of a box stencil of lines of `line` rows and planes of `plane` rows, every
// entry inside the matrix present (random values, mirrored): no stencil's zeros where a line or plane wraps, and n
// need not be whole planes. dia's plane march must give its product all the same (its box is a reading of offsets).
CsrMatrix symmetric_box_band(int32_t n, int32_t line, int32_t plane, uint64_t seed) {
  SplitMix64 rng(seed);
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  for (int32_t i = 0; i < n; ++i) {
    ti.push_back(i), tj.push_back(i), tv.push_back(2 * rng.uniform() - 1);
    for (int dz = 0; dz <= 1; ++dz)
      for (int dy = -1; dy <= 1; ++dy)
        for (int dx = -1; dx <= 1; ++dx) {
          if (!(dz > 0 || dy > 0 || (dy == 0 && dx > 0))) continue;  // the upper half
          const int64_t j = int64_t{i} + int64_t{dz} * plane + int64_t{dy} * line + dx;
          if (j >= n) continue;
          const double v = 2 * rng.uniform() - 1;
          ti.push_back(i), tj.push_back(static_cast<int32_t>(j)), tv.push_back(v);
          ti.push_back(static_cast<int32_t>(j)), tj.push_back(i), tv.push_back(v);
        }
  }
  return csr_from_triplets(n, n, ti, tj, tv);
}

std::vector<std::string> matrix_names() {
  std::vector<std::string> names = {"empty-0x0", "one-1x1", "odd-97", "empty-rows-300", "dense-row-2000",
                                    "powerlaw-5000", "poisson3d-9", "rect-50x70", "zero-nnz-40",
                                    "stencil7-random-40", "stencil27-random-30", "band-random-1000", "wide-band-random-40000",
                                    "sym-odd-97", "sym-empty-rows-300", "sym-dense-rows-5000",
                                    "sym-box7-45x33x7", "sym-box27-37x19x11", "sym-box27-64x16x4", "sym-band27-3990"};
  if (spcg::test::have_matrix_dir())
    for (const auto& e : std::filesystem::directory_iterator(spcg::test::matrix_dir() + "/spd"))
      names.push_back("file:" + e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

CsrMatrix make_matrix(const std::string& name) {
  if (name == "empty-0x0") return CsrMatrix{};
  if (name == "one-1x1") {
    CsrMatrix a;
    a.rows = a.cols = 1, a.row_ptr = {0, 1}, a.col_idx = {0}, a.values = {3.5};
    return a;
  }
  if (name == "odd-97") return from_triplets_random(97, 97, 1, 0.08);
  if (name == "empty-rows-300") return from_triplets_random(300, 300, 2, 0.05, -1, 3);
  if (name == "dense-row-2000") return from_triplets_random(2000, 2000, 3, 0.002, 777);
  if (name == "powerlaw-5000") return powerlaw_spd(5000, 5);
  if (name == "sym-odd-97") return symmetric_random(97, 11, 0.06);
  if (name == "sym-empty-rows-300") return symmetric_random(300, 12, 0.03, {}, 3);
  // Row and column 3 and 4990 dense: row 3's strict upper part (4996 entries) is cut into pieces, and every row
  // below 4990 adds into y[4990] through its mirror entry.
  if (name == "sym-dense-rows-5000") return symmetric_random(5000, 13, 0.001, {3, 4990});
  if (name == "poisson3d-9") return poisson3d_7pt(9);
  // Box stencils for dia's plane march: lines past one tile (37, 45: a ragged last tile), planes not a multiple of
  // the tile's 8 lines (19, 33), runs of a few planes; 64 x 16: whole tiles, 4 planes.
  if (name == "sym-box7-45x33x7") return symmetric_box_stencil(45, 33, 7, 7, 21);
  if (name == "sym-box27-37x19x11") return symmetric_box_stencil(37, 19, 11, 27, 22);
  if (name == "sym-box27-64x16x4") return symmetric_box_stencil(64, 16, 4, 27, 23);
  // 27 full diagonals of lines of 40 and planes of 800 rows, 3990 rows: 5 planes, the last in part
  if (name == "sym-band27-3990") return symmetric_box_band(3990, 40, 800, 28);
  if (name == "rect-50x70") return from_triplets_random(50, 70, 4, 0.1);
  // Stencil patterns with random values, so a kernel that takes the X row of the wrong diagonal fails (the
  // Poisson values are alike on every off-diagonal). Large enough that spmm-dia-window keeps several
  // windows, wraps its rings and (27-point) has to narrow its clusters to fit shared memory.
  if (name == "stencil7-random-40" || name == "stencil27-random-30") {
    CsrMatrix a = name == "stencil7-random-40" ? poisson3d_7pt(40) : poisson3d_27pt(30);
    SplitMix64 rng(name.size());
    for (double& v : a.values) v = 2 * rng.uniform() - 1;
    return a;
  }
  // Runs of 2 and 3 consecutive diagonals and a long band cut into runs (spmm-dia-runs), random values.
  if (name == "band-random-1000") return banded_random(1000, {-41, -40, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 40, 41}, 1000);
  // Diagonals +-17000 apart (a span of 34002 rows): at k = 64 and 128 the X rows of the span (16 k bytes each)
  // exceed half of an H100's or H200's L2, so spmm-dia-runs cuts the block into column panels of 32.
  if (name == "wide-band-random-40000")
    return banded_random(40000, {-17001, -17000, -1, 0, 1, 17000, 17001}, 40000);
  if (name == "zero-nnz-40") {
    CsrMatrix a;
    a.rows = a.cols = 40;
    a.row_ptr.assign(41, 0);
    return a;
  }
  return read_matrix_market(spcg::test::matrix_dir() + "/spd/" + name.substr(5)).matrix;
}

std::vector<int> widths(const std::string& kernel, const std::string& matrix) {
  const bool real_file = matrix.rfind("file:", 0) == 0;
  const KernelEntry* e = find_kernel(kernel);
  if (e && e->family == KernelFamily::spmm) {
    if (real_file) return {1, 8, 33};
    // 100 on the wide band: spmm-dia-runs cuts it into panels of 32, 32, 32 and 4 columns.
    if (matrix == "wide-band-random-40000") return {1, 2, 3, 4, 8, 16, 32, 33, 64, 100, 128};
    return {1, 2, 3, 4, 8, 16, 32, 33, 64, 128};
  }
  return real_file ? std::vector<int>{1, 3} : std::vector<int>{1, 2, 5};
}

// The relative rounding a kernel's stored values add to each product (KernelEntry::fp32_values: 2^-24, the
// FP32 rounding of a_ij; FP64 values add none beyond the sums' own).
double value_rounding(const std::string& kernel) {
  const KernelEntry* e = find_kernel(kernel);
  return e && e->fp32_values ? std::ldexp(1.0, -24) : 0.0;
}

// The GPU fixture (skips without a device; asynchronous errors fail the test that caused them), parameterised.
class KernelVsEigen : public spcg::test::GpuTest,
                      public ::testing::WithParamInterface<std::tuple<std::string, std::string>> {};

TEST_P(KernelVsEigen, MatchesReference) {
  const auto& [kernel, mname] = GetParam();
  const CsrMatrix a = make_matrix(mname);
  std::unique_ptr<LinearOperator> op;
  try {
    op = make_operator(kernel, a);
  } catch (const FormatRefused& e) {
    GTEST_SKIP() << "format refuses this matrix: " << e.what();
  }
  ASSERT_EQ(op->rows(), a.rows);
  SplitMix64 rng(std::hash<std::string>{}(kernel + mname));
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int k : widths(kernel, mname)) {
    for (int trial = 0; trial < 2; ++trial) {
      const double alpha = 0.5 + rng.uniform(), beta = trial == 0 ? 0.0 : rng.uniform() - 0.5;
      DenseBlock x(a.cols, k), y0(a.rows, k);
      for (double& v : x.data) v = 2 * rng.uniform() - 1;
      for (double& v : y0.data) v = beta == 0.0 ? nan : 2 * rng.uniform() - 1;  // beta = 0 must not read Y
      DeviceBlock X(a.cols, k), Y(a.rows, k);
      X.values.upload(x.data);
      Y.values.upload(y0.data);
      op->apply(alpha, X, beta, Y);
      const std::vector<double> got = Y.values.download();
      DenseBlock want = y0;
      reference_spmm(a, alpha, x, beta, want);
      for (int32_t i = 0; i < a.rows; ++i) {
        double row_abs = 0;
        for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) row_abs += std::abs(a.values[p]);
        for (int j = 0; j < k; ++j) {
          // Error bound of a sum of row-length products, scaled by magnitudes (x in [-1, 1]).
          const double len = std::max(1, a.row_length(i));
          const double scale = std::abs(alpha) * row_abs + (beta == 0 ? 0 : std::abs(beta * y0.at(i, j)));
          const double tol = (4.0 * (len + 2) * std::numeric_limits<double>::epsilon() + value_rounding(kernel)) * scale + 1e-300;
          const double g = got[static_cast<size_t>(i) * k + j];
          ASSERT_TRUE(std::isfinite(g)) << kernel << " " << mname << " k=" << k << " row " << i << " col " << j
                                        << " not written or NaN read (beta=" << beta << ")";
          ASSERT_LE(std::abs(g - want.at(i, j)), tol) << kernel << " " << mname << " k=" << k << " row " << i << " col " << j;
        }
      }
    }
  }
}

std::vector<std::string> all_kernels() {
  std::vector<std::string> names = kernel_names();
  names.push_back("auto");
  return names;
}

std::string param_name(const ::testing::TestParamInfo<KernelVsEigen::ParamType>& info) {
  std::string s = std::get<0>(info.param) + "__" + std::get<1>(info.param);
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Registry, KernelVsEigen,
                         ::testing::Combine(::testing::ValuesIn(all_kernels()), ::testing::ValuesIn(matrix_names())),
                         param_name);

// Setup on the device (statistics, DIA, SELL-32, ELL, HYB from the device CSR) equals the host's, bit for bit, on
// every test matrix: the edge cases (0x0, 1x1, empty rows, a dense row, rectangular, no entries), power-law,
// banded and the real files.
class DeviceSetupVsHost : public spcg::test::GpuTest, public ::testing::WithParamInterface<std::string> {};

void expect_same_stats(const MatrixStats& d, const MatrixStats& h, const std::string& what) {
  EXPECT_EQ(d.rows, h.rows) << what;
  EXPECT_EQ(d.cols, h.cols) << what;
  EXPECT_EQ(d.nnz, h.nnz) << what;
  EXPECT_EQ(d.row_min, h.row_min) << what;
  EXPECT_EQ(d.row_max, h.row_max) << what;
  EXPECT_EQ(d.row_mean, h.row_mean) << what;
  EXPECT_EQ(d.row_stddev, h.row_stddev) << what;
  ASSERT_EQ(d.histogram.size(), h.histogram.size()) << what;
  for (size_t b = 0; b < d.histogram.size(); ++b) {
    EXPECT_EQ(d.histogram[b].lo, h.histogram[b].lo) << what << " bucket " << b;
    EXPECT_EQ(d.histogram[b].rows, h.histogram[b].rows) << what << " bucket " << b;
  }
  EXPECT_EQ(d.empty_rows, h.empty_rows) << what;
  EXPECT_EQ(d.bandwidth, h.bandwidth) << what;
  EXPECT_EQ(d.distinct_diagonals, h.distinct_diagonals) << what;
  EXPECT_EQ(d.pattern_symmetric, h.pattern_symmetric) << what;
  EXPECT_EQ(d.numerically_symmetric, h.numerically_symmetric) << what;
  EXPECT_EQ(d.max_asymmetry, h.max_asymmetry) << what;
  EXPECT_EQ(d.missing_diagonal, h.missing_diagonal) << what;
  EXPECT_EQ(d.nonpositive_diagonal, h.nonpositive_diagonal) << what;
  EXPECT_EQ(d.first_nonpositive_row, h.first_nonpositive_row) << what;
  EXPECT_EQ(d.first_nonpositive_value, h.first_nonpositive_value) << what;
  EXPECT_EQ(d.diagonal_positive, h.diagonal_positive) << what;
  EXPECT_EQ(d.diagonally_dominant_rows, h.diagonally_dominant_rows) << what;
  EXPECT_EQ(d.strictly_dominant_rows, h.strictly_dominant_rows) << what;
  EXPECT_EQ(d.explicit_zeros, h.explicit_zeros) << what;
  EXPECT_EQ(d.non_finite_values, h.non_finite_values) << what;
  EXPECT_EQ(d.ell_fill, h.ell_fill) << what;
  EXPECT_EQ(d.dia_fill, h.dia_fill) << what;
  EXPECT_EQ(d.max_abs_value, h.max_abs_value) << what;
}

TEST_P(DeviceSetupVsHost, StatisticsAndLayoutsEqualTheHostOnes) {
  const CsrMatrix a = make_matrix(GetParam());
  const MatrixSetup setup(a, 3);
  expect_same_stats(setup.stats(), compute_stats(a, 3), GetParam());
  // The statistics of a matrix with a planted negative diagonal, a missing one and an asymmetric pair too.
  if (a.rows >= 3 && a.rows == a.cols && a.nnz() > 0) {
    CsrMatrix b = a;
    for (int32_t p = b.row_ptr[1]; p < b.row_ptr[2]; ++p) b.values[p] = -std::abs(b.values[p]) - 1;
    b.values[b.row_ptr[b.rows] - 1] *= 1.5;
    const MatrixSetup planted(b);
    expect_same_stats(planted.stats(), compute_stats(b), GetParam() + " (planted)");
  }
  // DIA: csr_to_dia (and its upper half when the diagonals mirror), or both refuse.
  constexpr double kFill = 64;
  DiaMatrix host_dia;
  bool host_refused = false;
  try {
    host_dia = csr_to_dia(a, kFill);
  } catch (const FormatRefused&) {
    host_refused = true;
  }
  for (const bool allow_symmetric : {false, true})
    for (const int stride_multiple : {1, 2}) {
      std::shared_ptr<const DeviceDia> dev;
      try {
        dev = setup.dia("test", kFill, 1 << 30, allow_symmetric, stride_multiple);
      } catch (const FormatRefused&) {
        EXPECT_TRUE(host_refused) << GetParam() << ": device DIA refused, host did not";
        continue;
      }
      ASSERT_FALSE(host_refused) << GetParam() << ": host DIA refused, device did not";
      const bool symmetric = allow_symmetric && dia_is_symmetric(host_dia);
      const DiaMatrix want = symmetric ? dia_upper_half(host_dia) : host_dia;
      EXPECT_EQ(dev->symmetric, symmetric) << GetParam();
      ASSERT_EQ(dev->diagonals, static_cast<int>(want.offsets.size())) << GetParam();
      EXPECT_EQ(dev->offsets.download(), want.offsets) << GetParam();
      EXPECT_EQ(dev->stride, (int64_t{a.rows} + stride_multiple - 1) / stride_multiple * stride_multiple);
      const std::vector<double> got = dev->values.download();
      for (int d = 0; d < dev->diagonals; ++d)
        for (int64_t i = 0; i < dev->stride; ++i) {
          const double expected = i < a.rows ? want.values[static_cast<size_t>(d) * a.rows + i] : 0.0;
          ASSERT_EQ(got[static_cast<size_t>(d * dev->stride + i)], expected) << GetParam() << " diagonal " << d << " row " << i;
        }
    }
  // SELL-32-1 and ELL: csr_to_sell / csr_to_ell, or both refuse.
  SellMatrix host_sell;
  host_refused = false;
  try {
    host_sell = csr_to_sell(a, 32, 1, kFill);
  } catch (const FormatRefused&) {
    host_refused = true;
  }
  try {
    const DeviceSell sell = device_sell32(*setup.device_csr(), kFill);
    ASSERT_FALSE(host_refused) << GetParam();
    EXPECT_EQ(sell.stored, host_sell.stored());
    EXPECT_EQ(sell.slice_ptr.download(), host_sell.slice_ptr);
    if (!host_sell.slice_width.empty()) EXPECT_EQ(sell.slice_width.download(), host_sell.slice_width);
    EXPECT_EQ(sell.col_idx.download(), host_sell.col_idx);
    EXPECT_EQ(sell.values.download(), host_sell.values);
  } catch (const FormatRefused&) {
    EXPECT_TRUE(host_refused) << GetParam();
  }
  const MatrixStats& st = setup.stats();
  {  // HYB: csr_to_hyb's ELL head and COO tail
    const HybMatrix host_hyb = csr_to_hyb(a);
    const DeviceHyb hyb = device_hyb(*setup.device_csr(), st.row_max);
    EXPECT_EQ(hyb.ell.width, host_hyb.ell.width) << GetParam();
    EXPECT_EQ(hyb.ell.col_idx.download(), host_hyb.ell.col_idx) << GetParam();
    EXPECT_EQ(hyb.ell.values.download(), host_hyb.ell.values) << GetParam();
    EXPECT_EQ(hyb.coo.nnz, static_cast<int64_t>(host_hyb.coo.values.size())) << GetParam();
    EXPECT_EQ(hyb.coo.row_idx.download(), host_hyb.coo.row_idx) << GetParam();
    EXPECT_EQ(hyb.coo.col_idx.download(), host_hyb.coo.col_idx) << GetParam();
    EXPECT_EQ(hyb.coo.values.download(), host_hyb.coo.values) << GetParam();
  }
  if (a.rows > 0 && double(a.rows) * st.row_max <= kFill * double(std::max<int64_t>(a.nnz(), 1))) {
    const EllMatrix host_ell = csr_to_ell(a, 1e30);
    const DeviceEll ell = device_ell(*setup.device_csr(), st.row_max);
    EXPECT_EQ(ell.width, host_ell.width);
    EXPECT_EQ(ell.col_idx.download(), host_ell.col_idx);
    EXPECT_EQ(ell.values.download(), host_ell.values);
  }
}

// 64-bit row offsets (a rank's share past 2^31 entries), forced on the test matrices: the setup's own kernels
// (statistics, the DIA layout, the inverse diagonal) give what the 32-bit offsets give, a DIA operator built on
// them multiplies as the host does, and every kernel that reads CSR refuses them with FormatRefused.
TEST_P(DeviceSetupVsHost, WideRowOffsetsGiveTheSameSetup) {
  const CsrMatrix a = make_matrix(GetParam());
  const MatrixSetup narrow(a, 3);
  auto d = std::make_shared<DeviceCsr>();
  d->rows = a.rows, d->cols = a.cols, d->nnz = a.nnz();
  upload_row_offsets(*d, a.row_ptr, "test wide offsets", /*force_wide=*/true);
  d->col_idx = DeviceArray<int32_t>(a.col_idx, "test columns");
  d->values = DeviceArray<double>(a.values, "test values");
  ASSERT_TRUE(d->wide());
  EXPECT_EQ(d->row_ptr.size(), 0u);
  const MatrixSetup wide(std::shared_ptr<const DeviceCsr>(d), 3);
  const std::string what = GetParam() + " (64-bit offsets)";
  expect_same_stats(wide.stats(), narrow.stats(), what);
  EXPECT_EQ(wide.host().row_ptr, a.row_ptr) << what;  // downloaded as they are
  for (const bool allow_symmetric : {false, true}) {
    std::shared_ptr<const DeviceDia> want, got;
    bool want_refused = false, got_refused = false;
    try {
      want = narrow.dia("test", 64, 1 << 30, allow_symmetric);
    } catch (const FormatRefused&) {
      want_refused = true;
    }
    try {
      got = wide.dia("test", 64, 1 << 30, allow_symmetric);
    } catch (const FormatRefused&) {
      got_refused = true;
    }
    ASSERT_EQ(got_refused, want_refused) << what;
    if (want_refused) continue;
    EXPECT_EQ(got->offsets.download(), want->offsets.download()) << what;
    EXPECT_EQ(got->values.download(), want->values.download()) << what;
    EXPECT_EQ(got->symmetric, want->symmetric) << what;
  }
  if (a.rows == a.cols && a.rows > 0) {
    DeviceArray<double> dn(static_cast<size_t>(a.rows), "test inverse diagonal"), dw(static_cast<size_t>(a.rows), "test inverse diagonal");
    const DiagonalSummary sn = inverse_diagonal(*narrow.device_csr(), dn.data(), 0), sw = inverse_diagonal(*d, dw.data(), 0);
    EXPECT_EQ(dw.download(), dn.download()) << what;
    EXPECT_EQ(sw.first_nonpositive, sn.first_nonpositive) << what;
    EXPECT_EQ(sw.min, sn.min) << what;
    EXPECT_EQ(sw.max, sn.max) << what;
  }
  // a DIA operator on them: y = A x as the host computes it
  try {
    const auto op = make_operator("dia", wide);
    const DenseBlock x = random_block(a.cols, 1, 5);
    DenseBlock want(a.rows, 1);
    reference_spmm(a, 1.0, x, 0.0, want);
    DeviceArray<double> dx(x.data, "test x"), dy(static_cast<size_t>(a.rows), "test y");
    op->apply(1.0, dx.data(), 0.0, dy.data(), 1);
    const std::vector<double> got = dy.download();
    for (int32_t i = 0; i < a.rows; ++i)
      ASSERT_NEAR(got[static_cast<size_t>(i)], want.at(i, 0), 1e-12 * (1 + std::abs(want.at(i, 0)))) << what << " row " << i;
  } catch (const FormatRefused&) {  // (DIA refuses some matrices whatever their offsets)
  }
  EXPECT_THROW(make_operator("csr-vector", wide), FormatRefused) << what;
  EXPECT_THROW(device_sell32(*d, 64), FormatRefused) << what;
  EXPECT_THROW(device_ell(*d, 1), FormatRefused) << what;
  EXPECT_THROW(device_hyb(*d, 1), FormatRefused) << what;
}

std::string matrix_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Setup, DeviceSetupVsHost, ::testing::ValuesIn(matrix_names()), matrix_param_name);

// One device CSR for every operator built from one MatrixSetup (the upload is the setup's largest cost).
TEST(DeviceSetup, OperatorsShareOneUploadAndOneDia) {
  SPCG_REQUIRE_GPU();
  const CsrMatrix a = poisson3d_7pt(20);
  const MatrixSetup setup(a);
  auto csr_vector = make_operator("csr-vector", setup), spmm_cwm = make_operator("spmm-cwm", setup);
  auto dia = make_operator("dia", setup), again = make_operator("dia", setup);
  EXPECT_EQ(setup.device_csr().use_count(), 3);  // the setup's own and the two CSR operators'
  const SetupTimes before = setup.times();
  auto spmm_dia = make_operator("spmm-dia", setup), spmm_dia_runs = make_operator("spmm-dia-runs", setup);
  // 8000 rows (even): spmm-dia-runs' stride of 2 is the row count, the same layout as spmm-dia's
  EXPECT_EQ(setup.times().upload_ms, before.upload_ms);
  EXPECT_EQ(setup.device_csr().use_count(), 3);
  auto baseline = make_operator("cusparse-alg1", setup);  // opens cuSPARSE if no earlier test did
  EXPECT_TRUE(cusparse_is_loaded());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace

TEST(Registry, NamesAreUniqueAndUnknownNamesListThem) {
  auto names = kernel_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  EXPECT_GE(kernel_names(KernelFamily::spmv).size(), 10u);
  EXPECT_GE(kernel_names(KernelFamily::spmm).size(), 5u);
  try {
    make_operator("no-such-kernel", CsrMatrix{});
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("csr-merge"), std::string::npos);
  }
}

// csr-sym's atomic adds make it order-dependent, and it says so (the solver refuses it under --deterministic).
TEST(Registry, AtomicKernelsSayTheyAreNotDeterministic) {
  SPCG_REQUIRE_GPU();
  const CsrMatrix a = powerlaw_spd(2000, 9);
  EXPECT_FALSE(make_operator("csr-sym", a)->deterministic());
  EXPECT_TRUE(make_operator("csr-adaptive", a)->deterministic());
}

// y = A x and its fused x'y against the host (long double): y entrywise within the row-scaled rounding bound (a
// row left at its NaN poison fails), the dot within sqrt(n) eps of its terms' magnitudes.
void expect_product_and_dot(const CsrMatrix& a, const std::vector<double>& hx, const std::vector<double>& hy,
                            double got_dot, const std::string& kernel, const std::string& what) {
  long double dot = 0, dot_abs = 0;
  for (int32_t i = 0; i < a.rows; ++i) {
    long double want = 0, row_abs = 0;
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      want += static_cast<long double>(a.values[p]) * hx[a.col_idx[p]];
      row_abs += std::abs(static_cast<long double>(a.values[p]) * hx[a.col_idx[p]]);
    }
    const double tol = (4.0 * (a.row_length(i) + 2) * std::numeric_limits<double>::epsilon() + value_rounding(kernel)) *
                           static_cast<double>(row_abs) + 1e-300;
    ASSERT_TRUE(std::isfinite(hy[i])) << what << ": y[" << i << "] not written";
    ASSERT_LE(std::abs(hy[i] - static_cast<double>(want)), tol) << what << " row " << i;
    dot += static_cast<long double>(hx[i]) * hy[i];
    dot_abs += std::abs(static_cast<long double>(hx[i]) * hy[i]);
  }
  ASSERT_TRUE(std::isfinite(got_dot)) << what << ": the dot was not written";
  EXPECT_LE(std::abs(got_dot - static_cast<double>(dot)),
            4.0 * std::sqrt(double(a.rows)) * std::numeric_limits<double>::epsilon() * static_cast<double>(dot_abs) + 1e-300)
      << what << ": fused dot " << got_dot << " vs host " << static_cast<double>(dot);
}

// y = A x with x . y fused into the kernel's epilogue (the CG's q = A p and p'q): on random x (a constant x
// would make the interior of y zero on a Laplacian), y against the host SpMV entrywise with the row-scaled
// rounding bound, and the dot against the host dot of x and the returned y; y and the result NaN-poisoned
// first, the sink sized as the solver sizes it. The kernels with an epilogue (dia, ell, sell, csr-vector)
// must take it; any other may decline (false), and auto forwards its SpMV's.
TEST(Registry, FusedDotMatchesSeparateDot) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CsrMatrix stencil = poisson3d_7pt(20);
  {
    SplitMix64 rng(404);
    for (double& v : stencil.values) v = 2 * rng.uniform() - 1;
  }
  std::vector<std::string> names = kernel_names();
  names.push_back("auto");
  // (sym-box27: dia's plane march with its fused dot)
  for (const auto& [mname, a] : std::vector<std::pair<std::string, CsrMatrix>>{
           {"stencil7-random-20", stencil}, {"powerlaw-3000", powerlaw_spd(3000, 5)},
           {"sym-box27-37x19x11", symmetric_box_stencil(37, 19, 11, 27, 24)},
           {"sym-box27-33x9x3", symmetric_box_stencil(33, 9, 3, 27, 25)}}) {
    SplitMix64 rng(405);
    std::vector<double> hx(static_cast<size_t>(a.cols));
    for (double& v : hx) v = 2 * rng.uniform() - 1;
    std::vector<std::string> fused, built;
    for (const std::string& name : names) {
      const std::string what = name + " on " + mname;
      std::unique_ptr<LinearOperator> op;
      try {
        op = make_operator(name, a);
      } catch (const FormatRefused&) {
        continue;  // (ell, sell and dia refuse the power-law matrix)
      }
      built.push_back(name);
      DeviceArray<double> x(hx), y(std::vector<double>(static_cast<size_t>(a.rows), nan)), res(std::vector<double>{nan});
      const ReductionWorkspace ws(reduction_blocks(a.rows), 2);
      if (!apply_with_dot(*op, x.data(), y.data(), ws.sink(res.data()), 0)) continue;  // no epilogue: the solver falls back
      fused.push_back(name);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      expect_product_and_dot(a, hx, y.download(), res.download()[0], name, what);
      EXPECT_EQ(ws.counter.download()[0], 0u) << what << ": the sink's counter must be left at zero";
    }
    for (const char* must : {"csr-vector", "ell", "sell", "dia"}) {
      const bool made = std::find(built.begin(), built.end(), must) != built.end();
      if (mname != "powerlaw-3000" || std::string(must) == "csr-vector") EXPECT_TRUE(made) << must << " refused " << mname;
      if (made) EXPECT_NE(std::find(fused.begin(), fused.end(), must), fused.end()) << must << " declined its epilogue on " << mname;
    }
  }
}

// dia reads a symmetric 27-point box stencil as planes of lines and marches them (spmv_dia_box.cu), in FP64 and
// FP32 values, wherever its lines are at least 16 rows and it has two planes; other matrices (the 7-point stencil
// among them) keep the row sweep.
// (KernelVsEigen checks the march's products on the sym-box matrices, FusedDotMatchesSeparateDot its dot, and
// test_precond's FusedSmoothingIsTheUnfusedBitForBit its smoothing epilogue.)
TEST(DiaPlaneMarch, TakenByBoxStencilsOnly) {
  SPCG_REQUIRE_GPU();
  const std::vector<std::pair<std::string, bool>> cases = {
      {"sym-box27-37x19x11", true}, {"sym-box27-64x16x4", true}, {"sym-band27-3990", true},
      {"sym-box7-45x33x7", false},   // 7-point
      {"poisson3d-9", false},        // lines of 9 rows
      {"stencil27-random-30", false},  // not symmetric: all 27 stripes stored
      {"band-random-1000", false}};
  for (const auto& [mname, marches] : cases) {
    const CsrMatrix a = make_matrix(mname);
    for (const char* kernel : {"dia", "dia-f32"}) {
      std::unique_ptr<LinearOperator> op;
      try {
        op = make_operator(kernel, a);
      } catch (const FormatRefused& e) {
        ADD_FAILURE() << kernel << " refused " << mname << ": " << e.what();
        continue;
      }
      EXPECT_EQ(op->setup_info().reason.find("plane march") != std::string::npos, marches)
          << kernel << " on " << mname << ": '" << op->setup_info().reason << "'";
    }
  }
}

// Fewer partial sums than the march has (tile, run) items (a fused dot's sink of 1 or 3 blocks): each block marches
// several items, resetting what it keeps on chip between them; y and x'y against the host, NaN-poisoned first.
TEST(DiaPlaneMarch, BlocksMarchSeveralItems) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const CsrMatrix a = symmetric_box_stencil(70, 20, 9, 27, 26);  // 3 x 3 tiles a plane, 9 planes
  SplitMix64 rng(27);
  std::vector<double> hx(static_cast<size_t>(a.cols));
  for (double& v : hx) v = 2 * rng.uniform() - 1;
  for (const char* kernel : {"dia", "dia-f32"}) {
    const std::unique_ptr<LinearOperator> op = make_operator(kernel, a);
    ASSERT_NE(op->setup_info().reason.find("plane march"), std::string::npos) << kernel;
    for (const int capacity : {1, 3}) {
      const std::string what = std::string(kernel) + ", a sink of " + std::to_string(capacity);
      DeviceArray<double> x(hx), y(std::vector<double>(static_cast<size_t>(a.rows), nan)), res(std::vector<double>{nan});
      const ReductionWorkspace ws(capacity, 2);
      ASSERT_TRUE(apply_with_dot(*op, x.data(), y.data(), ws.sink(res.data()), 0)) << what;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      expect_product_and_dot(a, hx, y.download(), res.download()[0], kernel, what);
    }
  }
}

// Rows of 0..longest entries at random columns, lengths spread evenly (7919 is prime to every longest + 1 here), so
// that a row block has more entries than csr-stream's tile (several passes, rows cut by a pass's end), with a run
// of `empty_run` rows without entries.
CsrMatrix short_rows(int32_t rows, int32_t longest, int32_t empty_run, uint64_t seed) {
  CsrMatrix a;
  a.rows = a.cols = rows;
  a.row_ptr.assign(1, 0);
  SplitMix64 rng(seed);
  for (int32_t i = 0; i < rows; ++i) {
    const int32_t length = i >= 1000 && i < 1000 + empty_run ? 0 : static_cast<int32_t>((int64_t{i} * 7919) % (longest + 1));
    for (int32_t j = 0; j < length; ++j) {
      a.col_idx.push_back(static_cast<int32_t>(rng.next() % static_cast<uint64_t>(rows)));
      a.values.push_back(2 * rng.uniform() - 1);
    }
    std::sort(a.col_idx.end() - length, a.col_idx.end());
    a.row_ptr.push_back(static_cast<int32_t>(a.col_idx.size()));
  }
  return a;
}

// csr-stream (and its FP32 variant) in each of its shapes, which the mean row picks: 4 or 2 rows a thread (means
// 1.5, 3), one (16 is 2 lanes; 5: one), 16 and 32 lanes a row (means 100, 300); blocks that stream several row
// blocks (a fused dot's sink of 1 or 3 blocks), row blocks of more entries than a tile (passes that cut rows), a
// run of rows without entries; y and x'y against the host from NaN-poisoned outputs. A row past the entry's
// max_row (1024) is refused, naming its length.
TEST(CsrStream, EveryShapeStreamsSeveralRowBlocksInTiles) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<std::pair<int32_t, std::string>> shapes = {
      {3, "4 row(s) a thread"}, {6, "2 row(s) a thread"}, {10, "1 row(s) a thread"}, {32, "2 lanes a row"},
      {200, "16 lanes a row"}, {600, "32 lanes a row"}};
  for (const auto& [longest, shape] : shapes) {
    const CsrMatrix a = short_rows(longest > 100 ? 3000 : 9000, longest, 600, 31 + longest);
    SplitMix64 rng(32);
    std::vector<double> hx(static_cast<size_t>(a.cols));
    for (double& v : hx) v = 2 * rng.uniform() - 1;
    for (const char* kernel : {"csr-stream", "csr-stream-f32"}) {
      const std::unique_ptr<LinearOperator> op = make_operator(kernel, a);
      EXPECT_NE(op->setup_info().reason.find(shape), std::string::npos)
          << kernel << ", rows up to " << longest << ": " << op->setup_info().reason;
      for (const int capacity : {1, 3, 64}) {
        const std::string what = std::string(kernel) + ", rows up to " + std::to_string(longest) + ", a sink of " +
                                 std::to_string(capacity);
        DeviceArray<double> x(hx), y(std::vector<double>(static_cast<size_t>(a.rows), nan)), res(std::vector<double>{nan});
        const ReductionWorkspace ws(capacity, 2);
        ASSERT_TRUE(apply_with_dot(*op, x.data(), y.data(), ws.sink(res.data()), 0)) << what;
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
        expect_product_and_dot(a, hx, y.download(), res.download()[0], kernel, what);
      }
    }
  }
  for (const char* kernel : {"csr-stream", "csr-stream-f32"}) {
    try {
      make_operator(kernel, short_rows(2000, 1025, 0, 33));
      ADD_FAILURE() << kernel << " took a row of 1025 entries";
    } catch (const FormatRefused& e) {
      EXPECT_NE(std::string(e.what()).find("the longest has 1025"), std::string::npos) << e.what();
    }
  }
}

// Auto's short list on rows of moderate skew: where layouts are the device's and nothing is timed (AMG's transfer
// operators), csr-stream when the longest row is within its entry's max_row, csr-vector past it, and the reason
// does not list csr-stream as refused (it never was short-listed).
TEST(CsrStream, AutoTakesItWithinItsLongestRow) {
  SPCG_REQUIRE_GPU();
  OperatorOptions o;
  o.autotune = false, o.device_layouts_only = true;
  for (const int32_t longest : {1000, 1100}) {
    const CsrMatrix a = short_rows(6000, longest, 0, 34);  // ~3M entries: past auto's latency-bound 32 MiB
    const MatrixSetup setup(a);
    const std::unique_ptr<LinearOperator> op = make_operator("auto", setup, o);
    const std::string why = op->setup_info().reason;
    EXPECT_NE(why.find("moderate skew"), std::string::npos) << why;
    EXPECT_EQ(op->chosen(1), longest <= 1024 ? "csr-stream" : "csr-vector") << why;
    EXPECT_EQ(why.find("refused"), std::string::npos) << why;
  }
}

// The box reading itself (host only): offsets of a 27-point stencil on 40 x 20 x 5, of a 7-point one, near misses.
TEST(DiaPlaneMarch, ReadsBoxStencilOffsets) {
  auto box27 = [](int32_t line, int32_t plane) {
    std::vector<int32_t> o = {0, 1, line - 1, line, line + 1};
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) o.push_back(plane + dy * line + dx);
    return o;
  };
  const auto box = find_dia_box(box27(40, 800), 4000);
  ASSERT_TRUE(box.has_value());
  EXPECT_EQ(box->line, 40);
  EXPECT_EQ(box->lines, 20);
  EXPECT_EQ(box->plane, 800);
  EXPECT_EQ(box->planes, 5);
  EXPECT_EQ(find_dia_box(box27(40, 800), 3999)->planes, 5) << "a last plane in part";
  EXPECT_FALSE(find_dia_box(box27(40, 800), 1599)) << "fewer than two planes";
  EXPECT_FALSE(find_dia_box(box27(40, 810), 4000)) << "a plane that is not whole lines";
  EXPECT_FALSE(find_dia_box(box27(12, 144), 4000)) << "lines of 12 rows";
  EXPECT_FALSE(find_dia_box({0, 1, 40, 800}, 4000)) << "7-point: the row sweep";
  std::vector<int32_t> off = box27(40, 800);
  off.back() += 1;
  EXPECT_FALSE(find_dia_box(off, 4000)) << "offset 842";
  off = box27(40, 800);
  off.erase(off.begin() + 7);
  EXPECT_FALSE(find_dia_box(off, 4000)) << "a neighbour missing";
  EXPECT_FALSE(find_dia_box({}, 4000));
}

// The benchmark's gather-floor probe must make every gather it claims: its partial sums add up to
// sum_k val[k] * x[col[k]] (host, long double), with the partials NaN-poisoned first.
// The per-kernel report's GB/s: calls of one name with different bytes (block CG's widths shrink as columns
// converge) must add their own bytes, not repeat the last call's. Timing off: no events, no GPU needed.
TEST(KernelTimer, BytesAddUpOverCallsOfDifferentWidths) {
  KernelTimer timer(false, nullptr);
  int launched = 0;
  timer.run("gram", 300.0, [&] { ++launched; });
  timer.run("gram", 100.0, [&] { ++launched; });
  timer.run("spmm", 50.0, [&] { ++launched; });
  timer.count("gram", 20.0, 5);
  KernelStat nested{"fallback"};
  nested.calls = 2, nested.total_bytes = 70.0, nested.total_ms = 1.0;
  timer.add("gram", nested);
  EXPECT_EQ(launched, 3);
  const std::vector<KernelStat> st = timer.stats();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].name, "gram");
  EXPECT_EQ(st[0].calls, 9);
  EXPECT_DOUBLE_EQ(st[0].total_bytes, 300.0 + 100.0 + 100.0 + 70.0);
  EXPECT_DOUBLE_EQ(st[0].bytes_per_call, 570.0 / 9);
  EXPECT_DOUBLE_EQ(st[0].total_ms, 1.0);
  EXPECT_EQ(st[1].calls, 1);
  EXPECT_DOUBLE_EQ(st[1].total_bytes, 50.0);
}

TEST(BenchProbes, GatherFloorSumsEveryNonzero) {
  SPCG_REQUIRE_GPU();
  for (const auto& a : {powerlaw_spd(5000, 3), poisson3d_7pt(9), CsrMatrix{}}) {
    SplitMix64 rng(17);
    std::vector<double> hx(static_cast<size_t>(a.cols));
    for (double& v : hx) v = 2 * rng.uniform() - 1;
    DeviceArray<double> x(hx), val(a.values);
    DeviceArray<int32_t> col(a.col_idx);
    const int64_t count = a.nnz() > 0 ? gather_floor_partials(a.nnz()) : 0;
    DeviceArray<double> partials(std::vector<double>(static_cast<size_t>(count), std::numeric_limits<double>::quiet_NaN()));
    launch_gather_floor(a.nnz(), val.data(), col.data(), x.data(), partials.data(), 0);
    long double want = 0, scale = 0;
    for (int64_t k = 0; k < a.nnz(); ++k) {
      want += static_cast<long double>(a.values[k]) * hx[a.col_idx[k]];
      scale += std::abs(static_cast<long double>(a.values[k]) * hx[a.col_idx[k]]);
    }
    long double got = 0;
    for (double v : partials.download()) got += v;
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(want),
                static_cast<double>(scale) * 4 * std::numeric_limits<double>::epsilon() * std::sqrt(double(a.nnz()) + 1))
        << a.rows << " rows";
  }
}

// The column-major cuSPARSE baseline probe computes A X for column-major X and Y (output NaN-poisoned), or says
// why cuSPARSE does not take that algorithm; ALG1 must take it.
TEST(BenchProbes, ColumnMajorCusparseMatchesReference) {
  SPCG_REQUIRE_GPU();
  const CsrMatrix a = powerlaw_spd(3000, 6);
  const int k = 5;
  SplitMix64 rng(21);
  DenseBlock x(a.cols, k);
  for (double& v : x.data) v = 2 * rng.uniform() - 1;
  std::vector<double> xc(x.data.size());
  for (int32_t i = 0; i < a.cols; ++i)
    for (int j = 0; j < k; ++j) xc[static_cast<size_t>(j) * a.cols + i] = x.at(i, j);
  DenseBlock want(a.rows, k, 0.0);
  reference_spmm(a, 1.0, x, 0.0, want);
  for (int alg = 1; alg <= 3; ++alg) {
    CusparseColumnMajorSpmm probe(a, alg);
    DeviceArray<double> dx(xc), dy(std::vector<double>(static_cast<size_t>(a.rows) * k, std::numeric_limits<double>::quiet_NaN()));
    std::string why;
    if (!probe.prepare(k, dx.data(), dy.data(), why)) {
      EXPECT_NE(alg, 1) << why;
      EXPECT_FALSE(why.empty());
      continue;
    }
    probe.apply(0);
    const std::vector<double> y = dy.download();
    for (int32_t i = 0; i < a.rows; ++i) {
      double row_abs = 0;
      for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) row_abs += std::abs(a.values[p]);
      const double tol = 4.0 * (a.row_length(i) + 2) * std::numeric_limits<double>::epsilon() * row_abs + 1e-300;
      for (int j = 0; j < k; ++j)
        ASSERT_NEAR(y[static_cast<size_t>(j) * a.rows + i], want.at(i, j), tol) << probe.name() << " row " << i << " col " << j;
    }
  }
}

// Block CG's dense kernels (kernels/solver_ops/block_ops.cu) against plain host loops in long double, outputs
// NaN-poisoned first; shapes cover 1 column, odd widths, every row-group width (1..8 threads per row) and the
// 32/64-column limits, with and without the optional operands.
struct BlockOpsData {
  SplitMix64 rng;
  explicit BlockOpsData(uint64_t seed) : rng(seed) {}
  std::vector<double> random(size_t count) {
    std::vector<double> v(count);
    for (double& x : v) x = 2 * rng.uniform() - 1;
    return v;
  }
};

TEST(BlockOps, GramMatchesHostLoops) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // b3 > 0: a third block on the right. shared: V1 and V2 are the same device blocks as U1 and U2 (aliased
  // inputs, as in [W, D^-1 V]' [W, V, R]).
  struct Shape { int a1, a2, b1, b2; bool scaled; int b3; bool shared = false; };
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{997}, int64_t{40000}})
    for (const Shape sh : std::vector<Shape>{{1, 0, 1, 0, false, 0}, {5, 3, 7, 3, true, 0}, {16, 16, 16, 16, true, 0},
                                             {32, 32, 32, 32, false, 0}, {64, 0, 2, 62, false, 0},
                                             {7, 0, 64, 0, false, 0}, {16, 16, 16, 16, true, 16},
                                             {5, 3, 7, 3, true, 4}, {32, 32, 16, 16, false, 32}, {1, 0, 1, 1, false, 1},
                                             {16, 16, 16, 16, false, 16, true}, {16, 16, 16, 16, true, 16, true},
                                             {5, 5, 5, 5, true, 3, true}, {9, 9, 9, 9, false, 0, true},
                                             {1, 1, 1, 1, false, 1, true}, {8, 8, 8, 8, true, 9, true},
                                             {16, 16, 16, 16, true, 17, true}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " U " + std::to_string(sh.a1) + "+" + std::to_string(sh.a2) + " V " +
                   std::to_string(sh.b1) + "+" + std::to_string(sh.b2) + "+" + std::to_string(sh.b3) +
                   (sh.scaled ? " scaled" : "") + (sh.shared ? " shared" : ""));
      BlockOpsData d(static_cast<uint64_t>(n * 131 + sh.a1 + 7 * sh.b2 + 3 * sh.b3 + (sh.shared ? 1 : 0)));
      const std::vector<double> u1 = d.random(n * sh.a1), u2 = d.random(n * sh.a2), v3 = d.random(n * sh.b3),
                                sc = d.random(n);
      const std::vector<double> v1 = sh.shared ? u1 : d.random(n * sh.b1), v2 = sh.shared ? u2 : d.random(n * sh.b2);
      const int a = sh.a1 + sh.a2, b = sh.b1 + sh.b2 + sh.b3;
      DeviceArray<double> du1(u1), du2(u2), dv1(v1), dv2(v2), dv3(v3), dsc(sc),
          dout(std::vector<double>(static_cast<size_t>(a) * b, nan));
      BlockOpsWorkspace ws(32);
      const double* v1p = sh.shared ? du1.data() : dv1.data();
      const double* v2p = sh.shared ? du2.data() : dv2.data();
      const GramInputs g{du1.data(), sh.a1, sh.a2 ? du2.data() : nullptr, sh.a2, sh.scaled ? dsc.data() : nullptr,
                         v1p, sh.b1, sh.b2 ? v2p : nullptr, sh.b2, sh.b3 ? dv3.data() : nullptr, sh.b3};
      launch_block_gram(n, g, dout.data(), ws, 0);
      const std::vector<double> out = dout.download();
      for (int l = 0; l < a; ++l)
        for (int c = 0; c < b; ++c) {
          long double ref = 0, mag = 0;
          for (int64_t i = 0; i < n; ++i) {
            const long double x = l < sh.a1 ? u1[i * sh.a1 + l] : u2[i * sh.a2 + (l - sh.a1)] * (sh.scaled ? sc[i] : 1.0);
            const long double y = c < sh.b1          ? v1[i * sh.b1 + c]
                                  : c < sh.b1 + sh.b2 ? v2[i * sh.b2 + (c - sh.b1)]
                                                      : v3[i * sh.b3 + (c - sh.b1 - sh.b2)];
            ref += x * y;
            mag += std::abs(x * y);
          }
          ASSERT_NEAR(out[static_cast<size_t>(c) * a + l], static_cast<double>(ref), 8 * 2.2e-16 * static_cast<double>(mag) + 1e-300)
              << "gram (" << l << ", " << c << ")";
        }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
}

TEST(BlockOps, CombineMatchesHostLoops) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // k > 0: also X (n x k) += U A2. first: C's first b columns, passed without a column map (sel = null).
  struct Shape { int a, b, ldc; bool gather, scaled; int k; bool first = false; };
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{997}, int64_t{40000}})
    for (const Shape sh : std::vector<Shape>{{0, 5, 7, true, true, 0}, {1, 1, 1, true, false, 0},
                                             {16, 16, 16, true, true, 0}, {32, 32, 32, false, false, 0},
                                             {5, 7, 3, true, true, 0}, {32, 3, 32, true, false, 0},
                                             {3, 32, 32, false, false, 0}, {16, 16, 16, true, true, 16},
                                             {16, 11, 16, true, false, 16}, {5, 3, 9, true, true, 9},
                                             {32, 32, 32, true, true, 32}, {4, 0, 1, false, false, 29},
                                             {16, 16, 16, true, true, 16, true}, {16, 14, 32, true, false, 0, true},
                                             {5, 7, 9, true, true, 0, true}, {32, 32, 32, true, true, 32, true},
                                             {15, 13, 13, true, false, 15, true}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " a " + std::to_string(sh.a) + " b " + std::to_string(sh.b) + " k " +
                   std::to_string(sh.k) + (sh.first ? " first columns" : ""));
      BlockOpsData d(static_cast<uint64_t>(n * 17 + sh.a * 5 + sh.b + sh.k));
      const std::vector<double> u = d.random(n * sh.a), m = d.random(static_cast<size_t>(sh.a) * sh.b),
                                c = d.random(n * sh.ldc), sc = d.random(n), x0 = d.random(n * sh.k),
                                a2 = d.random(static_cast<size_t>(sh.a) * sh.k);
      std::vector<int> sel(sh.b);
      for (int j = 0; j < sh.b; ++j) sel[j] = sh.first ? j : (j * 7 + 3) % sh.ldc;
      DeviceArray<double> du(u), dm(m), dc(c), dsc(sc), dy(std::vector<double>(n * sh.b, nan)), dx(x0), da2(a2);
      DeviceArray<int> dsel(sel);
      launch_block_combine(n, dy.data(), sh.b, du.data(), sh.a, dm.data(), sh.gather ? dc.data() : nullptr, sh.ldc,
                           sh.gather && !sh.first ? dsel.data() : nullptr, sh.scaled ? dsc.data() : nullptr, 0,
                           sh.k ? dx.data() : nullptr, sh.k, sh.k ? da2.data() : nullptr);
      const std::vector<double> y = dy.download(), x = dx.download();
      for (int64_t i = 0; i < n; ++i) {
        for (int j = 0; j < sh.b; ++j) {
          long double ref = sh.gather ? static_cast<long double>(c[i * sh.ldc + sel[j]]) * (sh.scaled ? sc[i] : 1.0) : 0.0L;
          for (int l = 0; l < sh.a; ++l) ref += static_cast<long double>(u[i * sh.a + l]) * m[static_cast<size_t>(j) * sh.a + l];
          ASSERT_NEAR(y[i * sh.b + j], static_cast<double>(ref), 1e-13 * (sh.a + 2)) << "combine (" << i << ", " << j << ")";
        }
        for (int j = 0; j < sh.k; ++j) {
          long double ref = x0[i * sh.k + j];
          for (int l = 0; l < sh.a; ++l) ref += static_cast<long double>(u[i * sh.a + l]) * a2[static_cast<size_t>(j) * sh.a + l];
          ASSERT_NEAR(x[i * sh.k + j], static_cast<double>(ref), 1e-13 * (sh.a + 2)) << "X (" << i << ", " << j << ")";
        }
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
}

TEST(BlockOps, UpdateMatchesHostLoops) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{997}, int64_t{40000}})
    for (const auto& [k, m] : std::vector<std::pair<int, int>>{{1, 1}, {7, 5}, {16, 16}, {32, 32}, {3, 32}, {32, 3}}) {
      SCOPED_TRACE("n " + std::to_string(n) + " k " + std::to_string(k) + " m " + std::to_string(m));
      BlockOpsData d(static_cast<uint64_t>(n * 29 + k * 3 + m));
      // X += W A; R -= V A; rr = column norms of R
      const std::vector<double> x0 = d.random(n * k), r0 = d.random(n * k), w = d.random(n * m), v = d.random(n * m),
                                al = d.random(static_cast<size_t>(m) * k);
      for (const bool with_x : {true, false}) {  // without X: R only (block CG owes X += W A to its next combine)
        DeviceArray<double> dx(x0), dr(r0), dw(w), dv(v), dal(al), drr(std::vector<double>(k, nan));
        BlockOpsWorkspace ws(32);
        launch_block_update_xr(n, k, m, with_x ? dx.data() : nullptr, dr.data(), with_x ? dw.data() : nullptr, dv.data(),
                               dal.data(), drr.data(), ws, 0);
        const std::vector<double> x = dx.download(), rres = dr.download(), rr = drr.download();
        for (int c = 0; c < k; ++c) {
          long double norm = 0;
          for (int64_t i = 0; i < n; ++i) {
            long double xr = x0[i * k + c], rv = r0[i * k + c];
            for (int l = 0; l < m; ++l) {
              if (with_x) xr += static_cast<long double>(w[i * m + l]) * al[static_cast<size_t>(c) * m + l];
              rv -= static_cast<long double>(v[i * m + l]) * al[static_cast<size_t>(c) * m + l];
            }
            ASSERT_NEAR(x[i * k + c], static_cast<double>(xr), 1e-13 * (m + 1)) << "with_x " << with_x;
            ASSERT_NEAR(rres[i * k + c], static_cast<double>(rv), 1e-13 * (m + 1)) << "with_x " << with_x;
            norm += static_cast<long double>(rres[i * k + c]) * rres[i * k + c];
          }
          ASSERT_NEAR(rr[c], static_cast<double>(norm), 1e-13 * static_cast<double>(norm) + 1e-300) << "norm " << c;
        }
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      }
    }
}

// Block CG's one-pass step: X += W Ta; R -= V Ta; norms; Wn(:, pos[c]) = diag(d) R(:, c) + W Tb(:, c). Shapes
// cover odd widths (8-byte paths), full 16-column tiles, a subset of columns kept, a permutation, none kept.
TEST(BlockOps, StepMatchesHostLoops) {
  SPCG_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Shape { int m, k; std::vector<int> act; bool scaled; };
  auto all = [](int k) {
    std::vector<int> a(k);
    for (int c = 0; c < k; ++c) a[c] = c;
    return a;
  };
  const std::vector<Shape> shapes{{16, 16, all(16), false}, {16, 16, all(16), true}, {16, 16, {0, 2, 3, 5, 8, 13, 15}, true},
                                  {5, 7, {1, 4, 6}, false},     {1, 1, all(1), true},      {16, 3, all(3), false},
                                  {3, 16, {15, 4, 0}, true},    {15, 15, all(15), true},   {16, 16, {}, false},
                                  {12, 16, all(16), false}};
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{997}, int64_t{40000}})
    for (const Shape& sh : shapes) {
      const int m = sh.m, k = sh.k, b = static_cast<int>(sh.act.size());
      SCOPED_TRACE("n " + std::to_string(n) + " m " + std::to_string(m) + " k " + std::to_string(k) + " kept " +
                   std::to_string(b) + (sh.scaled ? " scaled" : ""));
      BlockOpsData d(static_cast<uint64_t>(n * 37 + k * 5 + m + b));
      const std::vector<double> x0 = d.random(n * k), r0 = d.random(n * k), w = d.random(n * m), v = d.random(n * m),
                                ta = d.random(static_cast<size_t>(m) * k), tb = d.random(static_cast<size_t>(m) * k),
                                sc = d.random(n);
      std::vector<int> pos(k, -1);
      bool in_order = b == k;
      for (int c = 0; c < b; ++c) pos[sh.act[c]] = c, in_order &= sh.act[c] == c;
      DeviceArray<double> dx(x0), dr(r0), dw(w), dv(v), dta(ta), dtb(tb), dsc(sc), drr(std::vector<double>(k, nan)),
          dwn(std::vector<double>(n * b, nan));
      DeviceArray<int> dpos(pos);
      BlockOpsWorkspace ws(16);
      launch_block_step(n, m, k, dw.data(), dv.data(), dr.data(), dx.data(), sh.scaled ? dsc.data() : nullptr, dta.data(),
                        dtb.data(), dpos.data(), b, in_order, dwn.data(), drr.data(), ws, 0);
      const std::vector<double> x = dx.download(), rres = dr.download(), rr = drr.download(), wn = dwn.download();
      for (int c = 0; c < k; ++c) {
        long double norm = 0;
        for (int64_t i = 0; i < n; ++i) {
          long double xr = x0[i * k + c], rv = r0[i * k + c], z = 0;
          for (int l = 0; l < m; ++l) {
            xr += static_cast<long double>(w[i * m + l]) * ta[static_cast<size_t>(c) * m + l];
            rv -= static_cast<long double>(v[i * m + l]) * ta[static_cast<size_t>(c) * m + l];
            z += static_cast<long double>(w[i * m + l]) * tb[static_cast<size_t>(c) * m + l];
          }
          ASSERT_NEAR(x[i * k + c], static_cast<double>(xr), 1e-13 * (m + 1)) << "X (" << i << ", " << c << ")";
          ASSERT_NEAR(rres[i * k + c], static_cast<double>(rv), 1e-13 * (m + 1)) << "R (" << i << ", " << c << ")";
          if (pos[c] >= 0) {
            z += (sh.scaled ? sc[i] : 1.0) * static_cast<long double>(rres[i * k + c]);
            ASSERT_NEAR(wn[i * b + pos[c]], static_cast<double>(z), 1e-13 * (m + 2)) << "Wn (" << i << ", " << pos[c] << ")";
          }
          norm += static_cast<long double>(rres[i * k + c]) * rres[i * k + c];
        }
        ASSERT_NEAR(rr[c], static_cast<double>(norm), 1e-13 * static_cast<double>(norm) + 1e-300) << "norm " << c;
      }
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    }
}

// The right-hand sides `spcg solve --rhs random` makes on the device are make_rhs("random")'s host block bit for
// bit (--verify and --output read the host one): SplitMix64's (e+1)-th draw, 2u - 1.
TEST(DeviceFill, RandomBlockEqualsTheHostDraws) {
  SPCG_REQUIRE_GPU();
  for (const uint64_t seed : {uint64_t{1}, uint64_t{5}, uint64_t{0xdeadbeef}}) {
    const size_t count = 100003;
    DeviceArray<double> d(count, "random block");
    launch_fill_splitmix_uniform(seed, d.data(), count, 0);
    const std::vector<double> got = d.download();
    SplitMix64 rng(seed);
    for (size_t e = 0; e < count; ++e) {
      const double want = 2.0 * rng.uniform() - 1.0;
      ASSERT_EQ(std::memcmp(&got[e], &want, sizeof want), 0) << "seed " << seed << " entry " << e;
    }
  }
  DeviceArray<double> ones(37, "ones");
  launch_fill(1.0, ones.data(), ones.size(), 0);
  for (double v : ones.download()) EXPECT_EQ(v, 1.0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

// ---- host code of kernels/ (no GPU needed) ----

namespace {

using spcg::test::HostOperator;

}  // namespace

// The interface's own part: shape checks with a message naming the kernel and the shapes, degenerate shapes
// (k = 0, no rows) returned before any kernel is called, the defaults of the optional virtuals.
TEST(LinearOperatorBase, ShapesDegenerateCallsAndDefaults) {
  CsrMatrix a;  // 3 x 4
  a.rows = 3, a.cols = 4, a.row_ptr = {0, 2, 3, 5}, a.col_idx = {0, 3, 1, 2, 3}, a.values = {1, 2, 3, 4, 5};
  const HostOperator op(a);
  EXPECT_EQ(op.rows(), 3);
  EXPECT_EQ(op.cols(), 4);
  EXPECT_EQ(op.nnz(), 5);
  DeviceBlock X, Y;  // 0 x 0: no device memory
  try {
    op.apply(1.0, X, 0.0, Y);
    ADD_FAILURE() << "a shape mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "host-test: shape mismatch: A is 3 x 4, X is 0 x 0, Y is 0 x 0");
  }
  std::vector<double> x = {1, 2, 3, 4, 5, 6, 7, 8}, y(6, std::numeric_limits<double>::quiet_NaN());
  op.apply(1.0, x.data(), 0.0, y.data(), 0);  // k = 0
  EXPECT_EQ(op.calls, 0);
  op.apply(2.0, x.data(), 0.0, y.data(), 2);  // 4 x 2 X, 3 x 2 Y: forwarded as given
  EXPECT_EQ(op.calls, 1);
  const std::vector<double> want = {2 * (1 + 2 * 7), 2 * (2 + 2 * 8), 2 * 3 * 3, 2 * 3 * 4, 2 * (4 * 5 + 5 * 7), 2 * (4 * 6 + 5 * 8)};
  EXPECT_EQ(y, want);
  const HostOperator empty(CsrMatrix{});
  empty.apply(1.0, x.data(), 0.0, y.data(), 1);  // no rows: nothing to do
  EXPECT_EQ(empty.calls, 0);
  DotSink sink;
  EXPECT_FALSE(apply_with_dot(op, x.data(), y.data(), sink, 0)) << "no epilogue by default";
  EXPECT_EQ(op.chosen(8), "host-test");
  EXPECT_TRUE(op.deterministic());
  EXPECT_EQ(ranks_of(op), nullptr);
  EXPECT_EQ(persistent_cg_layout(op), nullptr);
  EXPECT_TRUE(op.setup_info().reason.empty());
  EXPECT_EQ(auto_choice(op, 4), "host-test");
  EXPECT_DOUBLE_EQ(op.bytes_per_apply(2), 12.0 * 5 + 4.0 * 4 + 16.0 * 3 * 2);
}

// The registry: every entry is in exactly one family, found by its name, described, with a factory; auto is
// not an entry (make_operator resolves it); an unknown name is a UsageError naming the choices.
TEST(Registry, FamiliesPartitionTheEntries) {
  std::vector<std::string> all = kernel_names(), by_family;
  for (const KernelFamily f : {KernelFamily::spmv, KernelFamily::spmm, KernelFamily::baseline})
    for (const std::string& n : kernel_names(f)) {
      by_family.push_back(n);
      const KernelEntry* e = find_kernel(n);
      ASSERT_NE(e, nullptr) << n;
      EXPECT_EQ(e->name, n);
      EXPECT_EQ(e->family, f) << n;
      EXPECT_FALSE(e->description.empty()) << n;
      EXPECT_TRUE(static_cast<bool>(e->make)) << n;
    }
  std::sort(all.begin(), all.end());
  std::sort(by_family.begin(), by_family.end());
  EXPECT_EQ(all, by_family);
  EXPECT_EQ(find_kernel("auto"), nullptr);
  EXPECT_EQ(find_kernel(""), nullptr);
  EXPECT_EQ(kernel_registry().size(), all.size());
  const CsrMatrix a = poisson2d_5pt(3);
  const MatrixSetup setup(a);  // host input: nothing uploaded until an operator asks
  EXPECT_EQ(setup.rows(), 9);
  EXPECT_EQ(setup.cols(), 9);
  EXPECT_EQ(setup.nnz(), a.nnz());
  EXPECT_EQ(&setup.host(), &a);
  EXPECT_EQ(setup.times().upload_ms, 0.0);
  try {
    make_operator("spmm-nope", setup);
    ADD_FAILURE() << "an unknown kernel accepted";
  } catch (const UsageError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("unknown kernel 'spmm-nope'; choose auto or one of: csr-scalar, "), std::string::npos) << m;
    for (const std::string& n : all) EXPECT_NE(m.find(n), std::string::npos) << n << " missing from: " << m;
  }
}

// csr-adaptive's row binning: consecutive rows grouped while their entries fit the tile (and at most max_rows
// of them), each group as long as the greedy rule allows; a row longer than the tile cut into pieces of
// piece_entries, with its partial-sum slot; every row and entry covered once, in order.
TEST(RowBlocks, GreedyBinningAndLongRowPieces) {
  using T = RowBlockTuning;
  std::vector<int32_t> lengths = {0, 3, 0, 0, 1000, 24, 1, T::tile_entries, T::tile_entries + 1, 0,
                                  2 * T::piece_entries, 2 * T::piece_entries + 1, 5};
  for (int i = 0; i < 600; ++i) lengths.push_back(i % 3);  // many short rows: the max_rows limit
  lengths.push_back(7000);
  SplitMix64 rng(9);
  for (int i = 0; i < 300; ++i) lengths.push_back(static_cast<int32_t>(rng.uniform() * 40));
  std::vector<RowOffset> row_ptr = {0};
  for (int32_t l : lengths) row_ptr.push_back(row_ptr.back() + l);
  const int32_t rows = static_cast<int32_t>(lengths.size());
  const RowBinning b = make_row_blocks(row_ptr.data(), rows);
  int32_t next_row = 0;
  int partials = 0;
  size_t k = 0;
  while (k < b.blocks.size()) {
    const RowBlock& blk = b.blocks[k];
    ASSERT_EQ(blk.first, next_row) << "block " << k;
    if (blk.slot < 0) {  // a run of short rows
      const int64_t entries = row_ptr[blk.last] - row_ptr[blk.first];
      ASSERT_GT(blk.last, blk.first) << "block " << k;
      EXPECT_LE(entries, T::tile_entries) << "block " << k;
      EXPECT_LE(blk.last - blk.first, T::max_rows) << "block " << k;
      EXPECT_EQ(blk.nz_begin, row_ptr[blk.first]);
      EXPECT_EQ(blk.nz_end, row_ptr[blk.last]);
      if (blk.last < rows)  // greedy: the next row would not have fitted
        EXPECT_TRUE(blk.last - blk.first == T::max_rows || entries + lengths[blk.last] > T::tile_entries) << "block " << k;
      next_row = blk.last;
      ++k;
    } else {  // the pieces of one long row
      const int32_t row = blk.first;
      EXPECT_GT(lengths[row], T::tile_entries) << "row " << row << " fits a tile but was cut";
      const int pieces = (lengths[row] + T::piece_entries - 1) / T::piece_entries;
      ASSERT_LT(blk.slot, static_cast<int>(b.slots.size()));
      EXPECT_EQ(b.slots[blk.slot].pieces, pieces) << "row " << row;
      EXPECT_EQ(b.slots[blk.slot].partial_offset, partials) << "row " << row;
      for (int q = 0; q < pieces; ++q, ++k) {
        ASSERT_LT(k, b.blocks.size());
        const RowBlock& piece = b.blocks[k];
        EXPECT_EQ(piece.first, row);
        EXPECT_EQ(piece.last, row + 1);
        EXPECT_EQ(piece.slot, blk.slot);
        EXPECT_EQ(piece.piece, q);
        EXPECT_EQ(piece.nz_begin, row_ptr[row] + q * T::piece_entries);
        EXPECT_EQ(piece.nz_end, std::min(row_ptr[row] + (q + 1) * T::piece_entries, row_ptr[row + 1]));
      }
      partials += pieces;
      next_row = row + 1;
    }
  }
  EXPECT_EQ(next_row, rows);
  EXPECT_EQ(b.partials, partials);
  EXPECT_EQ(b.slots.size(), 4u) << "rows of tile + 1, 2 x 2048, 2 x 2048 + 1 and 7000 entries: 4 long rows";
  EXPECT_TRUE(make_row_blocks(row_ptr.data(), 0).blocks.empty());
}

// CUDA errors become CudaError naming the library, the call, the reason and file:line (the file's base name);
// the device probe and CudaStart agree with each other, and say why when there is no device.
TEST(CudaCheck, ErrorsAndTheDeviceProbe) {
  try {
    throw_cuda_error("cuSPARSE", "cusparseSpMV(h, ...)", "invalid value", "/a/b/spmv_x.cu", 42);
  } catch (const CudaError& e) {
    EXPECT_EQ(std::string(e.what()), "cuSPARSE error: invalid value in cusparseSpMV(h, ...) at spmv_x.cu:42");
  }
  std::string why, why_count, why_start;
  const bool available = cuda_device_available(&why);
  EXPECT_EQ(cuda_device_available(nullptr), available);
  const int count = cuda_device_count(&why_count);
  CudaStart start;
  EXPECT_EQ(start.wait(&why_start), available);
  if (available) {
    EXPECT_GE(count, 1);
    EXPECT_TRUE(why_start.empty()) << why_start;
  } else {
    EXPECT_EQ(count, 0);
    EXPECT_FALSE(why.empty());
    EXPECT_EQ(why_count, why);
    EXPECT_EQ(why_start, why);
  }
}

// Host-side behaviour of the device memory wrappers: empty arrays need no device (nothing allocated, empty
// downloads), a size mismatch is refused before any copy, moves hand over ownership; without a device the
// first allocation and the memory query are CudaErrors, and trimming an unused pool does nothing.
TEST(DeviceMemory, EmptyArraysMovesAndErrors) {
  DeviceArray<double> empty(0, "nothing");
  EXPECT_EQ(empty.data(), nullptr);
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_EQ(empty.bytes(), 0u);
  EXPECT_TRUE(empty.download().empty());
  empty.upload(std::vector<double>{});
  try {
    empty.upload(std::vector<double>{1.0});
    ADD_FAILURE() << "a size mismatch accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "DeviceArray::upload: size mismatch");
  }
  DeviceArray<double> moved(std::move(empty));
  EXPECT_EQ(moved.size(), 0u);
  DeviceBlock block;
  EXPECT_EQ(block.size(), 0u);
  EXPECT_EQ(block.data(), nullptr);
  PinnedUploader uploader;
  uploader.copy(nullptr, nullptr, 0);  // nothing to copy: no device call
  std::string why;
  if (!cuda_device_available(&why)) {
    release_idle_device_memory();  // no pool was made: nothing to trim, no CUDA started
    EXPECT_THROW(DeviceArray<double>(16, "test"), CudaError);
    EXPECT_THROW(device_memory_info(), CudaError);
  } else {
    const DeviceMemoryInfo m = device_memory_info();
    EXPECT_GT(m.total_bytes, 0u);
    EXPECT_LE(m.free_bytes, m.total_bytes);
    DeviceArray<double> a(std::vector<double>{1, 2, 3}, "test"), b;
    b = std::move(a);
    EXPECT_EQ(a.data(), nullptr);
    EXPECT_EQ(b.download(), (std::vector<double>{1, 2, 3}));
    release_idle_device_memory();
  }
}

// Arrays past kPinnedUploadBytes go up locked a chunk at a time: every byte arrives from a start inside a page
// and a length that is no multiple of a chunk, and a range locked already (the same array copied twice in one
// uploader) is copied as it is, without a second lock (which CUDA refuses).
TEST(PinnedUploader, ChunkedCopiesFromAnyOffsetArriveWhole) {
  std::string why;
  if (!cuda_device_available(&why)) GTEST_SKIP() << why;
  const size_t n = (PinnedUploader::kLockedChunkBytes * 2 + PinnedUploader::kChunkAlignment * 3) / sizeof(double) + 4099;
  HostVector<double> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = 0.5 * double(i) - 7.0;
  const size_t skip = 3;  // 24 bytes into the array's first page
  const std::vector<double> poison(n - skip, std::numeric_limits<double>::quiet_NaN());
  DeviceArray<double> first(poison, "chunked copy"), again(poison, "chunked copy again");
  {
    PinnedUploader uploader;
    uploader.copy(first.data(), host.data() + skip, first.bytes());
    uploader.copy(again.data(), host.data() + skip, again.bytes());
    uploader.finish();
  }
  const std::vector<double> a = first.download(), b = again.download();
  for (size_t i = 0; i < n - skip; ++i) {
    ASSERT_EQ(a[i], host[i + skip]) << "entry " << i;
    ASSERT_EQ(b[i], host[i + skip]) << "entry " << i << " (second copy)";
  }
}

// KernelPreload loads every kernel of the modules it is given, on its own thread; a pointer that is no kernel
// loads nothing and throws nothing (best effort).
TEST(KernelPreload, LoadsTheListedModulesAndIgnoresTheRest) {
  std::string why;
  if (!cuda_device_available(&why)) {
    KernelPreload none({amg_kernels_module()});  // no device: nothing started, nothing thrown
    const PreloadTotals t = none.join();
    EXPECT_EQ(t.modules, 0);
    GTEST_SKIP() << why;
  }
  KernelPreload preload({amg_kernels_module(), setup_kernels_module(), reinterpret_cast<const void*>(&cuda_device_available)});
  const PreloadTotals t = preload.join();
  EXPECT_EQ(t.modules, 2);
  EXPECT_GT(t.kernels, 10);  // both modules hold many kernels (AMG's setup, the statistics and layouts)
  EXPECT_EQ(preload.join().kernels, t.kernels);  // joined once; again the same totals
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// The per-kernel table without timing: no events, nothing pending to collect.
TEST(KernelTimer, DisabledTimerRecordsNoEvents) {
  KernelTimer timer(false, nullptr);
  EXPECT_FALSE(timer.enabled());
  timer.collect();  // nothing pending: no device call
  timer.run("spmv", 10.0, [] {});
  timer.collect();
  EXPECT_EQ(timer.events_recorded(), 0);
  const std::vector<KernelStat> st = timer.stats();
  ASSERT_EQ(st.size(), 1u);
  EXPECT_EQ(st[0].calls, 1);
  EXPECT_EQ(st[0].total_ms, 0.0);
}
