// Preconditioners (issue #24) against host references with Eigen: the device aggregation equals the host rule,
// the device Galerkin product equals P'AP, the coarsest solve equals Eigen's LLT, Chebyshev equals its
// polynomial evaluated through S's eigen-decomposition, block-Jacobi equals Eigen's block inverses; every apply
// is symmetric and positive, k columns equal k single applies; the V-cycle contracts; PCG converges with each
// preconditioner and each solver; planted failures report their status. GPU tests skip without a device.
#include <gtest/gtest.h>

#include <Eigen/Cholesky>
#include <Eigen/Dense>
#include <Eigen/Eigenvalues>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <tuple>

#include "sparse/aggregation.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "sparse/eigen_bridge.hpp"
#include "spcg/generators.hpp"
#include "spcg/matrix_market.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/precond/precond_ops.hpp"
#include "solver/preconditioner.hpp"
#include "kernels/registry.hpp"
#include "solver/solver.hpp"
#include "spcg/spcg.hpp"
#include "tests/test_util.hpp"
#include "tests/host_operator.hpp"
#include "tests/residual_checks.hpp"

using namespace spcg;

namespace {

constexpr double kEps = std::numeric_limits<double>::epsilon();

class GpuPrecond : public spcg::test::GpuTest {};

CsrMatrix input(const std::string& name) { return read_matrix_market(spcg::test::input(name)).matrix; }

// A matrix set up as the solver sets it up: the matrix, its operator, and the preconditioner on top.
struct Built {
  std::unique_ptr<CsrMatrix> a;
  std::unique_ptr<MatrixSetup> setup;
  std::unique_ptr<LinearOperator> op;
  std::unique_ptr<PreconditionerOp> m;
};
Built build(const CsrMatrix& a, Preconditioner kind, const PreconditionerOptions& o = {}, int k = 1,
            const std::string& kernel = "auto", Precision precision = Precision::double_precision) {
  Built b;
  b.a = std::make_unique<CsrMatrix>(a);
  b.setup = std::make_unique<MatrixSetup>(*b.a);
  OperatorOptions oo;
  oo.deterministic = true;
  oo.expected_k = k;
  b.op = make_operator(kernel, *b.setup, oo);
  PreconditionerInputs in{*b.setup, *b.op, oo, "test matrix", k};
  in.precision = precision;
  b.m = make_preconditioner(kind, o, in);
  return b;
}

// Z = M^-1 R on the device; Z is poisoned with NaN first, so an entry the apply does not write shows.
DenseBlock apply(const PreconditionerOp& m, const DenseBlock& r) {
  DeviceBlock R(r.rows, r.cols), Z(r.rows, r.cols);
  R.values.upload(r.data);
  Z.values.upload(HostVector<double>(r.data.size(), std::numeric_limits<double>::quiet_NaN()));
  m.reserve(r.cols);
  m.apply(R.data(), Z.data(), r.cols, 0);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  DenseBlock z(r.rows, r.cols);
  z.data = Z.values.download<HostVector<double>>();
  return z;
}

double column_dot(const DenseBlock& a, const DenseBlock& b, int j) {
  long double s = 0;
  for (int32_t i = 0; i < a.rows; ++i) s += static_cast<long double>(a.at(i, j)) * b.at(i, j);
  return static_cast<double>(s);
}
double column_norm(const DenseBlock& a, int j) { return std::sqrt(column_dot(a, a, j)); }

Eigen::MatrixXd dense(const CsrMatrix& a) {
  Eigen::MatrixXd d = Eigen::MatrixXd::Zero(a.rows, a.cols);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) d(i, a.col_idx[p]) += a.values[p];
  return d;
}

bool columns_sorted(const CsrMatrix& a) {
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i] + 1; p < a.row_ptr[i + 1]; ++p)
      if (a.col_idx[p - 1] >= a.col_idx[p]) return false;
  return true;
}

std::vector<std::pair<std::string, CsrMatrix>> aggregation_cases() {
  CsrMatrix isolated;  // no strong connections at all
  isolated.rows = isolated.cols = 5, isolated.row_ptr = {0, 1, 2, 3, 4, 5}, isolated.col_idx = {0, 1, 2, 3, 4};
  isolated.values = {1, 2, 3, 4, 5};
  return {{"diagonal", isolated},
          {"poisson2d:20", generate("poisson2d:20")},
          {"poisson3d:9", generate("poisson3d:9")},
          {"jump3d:8", generate("jump3d:8")},
          {"powerlaw:500", generate("powerlaw:500")},
          {"nos4", input("nos4.mtx")},
          {"bcsstk01", input("bcsstk01.mtx")}};
}

TEST_F(GpuPrecond, DeviceStrengthAndAggregatesEqualTheHostRule) {
  for (const auto& [name, a] : aggregation_cases())
    for (const uint64_t seed : {0, 7}) {
      const std::string what = name + " seed " + std::to_string(seed);
      const auto d = upload_csr_shared(a);
      DeviceArray<double> diag(static_cast<size_t>(a.rows));
      launch_diagonal(*d, diag.data(), 0);
      const DeviceCsr g = strength_graph(*d, diag.data(), 0.08, 0);
      const CsrMatrix host_g = strength_graph(a, 0.08);
      const CsrMatrix dev_g = download_csr(g);
      EXPECT_EQ(dev_g.row_ptr, host_g.row_ptr) << what;
      EXPECT_EQ(dev_g.col_idx, host_g.col_idx) << what;
      const DeviceAggregates agg = aggregate_on_device(g, seed, 0);
      const Aggregates host = aggregate(host_g, seed);
      EXPECT_EQ(agg.count, host.count) << what;
      EXPECT_EQ(agg.of.download(), host.of) << what;
      // the tentative prolongator: one entry per row, P'P = I
      const CsrMatrix p = download_csr(tentative_prolongator(agg, a.rows, 0));
      const CsrMatrix hp = tentative_prolongator(host);
      EXPECT_EQ(p.col_idx, hp.col_idx) << what;
      for (size_t i = 0; i < p.values.size(); ++i) EXPECT_EQ(p.values[i], hp.values[i]) << what;
    }
}

// The device transpose is exact (a permutation of the entries, rows sorted): against a host counting transpose, on
// no entries, one column, empty rows and columns, and column counts whose indices need 1, 2, 10 and 21 bits (the
// sort runs on those bits alone). Outputs poisoned by the comparison itself: every entry is compared.
TEST_F(GpuPrecond, TransposeIsExact) {
  std::mt19937 rng(31);
  for (const auto& [rows, cols, per_row] : std::vector<std::tuple<int32_t, int32_t, int>>{
           {0, 0, 0}, {5, 3, 0}, {1, 1, 1}, {40, 1, 1}, {7, 3, 2}, {300, 1000, 5}, {2000, (1 << 20) + 3, 9}, {999, 17, 6}}) {
    const std::string what = std::to_string(rows) + " x " + std::to_string(cols);
    CsrMatrix a;
    a.rows = rows, a.cols = cols;
    for (int32_t i = 0; i < rows; ++i) {
      std::vector<int32_t> c;
      const int len = i % 4 == 3 ? 0 : std::min<int>(per_row, cols);  // every fourth row empty
      while (static_cast<int>(c.size()) < len) {
        const int32_t j = static_cast<int32_t>(rng() % static_cast<uint32_t>(cols));
        if (std::find(c.begin(), c.end(), j) == c.end()) c.push_back(j);
      }
      std::sort(c.begin(), c.end());
      for (int32_t j : c) a.col_idx.push_back(j), a.values.push_back(std::ldexp(double(rng() % 1000) + 1, -int(rng() % 40)));
      a.row_ptr.push_back(static_cast<RowOffset>(a.col_idx.size()));
    }
    // host: count each column, then place the entries row by row (so each column keeps its row order)
    std::vector<RowOffset> want_ptr(static_cast<size_t>(cols) + 1, 0);
    for (int32_t j : a.col_idx) ++want_ptr[static_cast<size_t>(j) + 1];
    for (int32_t j = 0; j < cols; ++j) want_ptr[j + 1] += want_ptr[j];
    std::vector<int32_t> want_col(a.col_idx.size());
    std::vector<double> want_val(a.col_idx.size());
    std::vector<RowOffset> next(want_ptr.begin(), want_ptr.end() - (cols > 0 ? 1 : 0));
    for (int32_t i = 0; i < rows; ++i)
      for (RowOffset p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
        const RowOffset at = next[a.col_idx[p]]++;
        want_col[at] = i, want_val[at] = a.values[p];
      }
    const CsrMatrix t = download_csr(transpose(*upload_csr_shared(a), 0));
    EXPECT_EQ(t.rows, cols) << what;
    EXPECT_EQ(t.cols, rows) << what;
    EXPECT_EQ(std::vector<RowOffset>(t.row_ptr.begin(), t.row_ptr.end()), want_ptr) << what;
    EXPECT_EQ(std::vector<int32_t>(t.col_idx.begin(), t.col_idx.end()), want_col) << what;
    EXPECT_EQ(std::vector<double>(t.values.begin(), t.values.end()), want_val) << what;
  }
}

// The device's P (smoothed or plain), R = P' and A_c = R A P against Eigen's products of the host pieces.
TEST_F(GpuPrecond, GalerkinProductEqualsEigen) {
  for (const auto& [name, a] : std::vector<std::pair<std::string, CsrMatrix>>{
           {"poisson2d:24", generate("poisson2d:24")}, {"jump3d:8", generate("jump3d:8")},
           {"bcsstk01", input("bcsstk01.mtx")}, {"nos6", input("nos6.mtx")}, {"powerlaw:400", generate("powerlaw:400")}})
    for (const bool smoothed : {true, false}) {
      const std::string what = name + (smoothed ? " smoothed" : " plain");
      const double omega = 0.6;
      const auto d = upload_csr_shared(a);
      DeviceArray<double> diag(static_cast<size_t>(a.rows)), dinv(static_cast<size_t>(a.rows));
      launch_diagonal(*d, diag.data(), 0);
      const DeviceArray<double> di = checked_inverse_diagonal(*d, name, "test", 0);
      const DeviceCsr g = strength_graph(*d, diag.data(), 0.08, 0);
      const DeviceAggregates agg = aggregate_on_device(g, 0, 0);
      DeviceCsr p0 = tentative_prolongator(agg, a.rows, 0);
      DeviceCsr p;
      if (smoothed) {
        p = row_product(*d, p0, &p0, di.data(), -omega, 0);  // P0 - omega D^-1 A P0
      } else {
        p = std::move(p0);
      }
      const DeviceCsr r = transpose(p, 0);
      const DeviceCsr ap = spgemm(*d, p, 0);
      // our row-wise product equals cuSPARSE's and Eigen's: A P, and a second smoothing P - omega D^-1 A P
      const CsrMatrix hap_rows = download_csr(row_product(*d, p, nullptr, nullptr, 1.0, 0));
      const CsrMatrix hp2 = download_csr(row_product(*d, p, &p, di.data(), -omega, 0));
      EXPECT_TRUE(columns_sorted(hap_rows) && columns_sorted(hp2)) << what << ": row product unsorted";
      const DeviceCsr ac = spgemm(r, ap, 0);
      bool by_cusparse = true;
      const CsrMatrix hrap = download_csr(row_product(r, ap, nullptr, nullptr, 1.0, 0, &by_cusparse));
      EXPECT_TRUE(columns_sorted(hrap)) << what << ": R (A P) row product unsorted";
      const CsrMatrix hp = download_csr(p), hr = download_csr(r), hac = download_csr(ac);
      EXPECT_TRUE(columns_sorted(hp) && columns_sorted(hr) && columns_sorted(hac)) << what << ": unsorted columns";
      // host reference
      const Eigen::MatrixXd A = dense(a);
      const Eigen::MatrixXd P0 = dense(tentative_prolongator(aggregate(strength_graph(a, 0.08), 0)));
      Eigen::MatrixXd P = P0;
      if (smoothed) P = P0 - omega * A.diagonal().cwiseInverse().asDiagonal() * A * P0;
      const Eigen::MatrixXd Ac = P.transpose() * A * P;
      const Eigen::MatrixXd P2 = P - omega * A.diagonal().cwiseInverse().asDiagonal() * A * P;
      const double scale_p = P.cwiseAbs().maxCoeff(), scale_a = A.cwiseAbs().maxCoeff() * std::max(1.0, P.cwiseAbs().maxCoeff());
      const double n = a.rows;
      EXPECT_LE((dense(hp) - P).cwiseAbs().maxCoeff(), 16 * kEps * n * scale_p) << what << ": P";
      EXPECT_LE((dense(hr) - P.transpose()).cwiseAbs().maxCoeff(), 16 * kEps * n * scale_p) << what << ": R";
      EXPECT_LE((dense(hac) - Ac).cwiseAbs().maxCoeff(), 64 * kEps * n * scale_a) << what << ": R A P";
      EXPECT_LE((dense(hrap) - Ac).cwiseAbs().maxCoeff(), 64 * kEps * n * scale_a) << what << ": R (A P) by row product";
      EXPECT_FALSE(by_cusparse) << what << ": these rows fit the row-product kernel";
      EXPECT_LE((dense(hap_rows) - A * P).cwiseAbs().maxCoeff(), 64 * kEps * n * scale_a) << what << ": row product A P";
      EXPECT_LE((dense(hap_rows) - dense(download_csr(ap))).cwiseAbs().maxCoeff(), 64 * kEps * n * scale_a)
          << what << ": row product against cuSPARSE's";
      EXPECT_LE((dense(hp2) - P2).cwiseAbs().maxCoeff(), 64 * kEps * n * scale_a) << what << ": second smoothing";
    }
}

// The row-wise product on rows of every width: an arrow matrix's dense rows have more distinct columns in
// A A than the kernel takes (the whole product then goes to cuSPARSE, flagged); narrower ones stay ours. Each
// equals Eigen's A A (scaled, plus E), and two runs give the same bits. The shape the first learns makes products
// of new values on the same pattern -- the fill pass alone, then (the columns learned) the values alone -- bit for
// bit the whole product's; the transpose's learned order gathers new values into the whole transpose's bits.
TEST_F(GpuPrecond, RowProductOnWideAndNarrowRows) {
  for (const int32_t n : {1, 7, 200, 700}) {
    std::vector<int32_t> ti, tj;
    std::vector<double> tv;
    for (int32_t i = 0; i < n; ++i) {
      ti.push_back(i), tj.push_back(i), tv.push_back(4.0 + i % 3);
      if (i > 0) ti.push_back(i), tj.push_back(i - 1), tv.push_back(-1.0 - 0.1 * (i % 5));
      if (i > 0) ti.push_back(i - 1), tj.push_back(i), tv.push_back(-1.0 - 0.1 * (i % 5));
      if (i > 1) ti.push_back(0), tj.push_back(i), tv.push_back(0.01 * (i % 7)), ti.push_back(i), tj.push_back(0),
          tv.push_back(0.01 * (i % 7));  // row and column 0 dense
    }
    const CsrMatrix a = csr_from_triplets(n, n, ti, tj, tv);
    const std::string what = "arrow:" + std::to_string(n);
    const auto d = upload_csr_shared(a);
    const DeviceArray<double> dinv = checked_inverse_diagonal(*d, what, "test", 0);
    bool by_cusparse = false;
    RowProductShape shape;
    const CsrMatrix c = download_csr(row_product(*d, *d, d.get(), dinv.data(), -0.5, 0, &by_cusparse, &shape));
    const CsrMatrix again = download_csr(row_product(*d, *d, d.get(), dinv.data(), -0.5, 0));
    EXPECT_EQ(by_cusparse, n > RowProductTuning::kMaxColumns) << what;
    EXPECT_EQ(shape.lanes > 0, !by_cusparse) << what << ": cuSPARSE's product leaves no shape";
    EXPECT_FALSE(shape.col_idx) << what << ": a whole product learns the offsets alone";
    if (shape.lanes > 0) {
      // new values on the same patterns, twice: the fill pass alone (learning the columns), then the values alone
      CsrMatrix b = a;
      for (int step = 1; step <= 2; ++step) {
        const std::string at = what + ", update " + std::to_string(step);
        for (size_t q = 0; q < b.values.size(); ++q) b.values[q] *= 1.0 + 0.37 * double((q + step) % 11);
        const auto db = upload_csr_shared(b);
        const DeviceArray<double> bdinv = checked_inverse_diagonal(*db, what, "test", 0);
        const CsrMatrix whole = download_csr(row_product(*db, *db, db.get(), bdinv.data(), -0.5, 0));
        const bool values_alone = shape.col_idx != nullptr;
        EXPECT_EQ(values_alone, step == 2) << at;
        const CsrMatrix kept = download_csr(row_product(*db, *db, db.get(), bdinv.data(), -0.5, 0, nullptr, &shape));
        EXPECT_TRUE(shape.col_idx) << at << ": the fill pass learns the columns";
        EXPECT_EQ(kept.row_ptr, whole.row_ptr) << at;
        EXPECT_EQ(kept.col_idx, whole.col_idx) << at;
        ASSERT_EQ(kept.values.size(), whole.values.size()) << at;
        EXPECT_EQ(0, std::memcmp(kept.values.data(), whole.values.data(), sizeof(double) * whole.values.size())) << at;
      }
      RowProductShape other = shape;  // a shape of another product (one row fewer) is refused
      other.row_ptr = std::make_shared<DeviceArray<int32_t>>(shape.row_ptr->size() - 1, "test");
      EXPECT_THROW(row_product(*d, *d, d.get(), dinv.data(), -0.5, 0, nullptr, &other), Error) << what;
    }
    {  // the transpose: learned, then new values gathered through the kept order
      TransposeShape ts;
      const CsrMatrix t = download_csr(transpose(*d, 0, &ts));
      EXPECT_EQ(download_csr(transpose(*d, 0)).values, t.values) << what;
      ASSERT_TRUE(ts.order) << what;
      CsrMatrix b = a;
      for (size_t q = 0; q < b.values.size(); ++q) b.values[q] = 1.0 + double(q);  // each entry its own value
      const auto db = upload_csr_shared(b);
      const CsrMatrix whole = download_csr(transpose(*db, 0));
      const CsrMatrix gathered = download_csr(transpose(*db, 0, &ts));
      EXPECT_EQ(gathered.row_ptr, whole.row_ptr) << what;
      EXPECT_EQ(gathered.col_idx, whole.col_idx) << what;
      EXPECT_EQ(gathered.values, whole.values) << what;
      EXPECT_LE((dense(gathered) - dense(b).transpose()).cwiseAbs().maxCoeff(), 0.0) << what;
      const auto wider = upload_csr_shared(generate("poisson2d:9"));  // another matrix's pattern is refused
      EXPECT_THROW(transpose(*wider, 0, &ts), Error) << what;
    }
    EXPECT_TRUE(columns_sorted(c)) << what;
    EXPECT_EQ(c.col_idx, again.col_idx) << what;
    EXPECT_EQ(0, std::memcmp(c.values.data(), again.values.data(), sizeof(double) * c.values.size())) << what;
    const Eigen::MatrixXd A = dense(a);
    const Eigen::MatrixXd expected = -0.5 * A.diagonal().cwiseInverse().asDiagonal() * A * A + A;
    const double scale = A.cwiseAbs().maxCoeff() * A.cwiseAbs().maxCoeff();
    EXPECT_LE((dense(c) - expected).cwiseAbs().maxCoeff(), 64 * kEps * n * scale) << what;
  }
}

TEST_F(GpuPrecond, CoarsestSolveEqualsEigenLlt) {
  const CsrMatrix a = generate("poisson2d:16");  // 256 rows: one level, solved densely
  PreconditionerOptions o;
  o.coarse_rows = 256;
  const Built b = build(a, Preconditioner::amg, o, 2);
  ASSERT_EQ(b.m->report().levels.size(), 1u);
  const DenseBlock r = random_block(a.rows, 2, 3);
  const DenseBlock z = apply(*b.m, r);
  const Eigen::LLT<Eigen::MatrixXd> llt(dense(a));
  for (int j = 0; j < 2; ++j) {
    Eigen::VectorXd rj(a.rows);
    for (int32_t i = 0; i < a.rows; ++i) rj[i] = r.at(i, j);
    const Eigen::VectorXd zj = llt.solve(rj);
    for (int32_t i = 0; i < a.rows; ++i) EXPECT_NEAR(z.at(i, j), zj[i], 1e3 * kEps * a.rows * zj.cwiseAbs().maxCoeff());
  }
}

// z = q(D^-1 A) D^-1 r with 1 - lambda q(lambda) = T_d((theta - lambda) / delta) / T_d(theta / delta), evaluated
// through the eigen-decomposition of S = D^-1/2 A D^-1/2 (a route independent of the device's recurrence).
TEST_F(GpuPrecond, ChebyshevEqualsItsPolynomial) {
  auto chebyshev_t = [](int d, double x) {
    double t0 = 1, t1 = x;
    if (d == 0) return t0;
    for (int i = 1; i < d; ++i) std::tie(t0, t1) = std::make_pair(t1, 2 * x * t1 - t0);
    return t1;
  };
  for (const auto& [name, a] : std::vector<std::pair<std::string, CsrMatrix>>{
           {"poisson2d:12", generate("poisson2d:12")}, {"bcsstk01", input("bcsstk01.mtx")}, {"nos4", input("nos4.mtx")}})
    for (const int degree : {1, 2, 3, 5}) {
      const std::string what = name + " degree " + std::to_string(degree);
      PreconditionerOptions o;
      o.chebyshev_degree = degree;
      const Built b = build(a, Preconditioner::chebyshev, o, 2);
      const double lmin = b.m->report().lambda_min, lmax = b.m->report().lambda_max;
      ASSERT_GT(lmax, lmin) << what;
      const Eigen::MatrixXd A = dense(a);
      const Eigen::VectorXd droot = A.diagonal().cwiseSqrt().cwiseInverse();
      const Eigen::MatrixXd S = droot.asDiagonal() * A * droot.asDiagonal();
      const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> eig(S);
      const double theta = 0.5 * (lmax + lmin), delta = 0.5 * (lmax - lmin);
      Eigen::VectorXd q(a.rows);
      for (int32_t i = 0; i < a.rows; ++i) {
        const double l = eig.eigenvalues()[i];
        q[i] = (1 - chebyshev_t(degree, (theta - l) / delta) / chebyshev_t(degree, theta / delta)) / l;
      }
      const Eigen::MatrixXd M = droot.asDiagonal() * eig.eigenvectors() * q.asDiagonal() *
                                eig.eigenvectors().transpose() * droot.asDiagonal();
      const DenseBlock r = random_block(a.rows, 2, 11);
      const DenseBlock z = apply(*b.m, r);
      for (int j = 0; j < 2; ++j) {
        Eigen::VectorXd rj(a.rows);
        for (int32_t i = 0; i < a.rows; ++i) rj[i] = r.at(i, j);
        const Eigen::VectorXd zj = M * rj;
        const double scale = zj.cwiseAbs().maxCoeff();
        for (int32_t i = 0; i < a.rows; ++i) EXPECT_NEAR(z.at(i, j), zj[i], 1e4 * kEps * a.rows * scale) << what;
      }
    }
}

TEST_F(GpuPrecond, BlockJacobiEqualsEigenBlockInverses) {
  for (const auto& [name, a, b_wanted] : std::vector<std::tuple<std::string, CsrMatrix, int>>{
           {"bcsstk01 (detected)", input("bcsstk01.mtx"), 0},
           {"poisson2d:7, b = 4 (49 rows: a short last block)", generate("poisson2d:7"), 4},
           {"nos4, b = 1", input("nos4.mtx"), 1}}) {
    PreconditionerOptions o;
    o.block_size = b_wanted;
    const Built built = build(a, Preconditioner::block_jacobi, o, a.rows);
    const int b = built.m->report().block_size;
    ASSERT_GE(b, 1) << name;
    if (b_wanted) EXPECT_EQ(b, b_wanted) << name;
    DenseBlock identity(a.rows, a.rows, 0.0);
    for (int32_t i = 0; i < a.rows; ++i) identity.at(i, i) = 1.0;
    const DenseBlock z = apply(*built.m, identity);  // M^-1 itself
    const Eigen::MatrixXd A = dense(a);
    for (int32_t first = 0; first < a.rows; first += b) {
      const int m = std::min<int32_t>(b, a.rows - first);
      const Eigen::MatrixXd inv = A.block(first, first, m, m).inverse();
      for (int32_t i = 0; i < a.rows; ++i)
        for (int32_t j = 0; j < a.rows; ++j) {
          const bool inside = i >= first && i < first + m && j >= first && j < first + m;
          if (i < first || i >= first + m) continue;
          const double want = inside ? inv(i - first, j - first) : 0.0;
          ASSERT_NEAR(z.at(i, j), want, 1e3 * kEps * inv.cwiseAbs().maxCoeff() * b) << name << " entry " << i << "," << j;
        }
    }
  }
}

// Every preconditioner: x'My = y'Mx and x'Mx > 0 on random vectors; a k-column apply equals k single applies
// bitwise (deterministic mode); the same apply twice gives the same bits.
TEST_F(GpuPrecond, AppliesAreSymmetricPositiveAndColumnwise) {
  const std::vector<std::pair<std::string, CsrMatrix>> cases = {
      {"poisson2d:40", generate("poisson2d:40")}, {"jump3d:10", generate("jump3d:10")},
      {"bcsstk01", input("bcsstk01.mtx")},        {"nos6", input("nos6.mtx")},
      {"powerlaw:2000", generate("powerlaw:2000")}, {"1x1", generate("poisson2d:1")}};
  for (const auto& [name, a] : cases)
    for (const Preconditioner kind :
         {Preconditioner::jacobi, Preconditioner::block_jacobi, Preconditioner::chebyshev, Preconditioner::amg}) {
      const std::string what = name + " " + name_of(kind);
      PreconditionerOptions o;
      o.coarse_rows = 50;  // several levels even on small matrices
      const int k = 3;
      const Built b = build(a, kind, o, k);
      ASSERT_NE(b.m, nullptr) << what;
      const DenseBlock x = random_block(a.rows, k, 21), y = random_block(a.rows, k, 22);
      const DenseBlock mx = apply(*b.m, x), my = apply(*b.m, y), my2 = apply(*b.m, y);
      EXPECT_EQ(std::memcmp(my.data.data(), my2.data.data(), my.data.size() * sizeof(double)), 0) << what << ": not repeatable";
      const double n = a.rows;
      for (int j = 0; j < k; ++j) {
        const double xmy = column_dot(x, my, j), ymx = column_dot(y, mx, j);
        EXPECT_LE(std::abs(xmy - ymx), 100 * kEps * n * column_norm(x, j) * column_norm(my, j)) << what << " column " << j;
        EXPECT_GT(column_dot(x, mx, j), 0.0) << what << " column " << j;
        DenseBlock yj(a.rows, 1);
        for (int32_t i = 0; i < a.rows; ++i) yj.at(i, 0) = y.at(i, j);
        const DenseBlock mj = apply(*b.m, yj);
        // deterministic (build's operators are): the same bits, for every preconditioner (Chebyshev's and AMG's
        // operators then apply k columns as k SpMVs)
        for (int32_t i = 0; i < a.rows; ++i) ASSERT_EQ(mj.at(i, 0), my.at(i, j)) << what << " row " << i << ": not bitwise";
      }
    }
}

// The V-cycle as a stationary iteration, e <- (I - M^-1 A) e: the A-norm of the error per cycle (after five
// cycles) stays within the factor measured for each configuration on the H100 (2026-11-25, commit 7481a08;
// docs/perf-notes.md, "AMG's setup and auto's trial"). The issue's 0.2 holds on 3D Poisson with the defaults (0.192) and on 2D
// Poisson with two smoothings of P at omega = 1.5 / lambda_max and Chebyshev on [lambda_max / 8, lambda_max]
// (0.167); 2D's default is 0.297.
TEST_F(GpuPrecond, VCycleContractsTheError) {
  struct Config {
    std::string spec;
    AmgProlongator prolongator;
    AmgSmoother smoother;
    int degree;
    double ratio;
    double limit;  // measured + margin
    int p_smoothings = 1;
    double omega = 4.0 / 3.0;
  };
  const auto sm = AmgProlongator::smoothed;
  const auto cheb = AmgSmoother::chebyshev;
  for (const Config& cfg : {Config{"poisson3d:16", sm, cheb, 4, 8, 0.2}, Config{"poisson3d:16", sm, cheb, 3, 8, 0.2},
                            Config{"poisson3d:16", sm, cheb, 2, 20, 0.5}, Config{"poisson2d:64", sm, cheb, 3, 20, 0.36},
                            Config{"poisson2d:64", sm, cheb, 2, 20, 0.5}, Config{"poisson2d:64", sm, AmgSmoother::l1_jacobi, 2, 0, 0.9},
                            Config{"poisson2d:64", AmgProlongator::plain, cheb, 2, 20, 0.66},
                            Config{"poisson3d:16", AmgProlongator::plain, cheb, 2, 20, 0.5},
                            Config{"poisson2d:64", sm, cheb, 3, 8, 0.25, 2}, Config{"poisson3d:16", sm, cheb, 3, 8, 0.2, 2},
                            Config{"poisson2d:64", sm, cheb, 3, 8, 0.2, 2, 1.5}, Config{"poisson3d:16", sm, cheb, 3, 8, 0.2, 2, 1.5}}) {
      const std::string& spec = cfg.spec;
      const AmgProlongator prolongator = cfg.prolongator;
      const CsrMatrix a = generate(spec);
      PreconditionerOptions o;
      o.prolongator = prolongator;
      o.smoother = cfg.smoother;
      o.smoother_degree = cfg.degree;
      o.prolongator_smoothings = cfg.p_smoothings;
      o.prolongator_omega = cfg.omega;
      if (cfg.ratio > 0) o.smoother_ratio = cfg.ratio;
      o.coarse_rows = 100;
      const Built b = build(a, Preconditioner::amg, o, 1);
      ASSERT_GE(b.m->report().levels.size(), 2u) << spec;
      const auto A = to_eigen(a);
      DenseBlock e = random_block(a.rows, 1, 5);
      auto a_norm = [&](const DenseBlock& v) {
        const Eigen::Map<const Eigen::VectorXd> ev(v.data.data(), v.rows);
        return std::sqrt(ev.dot(A * ev));
      };
      double before = a_norm(e), ratio = 1;
      for (int cycle = 0; cycle < 6; ++cycle) {
        DenseBlock ae(a.rows, 1);
        const Eigen::Map<const Eigen::VectorXd> ev(e.data.data(), e.rows);
        Eigen::Map<Eigen::VectorXd>(ae.data.data(), a.rows) = A * ev;
        const DenseBlock c = apply(*b.m, ae);
        for (int32_t i = 0; i < a.rows; ++i) e.at(i, 0) -= c.at(i, 0);
        const double after = a_norm(e);
        ratio = after / before;
        before = after;
      }
      std::printf("contraction %s %s x%d omega %.3g %s %d ratio %g: %.4f\n", spec.c_str(), name_of(prolongator),
                  cfg.p_smoothings, cfg.omega, name_of(cfg.smoother), cfg.degree, cfg.ratio, ratio);
      EXPECT_LE(ratio, cfg.limit) << spec << " " << name_of(prolongator) << " " << name_of(cfg.smoother) << " "
                                  << cfg.degree << " ratio " << cfg.ratio << ": contraction per cycle";
    }
}

using spcg::test::expect_true_residual;

int max_iterations(const SolveResult& r) {
  int m = 0;
  for (const auto& c : r.columns) m = std::max(m, c.iterations);
  return m;
}

// Through the public solver: every preconditioner with cg, multi-cg and block-cg converges, with a true
// residual at the tolerance; AMG, and block-Jacobi on node-structured files, need at most Jacobi's iterations.
TEST_F(GpuPrecond, PcgConvergesWithEveryPreconditionerAndSolver) {
  const std::vector<std::pair<std::string, CsrMatrix>> cases = {
      {"bcsstk01", input("bcsstk01.mtx")}, {"bcsstk21", input("bcsstk21.mtx")}, {"nos4", input("nos4.mtx")},
      {"nos6", input("nos6.mtx")},         {"fv1", input("fv1.mtx")},           {"jump3d:12", generate("jump3d:12")},
      {"poisson2d:60", generate("poisson2d:60")}};
  for (const auto& [name, a] : cases)
    for (const SolverKind solver : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
      const int k = solver == SolverKind::cg ? 1 : 3;
      std::map<Preconditioner, int> its;
      for (const Preconditioner kind : {Preconditioner::jacobi, Preconditioner::block_jacobi, Preconditioner::chebyshev,
                                        Preconditioner::amg, Preconditioner::automatic}) {
        const std::string what = name + " " + name_of(solver) + " " + name_of(kind);
        SolverOptions so;
        so.solver = solver, so.expected_columns = k, so.precond = kind, so.backend = Backend::gpu;
        so.iteration.stop = {1e-8, 0, 20000};
        so.precond_options.coarse_rows = 100;
        Solver s(a, so);
        DenseBlock x(a.rows, k, std::numeric_limits<double>::quiet_NaN());  // output only: poisoned
        const SolveResult r = s.solve(RhsKind::random, k, 9, x);
        ASSERT_TRUE(r.all_converged()) << what << ": " << to_string(r.columns[0].status);
        // ||b - A x|| / ||b|| recomputed on the host from the returned x (random_block: the solver's B, bit for
        // bit), held to rtol with a small factor for the gap between the recursive and the true residual, plus
        // the floor rounding puts under any computed x (eps sqrt(n) ||A|| ||x|| / ||b||)
        expect_true_residual(a, random_block(a.rows, k, 9), x, so.iteration.stop.rtol, what);
        its[kind] = max_iterations(r);
      }
      const std::string what = name + " " + name_of(solver);
      EXPECT_LE(its[Preconditioner::amg], its[Preconditioner::jacobi]) << what << ": AMG vs Jacobi";
      EXPECT_LE(its[Preconditioner::chebyshev], its[Preconditioner::jacobi]) << what << ": Chebyshev vs Jacobi";
      // block-Jacobi is meant to help where it found the node blocks (bcsstk01: 6 unknowns per node); on
      // bcsstk21, whose rows do not come in aligned runs, it takes contiguous 4 x 4 blocks and may not
      if (name == "bcsstk01")
        EXPECT_LE(its[Preconditioner::block_jacobi], its[Preconditioner::jacobi]) << what << ": block-Jacobi vs Jacobi";
    }
}

TEST_F(GpuPrecond, DeterministicSolvesAreBitwiseRepeatable) {
  const CsrMatrix a = generate("jump3d:12");
  for (const Preconditioner kind : {Preconditioner::block_jacobi, Preconditioner::chebyshev, Preconditioner::amg})
    for (const SolverKind solver : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
      SolverOptions so;
      so.solver = solver, so.expected_columns = 4, so.precond = kind, so.backend = Backend::gpu;
      so.iteration.deterministic = true;
      so.kernel = "csr-vector";  // auto's timed trial may pick another kernel in another setup
      so.precond_options.coarse_rows = 100;
      Solver s(a, so);
      DenseBlock x1, x2;
      const SolveResult r1 = s.solve(RhsKind::random, 4, 3, x1), r2 = s.solve(RhsKind::random, 4, 3, x2);
      EXPECT_TRUE(r1.all_converged());
      EXPECT_EQ(std::memcmp(x1.data.data(), x2.data.data(), x1.data.size() * sizeof(double)), 0)
          << name_of(kind) << " " << name_of(solver);
      Solver again(a, so);  // a fresh setup gives the same hierarchy, so the same bits
      DenseBlock x3;
      again.solve(RhsKind::random, 4, 3, x3);
      EXPECT_EQ(std::memcmp(x1.data.data(), x3.data.data(), x1.data.size() * sizeof(double)), 0)
          << name_of(kind) << " " << name_of(solver) << ": new setup";
    }
}

// Planted failures: an indefinite matrix with a positive diagonal never reports converged, and says why; an
// indefinite diagonal block is named by block-Jacobi's setup. Each case has one outcome. The shifted Laplacian
// (diagonal 1.5, off-diagonals -1: about a third of its eigenvalues negative) passes block-Jacobi's setup (its
// 2 x 2 blocks [[1.5, -1], [-1, 1.5]] are SPD) and Chebyshev's (the residual polynomial keeps q(lambda) > 0 on
// negative lambda too, so M stays SPD): the solves must end in a breakdown (p'Ap <= 0), the block solver's
// through its multi-cg fallback. AMG's Galerkin coarse level of it is indefinite (its smooth modes are the
// negative ones): the setup refuses it by the coarsest Cholesky.
TEST_F(GpuPrecond, PlantedFailuresReportTheirStatus) {
  CsrMatrix indefinite = generate("poisson2d:20");  // diagonal 4, eigenvalues in (0, 8): shift by -2.5
  for (int32_t i = 0; i < indefinite.rows; ++i)
    for (int32_t p = indefinite.row_ptr[i]; p < indefinite.row_ptr[i + 1]; ++p)
      if (indefinite.col_idx[p] == i) indefinite.values[p] -= 2.5;
  for (const Preconditioner kind : {Preconditioner::block_jacobi, Preconditioner::chebyshev, Preconditioner::amg})
    for (const int coarse_rows : {60, 400})
      for (const SolverKind solver : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
        if (kind != Preconditioner::amg && coarse_rows != 60) continue;
        const std::string what = std::string(name_of(kind)) + " " + name_of(solver) + " coarse rows " + std::to_string(coarse_rows);
        SolverOptions so;
        so.solver = solver, so.expected_columns = 2, so.precond = kind, so.backend = Backend::gpu;
        so.precond_options.coarse_rows = coarse_rows;  // 400: the coarsest level is A itself
        so.precond_options.block_size = 2;
        so.iteration.stop.max_iterations = 3000;
        if (kind == Preconditioner::amg) {
          try {
            Solver s(indefinite, so);
            ADD_FAILURE() << what << ": AMG's setup accepted an indefinite coarsest level";
          } catch (const InputError& e) {
            const std::string m = e.what();
            EXPECT_NE(m.find("amg: the coarsest level ("), std::string::npos) << what << ": " << m;
            EXPECT_NE(m.find(" rows) is not positive definite (its Cholesky factorisation failed)"), std::string::npos)
                << what << ": " << m;
            if (coarse_rows == 400) EXPECT_NE(m.find("(400 rows)"), std::string::npos) << what << ": " << m;
          }
          continue;
        }
        Solver s(indefinite, so);
        DenseBlock x(indefinite.rows, 2, std::numeric_limits<double>::quiet_NaN());
        const SolveResult r = s.solve(RhsKind::random, 2, 1, x);
        EXPECT_FALSE(r.all_converged()) << what;
        for (const auto& c : r.columns) {
          EXPECT_EQ(c.status, ColumnStatus::breakdown) << what << ": " << to_string(c.status);
          EXPECT_LT(c.iterations, 3000) << what;
        }
        for (double v : x.data) ASSERT_TRUE(std::isfinite(v)) << what << ": x not written or not finite";
        if (solver == SolverKind::block_cg) {
          EXPECT_EQ(r.fallback_columns, 2) << what;
          EXPECT_TRUE(r.fallback_reason == "W'AW of the block is not positive definite; finished by multi-cg" ||
                      r.fallback_reason == "P'AP of the block lost positive definiteness; finished by multi-cg")
              << what << ": " << r.fallback_reason;
        }
      }
  // rows 3-4 (block 2 of size 2) form [[1, 2], [2, 1]] (positive diagonal, indefinite); the rest is the identity
  CsrMatrix m;
  m.rows = m.cols = 6;
  m.row_ptr = {0, 1, 2, 4, 6, 7, 8};
  m.col_idx = {0, 1, 2, 3, 2, 3, 4, 5};
  m.values = {1, 1, 1, 2, 2, 1, 1, 1};
  SolverOptions so;
  so.precond = Preconditioner::block_jacobi, so.backend = Backend::gpu;
  so.precond_options.block_size = 2;
  try {
    Solver s(m, so);
    FAIL() << "block-Jacobi accepted an indefinite block";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("diagonal block 2 (rows 3..4) is not positive definite"), std::string::npos)
        << e.what();
  }
}

// Degenerate shapes through the public solver: 0 x 0 and 1 x 1 with every preconditioner and solver.
// auto's short Jacobi-CG trial: a large 2D Laplacian (Jacobi-CG ~750 iterations) gets AMG, a large easier
// system (a 3D Laplacian shifted by ~2% of its diagonal: ~100) does not, jumping coefficients get AMG without a
// trial, and a small system never runs one; each says why.
TEST_F(GpuPrecond, AutoTakesAmgWhereTheTrialPredictsManyIterations) {
  const CsrMatrix hard = generate("poisson2d:400");
  CsrMatrix easy = generate("poisson3d:48");
  for (int32_t i = 0; i < easy.rows; ++i)
    for (int32_t p = easy.row_ptr[i]; p < easy.row_ptr[i + 1]; ++p)
      if (easy.col_idx[p] == i) easy.values[p] += 0.1 + 0.05 * (i % 3);  // not constant
  const Built h = build(hard, Preconditioner::automatic), e = build(easy, Preconditioner::automatic),
              jump = build(generate("jump3d:48"), Preconditioner::automatic),
              small = build(generate("poisson2d:100"), Preconditioner::automatic);
  ASSERT_TRUE(h.m && e.m && jump.m && small.m);
  EXPECT_EQ(h.m->report().kind, Preconditioner::amg) << h.m->report().reason;
  EXPECT_NE(h.m->report().reason.find("Jacobi-CG trial"), std::string::npos) << h.m->report().reason;
  EXPECT_EQ(jump.m->report().kind, Preconditioner::amg) << jump.m->report().reason;
  EXPECT_NE(jump.m->report().reason.find("coefficient jumps"), std::string::npos) << jump.m->report().reason;
  EXPECT_EQ(e.m->report().kind, Preconditioner::jacobi) << e.m->report().reason;
  EXPECT_NE(e.m->report().reason.find("too few for AMG"), std::string::npos) << e.m->report().reason;
  EXPECT_EQ(small.m->report().kind, Preconditioner::none) << small.m->report().reason;
  EXPECT_NE(small.m->report().reason.find("rows < 100000"), std::string::npos) << small.m->report().reason;
  EXPECT_NE(small.m->report().reason.find("constant diagonal"), std::string::npos) << small.m->report().reason;
}

// The smoother's steps fused into the DIA product's epilogue (FusedSmoothing) give the bits of the product and the
// step run apart: AMG (level 0 DIA, FP64 and its FP32 hierarchy) and Chebyshev, on 7- and 27-point stencils and
// coefficient jumps; the fused run is the one the bytes model counts 16 B a row less a step for.
TEST_F(GpuPrecond, FusedSmoothingIsTheUnfusedBitForBit) {
  for (const std::string spec : {"poisson3d:96", "poisson3d27:64", "jump3d:96"}) {
    const CsrMatrix a = generate(spec);
    const DenseBlock r = random_block(a.rows, 1, 3);
    for (const Preconditioner kind : {Preconditioner::amg, Preconditioner::chebyshev})
      for (const Precision precision : {Precision::double_precision, Precision::mixed}) {
        if (kind == Preconditioner::chebyshev && precision == Precision::mixed) continue;  // (AMG's levels only)
        const std::string what = spec + " " + name_of(kind) + " " + name_of(precision);
        DenseBlock z[2];
        double bytes[2];
        for (const bool fuse : {true, false}) {
          PreconditionerOptions o;
          o.fuse_smoothing = fuse;
          Built b;
          b.a = std::make_unique<CsrMatrix>(a);
          b.setup = std::make_unique<MatrixSetup>(*b.a);
          OperatorOptions oo;
          oo.deterministic = true;
          b.op = make_operator("auto", *b.setup, oo);
          ASSERT_EQ(b.op->chosen(1), "dia") << what;
          PreconditionerInputs in{*b.setup, *b.op, oo, "test matrix", 1};
          in.precision = precision;
          b.m = make_preconditioner(kind, o, in);
          if (kind == Preconditioner::amg)
            EXPECT_EQ(b.m->report().levels[0].kernel, precision == Precision::mixed ? "dia-f32" : "dia") << what;
          z[fuse ? 0 : 1] = apply(*b.m, r);
          bytes[fuse ? 0 : 1] = b.m->bytes_per_apply(1);
        }
        ASSERT_EQ(z[0].data.size(), z[1].data.size()) << what;
        EXPECT_EQ(std::memcmp(z[0].data.data(), z[1].data.data(), z[0].data.size() * sizeof(double)), 0)
            << what << ": fused and apart differ";
        EXPECT_FALSE(std::isnan(z[0].data[0])) << what;
        EXPECT_LT(bytes[0], bytes[1]) << what << ": the fused run's bytes";
      }
  }
}

// Where a kernel reads the residual in place (dia: FusedSmoothing's reads_residual_in_place), res = b - A x in one
// launch gives the bits of b copied into res and res -= A x, and a smoothing step reading b in res's place those of
// the step after the copy: the 7-point stencil (the row sweep) and the 27-point one (the plane march), FP64 and FP32
// values, NaN-poisoned outputs. A kernel without it (csr-vector) declines both and runs nothing.
TEST_F(GpuPrecond, ResidualReadInPlaceIsTheCopyAndTheProductBitForBit) {
  for (const std::string spec : {"poisson3d:33", "poisson3d27:40"}) {
    const CsrMatrix a = generate(spec);
    const size_t n = static_cast<size_t>(a.rows);
    const MatrixSetup setup(a);
    const DenseBlock hb = random_block(a.rows, 1, 31), hx = random_block(a.rows, 1, 32), hd = random_block(a.rows, 1, 33);
    std::vector<double> hscale(n);
    for (size_t i = 0; i < n; ++i) hscale[i] = 0.1 + 0.01 * double(i % 7);
    const DeviceArray<double> b(hb.data), x(hx.data), d(hd.data), scale(hscale);
    const std::vector<double> nan(n, std::numeric_limits<double>::quiet_NaN());
    for (const char* kernel : {"dia", "dia-f32", "csr-vector"}) {
      const std::string what = spec + " " + kernel;
      const auto op = make_operator(kernel, setup);
      const bool offered = std::string(kernel) != "csr-vector";
      EXPECT_EQ(reads_residual_in_place(*op), offered) << what;
      // res = b - A x
      DeviceArray<double> one(nan), two(nan);
      EXPECT_EQ(residual_step(*op, b.data(), x.data(), one.data(), 0), offered) << what;
      CHECK_CUDA(cudaMemcpy(two.data(), b.data(), b.bytes(), cudaMemcpyDeviceToDevice));
      op->apply(-1.0, x.data(), 1.0, two.data(), 1, 0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      if (!offered) {
        for (double v : one.download()) ASSERT_TRUE(std::isnan(v)) << what << ": a declined residual wrote res";
        continue;
      }
      const std::vector<double> r1 = one.download(), r2 = two.download();
      EXPECT_EQ(std::memcmp(r1.data(), r2.data(), n * sizeof(double)), 0) << what << ": the residual's bits";
      // a fused step reading b in res's place, against the copy then the step
      DeviceArray<double> res1(nan), res2(nan), out1(nan), out2(nan), x1(hx.data), x2(hx.data);
      ASSERT_TRUE(smoothing_step(*op, d.data(), out1.data(), res1.data(), b.data(), x1.data(), scale.data(), 0.7, 0.3, 0))
          << what;
      CHECK_CUDA(cudaMemcpy(res2.data(), b.data(), b.bytes(), cudaMemcpyDeviceToDevice));
      ASSERT_TRUE(smoothing_step(*op, d.data(), out2.data(), res2.data(), nullptr, x2.data(), scale.data(), 0.7, 0.3, 0))
          << what;
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
      for (const auto& [p, q, name] : {std::make_tuple(&res1, &res2, "res"), std::make_tuple(&out1, &out2, "d"),
                                       std::make_tuple(&x1, &x2, "x")}) {
        const std::vector<double> u = p->download(), v = q->download();
        EXPECT_EQ(std::memcmp(u.data(), v.data(), n * sizeof(double)), 0) << what << ": the step's " << name;
        EXPECT_FALSE(std::isnan(u[n / 2])) << what << ": " << name << " not written";
      }
    }
  }
}

// An operator that runs its kernel's products and fused steps but declines to read a residual in place: the path
// apply_polynomial and the V-cycle take with every kernel that does not (the copy of b into res).
class DeclinesResidualInPlace final : public LinearOperator, public FusedSmoothing {
 public:
  explicit DeclinesResidualInPlace(const LinearOperator& a) : LinearOperator(a.rows(), a.cols(), a.nnz()), a_(a) {}
  std::string name() const override { return a_.name() + " (residual copied)"; }
  double bytes_per_apply(int k) const override { return a_.bytes_per_apply(k); }
  bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                      const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const override {
    return !res_in && spcg::smoothing_step(a_, d_in, d_out, res, nullptr, x, scale, c1, c2, s, rows_apart);
  }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    a_.apply(alpha, x, beta, y, k, s);
  }

 private:
  const LinearOperator& a_;
};

// apply_polynomial where the operator reads the residual in place (no copy of b; from x = 0 the first steps read b)
// gives the bits of the copying path, the same kernel declining: Chebyshev of degree 1-3, from x = 0 and from a
// given x, its steps fused or apart, dia and dia-f32 on the row sweep and the plane march; x NaN-poisoned where
// x = 0 is written, not read.
TEST_F(GpuPrecond, PolynomialReadingTheResidualInPlaceIsTheCopyingPathBitForBit) {
  for (const std::string spec : {"poisson3d:33", "poisson3d27:40"}) {
    const CsrMatrix a = generate(spec);
    const size_t n = static_cast<size_t>(a.rows);
    const MatrixSetup setup(a);
    const DenseBlock hb = random_block(a.rows, 1, 41), hx = random_block(a.rows, 1, 42);
    std::vector<double> hscale(n);
    for (size_t i = 0; i < n; ++i) hscale[i] = 1.0 / a.values[static_cast<size_t>(a.row_ptr[i])] * (0.9 + 0.01 * double(i % 5));
    const DeviceArray<double> b(hb.data), scale(hscale);
    const std::vector<double> nan(n, std::numeric_limits<double>::quiet_NaN());
    for (const char* kernel : {"dia", "dia-f32"}) {
      const auto op = make_operator(kernel, setup);
      const DeclinesResidualInPlace copying(*op);
      ASSERT_TRUE(reads_residual_in_place(*op)) << spec << " " << kernel;
      ASSERT_FALSE(reads_residual_in_place(copying)) << spec << " " << kernel;
      for (const int degree : {1, 2, 3})
        for (const bool x_is_zero : {true, false})
          for (const bool fused : {true, false}) {
            const std::string what = spec + " " + kernel + " degree " + std::to_string(degree) +
                                     (x_is_zero ? " from 0" : " from x") + (fused ? " fused" : " apart");
            const PolynomialSteps steps = PolynomialSteps::chebyshev(0.05, 2.0, degree);
            std::vector<double> out[2];
            for (const bool in_place : {true, false}) {
              const std::vector<double> x_in = x_is_zero ? nan : std::vector<double>(hx.data.begin(), hx.data.end());
              DeviceArray<double> x(x_in), res(nan), d(nan), d_next(nan);
              apply_polynomial(in_place ? static_cast<const LinearOperator&>(*op) : copying, scale.data(), steps, b.data(),
                               x.data(), x_is_zero, res.data(), d.data(), 1, 0, fused ? d_next.data() : nullptr);
              ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << what;
              out[in_place ? 0 : 1] = x.download();
            }
            EXPECT_EQ(std::memcmp(out[0].data(), out[1].data(), n * sizeof(double)), 0) << what;
            EXPECT_FALSE(std::isnan(out[0][n / 2])) << what << ": x not written";
          }
    }
  }
}

// The copy AMG offers the iteration (HoldsFp32Copy): its product is the solver's bit for bit where every value is
// an FP32 number (27- and 7-point stencils, each in the row sweep's or the plane march's order), and cg on it with
// the FP64 true residual beside it converges like cg on the FP64 product: the iterations within one (the dot fused
// into the product may sum in another order) and both answers at rtol on the host. A hierarchy in FP64 offers none.
TEST_F(GpuPrecond, AmgFp32CopyOfTheProductIsTheProduct) {
  for (const std::string spec : {"poisson3d27:40", "poisson3d:33"}) {
    const CsrMatrix a = generate(spec);
    for (const Precision precision : {Precision::double_precision, Precision::mixed}) {
      const std::string what = spec + " " + name_of(precision);
      PreconditionerOptions po;
      po.coarse_rows = 100;
      const Built b = build(a, Preconditioner::amg, po, 1, "dia", precision);
      const auto* holder = dynamic_cast<const HoldsFp32Copy*>(b.m.get());
      ASSERT_NE(holder, nullptr) << what;
      const LinearOperator* copy = holder->fp32_copy_of_product();
      if (precision == Precision::double_precision) {
        EXPECT_EQ(copy, nullptr) << what << ": an FP64 hierarchy offers a copy";
        continue;
      }
      ASSERT_NE(copy, nullptr) << what;
      EXPECT_EQ(copy->chosen(1), "dia-f32") << what;
      ASSERT_EQ(copy->rows(), b.op->rows());
      const DenseBlock xr = random_block(a.rows, 1, 11);
      DeviceBlock X(a.rows, 1), Y64(a.rows, 1), Y32(a.rows, 1);
      X.values.upload(xr.data);
      Y64.values.upload(HostVector<double>(a.rows, std::numeric_limits<double>::quiet_NaN()));
      Y32.values.upload(HostVector<double>(a.rows, std::numeric_limits<double>::quiet_NaN()));
      b.op->apply(1.0, X, 0.0, Y64);
      copy->apply(1.0, X, 0.0, Y32);
      const auto y64 = Y64.values.download<HostVector<double>>(), y32 = Y32.values.download<HostVector<double>>();
      EXPECT_EQ(std::memcmp(y64.data(), y32.data(), y64.size() * sizeof(double)), 0) << what << ": the copy's product";
      EXPECT_FALSE(std::isnan(y32[0])) << what;
      const DenseBlock rhs = random_block(a.rows, 1, 5);
      SolveOptions so;
      so.stop = {1e-10, 0, 500};
      so.time_kernels = true;
      int iterations[2] = {0, 0};
      for (const bool on_copy : {false, true}) {
        DeviceBlock B(a.rows, 1), Xs(a.rows, 1);
        B.values.upload(rhs.data);
        Xs.values.upload(HostVector<double>(a.rows, 0.0));
        const MixedPrecisionOperator mixed(*b.op, *copy, true);
        const SolveResult r = on_copy ? solve_cg(mixed, b.m.get(), B, Xs, so) : solve_cg(*b.op, b.m.get(), B, Xs, so);
        ASSERT_TRUE(r.all_converged()) << what << (on_copy ? " on the copy" : "");
        EXPECT_EQ(r.residual_replacements, 0) << what;
        // q = A p read the copy's bytes, not A's (the kernel table's model)
        const auto spmv = std::find_if(r.kernels.begin(), r.kernels.end(), [](const KernelStat& k) { return k.name == "spmv"; });
        ASSERT_NE(spmv, r.kernels.end()) << what;
        EXPECT_DOUBLE_EQ(spmv->bytes_per_call, (on_copy ? copy : b.op.get())->bytes_per_apply(1)) << what;
        DenseBlock x(a.rows, 1);
        x.data = Xs.values.download<HostVector<double>>();
        expect_true_residual(a, rhs, x, so.stop.rtol, what + (on_copy ? " on the copy" : ""));
        iterations[on_copy ? 1 : 0] = r.columns[0].iterations;
      }
      EXPECT_LE(std::abs(iterations[1] - iterations[0]), 1) << what;
      EXPECT_LT(copy->bytes_per_apply(1), b.op->bytes_per_apply(1)) << what;
    }
  }
}

// A general preconditioner's PCG applies M once an iteration, at its start: none at a (re)start from the true
// residual, so none for a claim the true residual confirms and none left unused after the last iteration (before,
// one more at the start and one for every confirmation: AMG-PCG's 14 iterations ran 16 V-cycles). An FP32 copy of
// values that are not FP32 numbers (Poisson x 0.1) iterating to 1e-12 claims early and is restarted, FP64's claim
// stands; each answer at rtol on the host.
TEST_F(GpuPrecond, PcgAppliesThePreconditionerOnceAnIterationAndNeverForARestart) {
  CsrMatrix a = generate("poisson3d:24");
  for (double& v : a.values) v *= 0.1;
  const MatrixSetup setup(a);
  const auto copy = make_operator("dia-f32", setup);
  const DenseBlock rhs = random_block(a.rows, 1, 17);
  for (const Preconditioner kind : {Preconditioner::chebyshev, Preconditioner::amg}) {
    PreconditionerOptions po;
    po.coarse_rows = 100;
    const Built b = build(a, kind, po, 1, "dia");
    for (const bool on_copy : {false, true}) {
      const std::string what = std::string(name_of(kind)) + (on_copy ? " on the FP32 copy" : " in FP64");
      DeviceBlock B(a.rows, 1), X(a.rows, 1);
      B.values.upload(rhs.data);
      X.values.upload(HostVector<double>(a.rows, 0.0));
      SolveOptions so;
      so.stop = {1e-12, 0, 2000};
      so.time_kernels = true;
      const MixedPrecisionOperator mixed(*b.op, *copy, false);
      const SolveResult r = on_copy ? solve_cg(mixed, b.m.get(), B, X, so) : solve_cg(*b.op, b.m.get(), B, X, so);
      ASSERT_TRUE(r.all_converged()) << what << ": " << to_string(r.columns[0].status);
      if (on_copy) EXPECT_GE(r.residual_replacements, 1) << what << ": the copy's claim was never rejected";
      auto calls = [&](const char* name) {
        const auto it = std::find_if(r.kernels.begin(), r.kernels.end(), [&](const KernelStat& k) { return k.name == name; });
        return it == r.kernels.end() ? int64_t{-1} : it->calls;
      };
      ASSERT_GT(calls("spmv"), 0) << what;
      EXPECT_EQ(calls("precond"), calls("spmv")) << what << ", " << r.residual_replacements << " restart(s)";
      DenseBlock x(a.rows, 1);
      x.data = X.values.download<HostVector<double>>();
      expect_true_residual(a, rhs, x, so.stop.rtol, what);
      if (on_copy) continue;
      // the textbook order (the Thrust reference: M after x and r, p = z at the start) takes the same iterations
      DeviceBlock Xt(a.rows, 1);
      Xt.values.upload(HostVector<double>(a.rows, 0.0));
      SolveOptions to = so;
      to.vector_ops = VectorOps::thrust;
      const SolveResult t = solve_cg(*b.op, b.m.get(), B, Xt, to);
      ASSERT_TRUE(t.all_converged()) << what << " (thrust)";
      EXPECT_LE(std::abs(t.columns[0].iterations - r.columns[0].iterations), 1)
          << what << ": thrust " << t.columns[0].iterations << ", fused " << r.columns[0].iterations;
    }
  }
}

// M not positive definite (here -I) stops the general PCG at its first r'z, before any step: precond_not_positive,
// no iteration, x as it came in, for one column (cg) and two (multi-cg).
TEST_F(GpuPrecond, PcgStopsAtTheFirstNonPositiveRz) {
  class NegatedIdentity final : public PreconditionerOp {
   public:
    explicit NegatedIdentity(const LinearOperator& identity) : PreconditionerOp(identity.rows()), identity_(identity) {}
    void apply(const double* R, double* Z, int k, cudaStream_t s) const override { identity_.apply(-1.0, R, 0.0, Z, k, s); }
    double bytes_per_apply(int k) const override { return identity_.bytes_per_apply(k); }

   private:
    const LinearOperator& identity_;
  };
  const CsrMatrix a = generate("poisson3d:20");
  CsrMatrix eye;
  eye.rows = eye.cols = a.rows;
  for (int32_t i = 1; i <= a.rows; ++i) eye.row_ptr.push_back(i);  // (row_ptr starts as {0})
  for (int32_t i = 0; i < a.rows; ++i) eye.col_idx.push_back(i), eye.values.push_back(1.0);
  const MatrixSetup setup(a), eye_setup(eye);
  const auto op = make_operator("dia", setup);
  const auto eye_op = make_operator("csr-vector", eye_setup);
  const NegatedIdentity minus_identity(*eye_op);
  for (const int k : {1, 2}) {
    const std::string what = std::to_string(k) + " column(s)";
    const DenseBlock rhs = random_block(a.rows, k, 23), x0 = random_block(a.rows, k, 24);
    DeviceBlock B(a.rows, k), X(a.rows, k);
    B.values.upload(rhs.data);
    X.values.upload(x0.data);
    SolveOptions so;
    so.stop = {1e-8, 0, 100};
    const SolveResult r = k == 1 ? solve_cg(*op, &minus_identity, B, X, so) : solve_multi_cg(*op, &minus_identity, B, X, so);
    ASSERT_EQ(r.columns.size(), static_cast<size_t>(k)) << what;
    for (const ColumnResult& c : r.columns) {
      EXPECT_EQ(c.status, ColumnStatus::precond_not_positive) << what << ": " << to_string(c.status);
      EXPECT_EQ(c.iterations, 0) << what;
    }
    const auto x = X.values.download<HostVector<double>>();
    EXPECT_EQ(std::memcmp(x.data(), x0.data.data(), x0.data.size() * sizeof(double)), 0) << what << ": x moved";
  }
}

// A coarse level whose CSR does not fit in L2 (past auto's 32 MiB) takes SELL (its rows are regular), a small one
// csr-vector (a warp a row keeps the GPU busy where SELL's warp per 32 rows would leave it idle), in FP64 and in
// the FP32 hierarchy; R and P take the hierarchy's precision; the solve through those levels converges to the
// host's residual with the iterations of the FP64 hierarchy.
TEST_F(GpuPrecond, LargeCoarseLevelsTakeSellSmallOnesCsrVector) {
  const CsrMatrix a = generate("poisson3d:128");  // level 1: ~189k rows, ~6.3M entries (~76 MB); level 2: ~2.7k rows
  const DenseBlock b = random_block(a.rows, 1, 5);
  int iterations[2] = {0, 0};
  for (const Precision p : {Precision::double_precision, Precision::mixed}) {
    const bool fp32 = p == Precision::mixed;
    const std::string what = name_of(p);
    SolverOptions so;
    so.precond = Preconditioner::amg, so.precision = p;
    Solver s(a, so);
    ASSERT_NE(s.preconditioner(), nullptr) << what;
    const std::vector<AmgLevelReport>& levels = s.preconditioner()->levels;
    ASSERT_GE(levels.size(), 4u) << what;
    ASSERT_GT(12.0 * double(levels[1].nnz), 32.0 * (1 << 20)) << what << ": level 1 fits in L2";
    EXPECT_EQ(levels[1].kernel, fp32 ? "sell-f32" : "sell") << what;
    EXPECT_EQ(levels[levels.size() - 2].kernel, fp32 ? "csr-vector-f32" : "csr-vector") << what;
    EXPECT_EQ(s.precision_reason().find("R and P") != std::string::npos, fp32) << what << ": " << s.precision_reason();
    DenseBlock x(a.rows, 1, 0.0);
    const SolveResult r = s.solve(b, x);
    EXPECT_TRUE(r.all_converged()) << what;
    expect_true_residual(a, b, x, so.iteration.stop.rtol, what);
    iterations[fp32 ? 1 : 0] = r.columns[0].iterations;
  }
  EXPECT_LE(iterations[1], iterations[0] + 1) << "the FP32 hierarchy's iterations";
}

// Not enough GPU memory for the hierarchy: a DeviceMemoryError that names AMG's level and the sizes (needed,
// free), not a crash or a CUDA error; the memory is usable again afterwards.
TEST_F(GpuPrecond, AmgOutOfMemoryIsAClearError) {
  const CsrMatrix a = generate("poisson3d:64");  // A P alone needs ~85 MB
  // The same setup once with memory to spare: CUDA loads each kernel on its first launch (lazy loading), which
  // itself needs device memory; in a fresh process (ctest runs each test alone) that first launch inside the
  // 48 MiB left below failed as a launch error (CudaError, out of memory, at amg_kernels.cu) instead of the
  // allocation this test is about.
  { const Built warm = build(a, Preconditioner::amg); }
  release_idle_device_memory();
  {
    Built b = build(a, Preconditioner::jacobi);  // the matrix and its operator first
    const size_t keep = size_t{48} << 20;
    const size_t free_bytes = device_memory_info().free_bytes;
    ASSERT_GT(free_bytes, keep);
    DeviceArray<char> rest(free_bytes - keep, "test: all but 48 MiB of the device");
    PreconditionerInputs in{*b.setup, *b.op, OperatorOptions{}, "poisson3d:64", 1};
    try {
      make_preconditioner(Preconditioner::amg, PreconditionerOptions{}, in);
      FAIL() << "the hierarchy fitted in 48 MiB";
    } catch (const DeviceMemoryError& e) {
      const std::string m = e.what();
      for (const char* text : {"amg setup (level 0", "not enough GPU memory", "needed", "free of"})
        EXPECT_NE(m.find(text), std::string::npos) << text << " in: " << m;
    }
  }
  release_idle_device_memory();
  const Built again = build(a, Preconditioner::amg);
  EXPECT_EQ(again.m->report().kind, Preconditioner::amg);
}

TEST_F(GpuPrecond, EmptyAndOneRowSystems) {
  for (const std::string spec : {"0x0", "poisson2d:1"}) {
    const CsrMatrix a = spec == "0x0" ? CsrMatrix{} : generate(spec);
    for (const Preconditioner kind : {Preconditioner::jacobi, Preconditioner::block_jacobi, Preconditioner::chebyshev,
                                      Preconditioner::amg, Preconditioner::automatic})
      for (const SolverKind solver : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
        SolverOptions so;
        so.solver = solver, so.expected_columns = 2, so.precond = kind, so.backend = Backend::gpu;
        Solver s(a, so);
        DenseBlock x;
        const SolveResult r = s.solve(RhsKind::ones, 2, 0, x);
        EXPECT_TRUE(r.all_converged()) << spec << " " << name_of(kind) << " " << name_of(solver);
        if (a.rows == 1) EXPECT_NEAR(x.at(0, 1), 1.0 / a.values[0], 1e-14) << spec << " " << name_of(kind);
      }
  }
}

TEST(PrecondOptions, NamesParseAndHostBackendRefusesGpuOnlyPreconditioners) {
  EXPECT_EQ(parse_option<Preconditioner>("amg"), Preconditioner::amg);
  EXPECT_EQ(parse_option<Preconditioner>("block-jacobi"), Preconditioner::block_jacobi);
  EXPECT_EQ(parse_option<Preconditioner>("auto"), Preconditioner::automatic);
  EXPECT_EQ(parse_option<AmgSmoother>("l1-jacobi"), AmgSmoother::l1_jacobi);
  EXPECT_FALSE(parse_option<Preconditioner>("ilu").has_value());
  SolverOptions so;
  so.backend = Backend::host, so.precond = Preconditioner::amg;
  EXPECT_THROW(Solver(generate("poisson2d:5"), so), UsageError);
  so.precond = Preconditioner::automatic;  // auto on the host: Jacobi
  Solver s(generate("poisson2d:5"), so);
  DenseBlock x;
  EXPECT_TRUE(s.solve(RhsKind::ones, 1, 0, x).all_converged());
}

TEST(ChebyshevSteps, CoefficientsFollowTheRecurrence) {
  // degree 1: x = S r / theta; the recurrence's rho_i = 1 / (2 sigma - rho_{i-1}) from rho_0 = 1 / sigma
  const PolynomialSteps p = PolynomialSteps::chebyshev(0.5, 2.5, 3);
  ASSERT_EQ(p.size(), 3);
  const double theta = 1.5, delta = 1.0, sigma = 1.5;
  EXPECT_DOUBLE_EQ(p.c2[0], 1 / theta);
  const double rho1 = 1 / (2 * sigma - 1 / sigma), rho2 = 1 / (2 * sigma - rho1);
  EXPECT_DOUBLE_EQ(p.c1[1], rho1 / sigma);
  EXPECT_DOUBLE_EQ(p.c2[1], 2 * rho1 / delta);
  EXPECT_DOUBLE_EQ(p.c1[2], rho2 * rho1);
  const PolynomialSteps j = PolynomialSteps::jacobi_sweeps(2);
  EXPECT_EQ(j.c1, std::vector<double>({0, 0}));
  EXPECT_EQ(j.c2, std::vector<double>({1, 1}));
}


// ---- option checks and setup errors ----

using spcg::test::HostOperator;

void expect_usage_error(Preconditioner kind, const PreconditionerOptions& o, const std::string& message) {
  const CsrMatrix a = generate("poisson2d:6");
  const MatrixSetup setup(a);
  const HostOperator op(a);
  const PreconditionerInputs in{setup, op, OperatorOptions{}, "options test", 1};
  try {
    make_preconditioner(kind, o, in);
    ADD_FAILURE() << name_of(kind) << ": accepted, expected \"" << message << "\"";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << name_of(kind) << ": " << e.what();
  }
}

// Every option of AMG and Chebyshev out of range, each refused by name before the setup starts (no GPU
// needed: the checks run first); none builds nothing.
TEST(PrecondOptions, AmgAndChebyshevOptionsAreCheckedFirst) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Bad {
    std::function<void(PreconditionerOptions&)> set;
    std::string message;
  };
  const std::vector<Bad> amg = {
      {[](PreconditionerOptions& o) { o.smoother_degree = 0; }, "amg: the smoother degree must be 1..16"},
      {[](PreconditionerOptions& o) { o.smoother_degree = 17; }, "amg: the smoother degree must be 1..16"},
      {[](PreconditionerOptions& o) { o.coarse_rows = 0; }, "amg: the coarsest level's size must be 1..8000 rows"},
      {[](PreconditionerOptions& o) { o.coarse_rows = 8001; }, "amg: the coarsest level's size must be 1..8000 rows"},
      {[](PreconditionerOptions& o) { o.strength_theta = -0.01; }, "amg: theta must be in [0, 1)"},
      {[](PreconditionerOptions& o) { o.strength_theta = 1.0; }, "amg: theta must be in [0, 1)"},
      {[nan](PreconditionerOptions& o) { o.strength_theta = nan; }, "amg: theta must be in [0, 1)"},
      {[](PreconditionerOptions& o) { o.prolongator_smoothings = 0; }, "amg: the prolongator smoothing steps must be 1..3"},
      {[](PreconditionerOptions& o) { o.prolongator_smoothings = 4; }, "amg: the prolongator smoothing steps must be 1..3"},
      {[](PreconditionerOptions& o) { o.prolongator_omega = 0; }, "amg: the prolongator's omega x lambda_max must be in (0, 2)"},
      {[](PreconditionerOptions& o) { o.prolongator_omega = 2; }, "amg: the prolongator's omega x lambda_max must be in (0, 2)"},
      {[nan](PreconditionerOptions& o) { o.prolongator_omega = nan; }, "amg: the prolongator's omega x lambda_max must be in (0, 2)"}};
  for (const Bad& b : amg) {
    PreconditionerOptions o;
    b.set(o);
    expect_usage_error(Preconditioner::amg, o, b.message);
  }
  const std::vector<Bad> chebyshev = {
      {[](PreconditionerOptions& o) { o.chebyshev_degree = 0; }, "chebyshev: the degree must be 1..64"},
      {[](PreconditionerOptions& o) { o.chebyshev_degree = 65; }, "chebyshev: the degree must be 1..64"},
      {[](PreconditionerOptions& o) { o.chebyshev_ratio = 1.0; }, "chebyshev: the eigenvalue ratio must be > 1"},
      {[nan](PreconditionerOptions& o) { o.chebyshev_ratio = nan; }, "chebyshev: the eigenvalue ratio must be > 1"}};
  for (const Bad& b : chebyshev) {
    PreconditionerOptions o;
    b.set(o);
    expect_usage_error(Preconditioner::chebyshev, o, b.message);
  }
  const CsrMatrix a = generate("poisson2d:6");
  const MatrixSetup setup(a);
  const HostOperator op(a);
  EXPECT_EQ(make_preconditioner(Preconditioner::none, PreconditionerOptions{}, PreconditionerInputs{setup, op, OperatorOptions{}}),
            nullptr);
}

// The same checks through the public solver on the device, and block-Jacobi's block size (checked there after
// the upload).
TEST_F(GpuPrecond, OptionChecksThroughTheSolver) {
  const CsrMatrix a = generate("poisson2d:12");
  SolverOptions so;
  so.precond = Preconditioner::amg;
  so.precond_options.strength_theta = 1.5;
  EXPECT_THROW(Solver(a, so), UsageError);
  so.precond_options = PreconditionerOptions{};
  so.precond = Preconditioner::chebyshev, so.precond_options.chebyshev_degree = 100;
  EXPECT_THROW(Solver(a, so), UsageError);
  so.precond_options = PreconditionerOptions{};
  so.precond = Preconditioner::block_jacobi;
  for (const int b : {-1, 9}) {
    so.precond_options.block_size = b;
    try {
      Solver s(a, so);
      ADD_FAILURE() << "block size " << b << " accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("block-jacobi: --block-size must be 0 (detect) or 1..8"), std::string::npos) << e.what();
    }
  }
  // 0 detects; a 5-point Laplacian has no node blocks: contiguous 4 x 4, said so
  so.precond_options.block_size = 0;
  Solver s(a, so);
  ASSERT_NE(s.preconditioner(), nullptr);
  EXPECT_EQ(s.preconditioner()->block_size, 4);
  EXPECT_NE(s.preconditioner()->detail.find("no node block structure found: contiguous rows"), std::string::npos)
      << s.preconditioner()->detail;
  DenseBlock x(a.rows, 1, std::numeric_limits<double>::quiet_NaN());
  const SolveResult r = s.solve(RhsKind::random, 1, 2, x);
  EXPECT_TRUE(r.all_converged());
  expect_true_residual(a, random_block(a.rows, 1, 2), x, so.iteration.stop.rtol, "block-jacobi detected");
}

// Coarsening that leaves more than 85% of the rows has stalled: theta 0.5 on a 5-point Laplacian makes every
// coupling weak (1 / sqrt(4 x 4) = 0.25), so every node is its own aggregate. Above 8000 rows that is an error
// naming the level, the sizes and the way out; below, the level is solved densely (one level, an exact inverse:
// PCG converges in a step or two).
TEST_F(GpuPrecond, AmgStalledCoarsening) {
  SolverOptions so;
  so.precond = Preconditioner::amg;
  so.precond_options.strength_theta = 0.5;
  so.matrix_name = "stalled";
  try {
    Solver s(generate("poisson2d:100"), so);
    ADD_FAILURE() << "a stalled coarsening of 10000 rows accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "stalled");
    EXPECT_NE(std::string(e.what()).find("amg level 0: coarsening stalled (10000 rows -> 10000 aggregates); try a smaller --amg-theta"),
              std::string::npos) << e.what();
  }
  const CsrMatrix small = generate("poisson2d:30");
  so.precond_options.coarse_rows = 100;
  Solver s(small, so);
  ASSERT_NE(s.preconditioner(), nullptr);
  ASSERT_EQ(s.preconditioner()->levels.size(), 1u) << s.preconditioner()->detail;
  EXPECT_EQ(s.preconditioner()->levels[0].rows, small.rows);
  EXPECT_EQ(s.preconditioner()->levels[0].kernel, "dense inverse");
  DenseBlock x(small.rows, 1, std::numeric_limits<double>::quiet_NaN());
  const SolveResult r = s.solve(RhsKind::random, 1, 3, x);
  EXPECT_TRUE(r.all_converged());
  EXPECT_LE(r.columns[0].iterations, 3) << "an exact inverse as the preconditioner";
  expect_true_residual(small, random_block(small.rows, 1, 3), x, so.iteration.stop.rtol, "stalled, dense");
}

// A symmetric matrix with a positive diagonal that is not positive definite passes the solver's checks; when it
// is small enough to be AMG's coarsest level, the Cholesky there refuses it, naming the level's size.
TEST_F(GpuPrecond, AmgCoarsestLevelNotSpdIsRefused) {
  CsrMatrix a;  // tridiagonal, 1 and 0.9: eigenvalues 1 + 1.8 cos(k pi / 5), one of them -0.456
  a.rows = a.cols = 4, a.row_ptr = {0, 2, 5, 8, 10}, a.col_idx = {0, 1, 0, 1, 2, 1, 2, 3, 2, 3};
  a.values = {1, 0.9, 0.9, 1, 0.9, 0.9, 1, 0.9, 0.9, 1};
  SolverOptions so;
  so.precond = Preconditioner::amg, so.matrix_name = "indefinite-4";
  try {
    Solver s(a, so);
    ADD_FAILURE() << "AMG accepted an indefinite coarsest level";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "indefinite-4");
    EXPECT_NE(std::string(e.what()).find("amg: the coarsest level (4 rows) is not positive definite (its Cholesky "
                                         "factorisation failed), so the matrix is not SPD"),
              std::string::npos) << e.what();
  }
  so.precond = Preconditioner::none;  // without AMG the same matrix sets up (the checks pass it)
  EXPECT_NO_THROW(Solver(a, so));
}

// max_levels caps the hierarchy: with 1, 2, 3 levels allowed the hierarchy has exactly that many (the natural
// one, to 2 rows, is deeper), the last one larger than coarse_rows and solved densely; each still converges.
TEST_F(GpuPrecond, AmgMaxLevelsIsHonoured) {
  const CsrMatrix a = generate("poisson2d:32");  // 1024 rows
  SolverOptions so;
  so.precond = Preconditioner::amg;
  so.precond_options.coarse_rows = 2;
  size_t natural = 0;
  {
    Solver s(a, so);
    natural = s.preconditioner()->levels.size();
  }
  ASSERT_GE(natural, 4u) << "the uncapped hierarchy must be deeper than the caps tried";
  for (const int cap : {1, 2, 3}) {
    const std::string what = "max_levels " + std::to_string(cap);
    so.precond_options.max_levels = cap;
    Solver s(a, so);
    const std::vector<AmgLevelReport>& levels = s.preconditioner()->levels;
    ASSERT_EQ(levels.size(), static_cast<size_t>(cap)) << what;
    EXPECT_GT(levels.back().rows, 2) << what << ": cut before reaching coarse_rows";
    EXPECT_EQ(levels.back().kernel, "dense inverse") << what;
    for (size_t l = 1; l < levels.size(); ++l) EXPECT_LT(levels[l].rows, levels[l - 1].rows) << what;
    DenseBlock x(a.rows, 2, std::numeric_limits<double>::quiet_NaN());
    const SolveResult r = s.solve(RhsKind::random, 2, 4, x);
    EXPECT_TRUE(r.all_converged()) << what;
    expect_true_residual(a, random_block(a.rows, 2, 4), x, so.iteration.stop.rtol, what);
  }
  // no level at all is refused; so is a cap that leaves the dense factor more rows than it takes (8000)
  so.precond_options.max_levels = 0;
  EXPECT_THROW(Solver(a, so), UsageError);
  so.precond_options.max_levels = 1;
  try {
    Solver big(generate("poisson2d:100"), so);  // 10000 rows on the one level allowed
    ADD_FAILURE() << "a 10000-row coarsest level was factored densely";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("10000 rows"), std::string::npos) << e.what();
  }
}

// A nonzero strength threshold drops the weak couplings across jump3d's coefficient jumps, so the level-0
// aggregation, and with it the hierarchy, differs from theta = 0: level 1 has as many rows as the host rule's
// aggregates of the thresholded graph (172 at theta 0, 195 at 0.08); both hierarchies precondition CG to
// convergence, and the report names the theta used.
TEST_F(GpuPrecond, AmgStrengthThetaChangesTheHierarchy) {
  const CsrMatrix a = generate("jump3d:12");
  std::vector<int32_t> coarse;
  for (const double theta : {0.0, 0.08}) coarse.push_back(aggregate(strength_graph(a, theta), 0).count);
  ASSERT_NE(coarse[0], coarse[1]) << "theta 0.08 must change the aggregation here";
  for (size_t t = 0; t < 2; ++t) {
    const double theta = t == 0 ? 0.0 : 0.08;
    const std::string what = "theta " + std::to_string(theta);
    SolverOptions so;
    so.precond = Preconditioner::amg, so.solver = SolverKind::block_cg, so.expected_columns = 2;
    so.precond_options.strength_theta = theta;
    so.precond_options.coarse_rows = 50;
    Solver s(a, so);
    const PreconditionerReport& rep = *s.preconditioner();
    EXPECT_NE(rep.detail.find(t == 0 ? "(theta 0)" : "(theta 0.08)"), std::string::npos) << rep.detail;
    ASSERT_GE(rep.levels.size(), 2u) << what << ": " << rep.detail;
    EXPECT_EQ(rep.levels[1].rows, coarse[t]) << what << ": level 1 is not the thresholded graph's aggregation";
    DenseBlock x(a.rows, 2, std::numeric_limits<double>::quiet_NaN());
    const SolveResult r = s.solve(RhsKind::random, 2, 6, x);
    EXPECT_TRUE(r.all_converged()) << what;
    expect_true_residual(a, random_block(a.rows, 2, 6), x, so.iteration.stop.rtol, what);
  }
}

// A non-positive diagonal let through the solver's checks (--force) is refused by every preconditioner that
// divides by it, naming the row; auto falls back to none and says why.
TEST_F(GpuPrecond, NonPositiveDiagonalIsRefusedByEachPreconditioner) {
  CsrMatrix a = generate("poisson2d:12");
  for (int32_t p = a.row_ptr[4]; p < a.row_ptr[5]; ++p)
    if (a.col_idx[p] == 4) a.values[p] = -1.0;  // row 5
  const std::vector<std::pair<Preconditioner, std::string>> cases = {
      {Preconditioner::jacobi, "Jacobi preconditioner needs a positive diagonal, but row 5 has diagonal -1"},
      {Preconditioner::chebyshev, "chebyshev needs a positive diagonal, but row 5 has diagonal -1"},
      {Preconditioner::amg, "amg level 0: smoothing needs a positive diagonal, but row 5 has diagonal -1"},
      {Preconditioner::block_jacobi, "block-jacobi: diagonal block 3 (rows 5..6) is not positive definite"}};
  for (const auto& [kind, message] : cases) {
    SolverOptions so;
    so.precond = kind, so.check_matrix = false, so.matrix_name = "forced";
    so.precond_options.coarse_rows = 50;
    so.precond_options.block_size = 2;
    try {
      Solver s(a, so);
      ADD_FAILURE() << name_of(kind) << " accepted a negative diagonal";
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "forced") << name_of(kind);
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << name_of(kind) << ": " << e.what();
    }
  }
  SolverOptions so;
  so.precond = Preconditioner::automatic, so.check_matrix = false;
  Solver s(a, so);
  ASSERT_NE(s.preconditioner(), nullptr);
  EXPECT_EQ(s.preconditioner()->kind, Preconditioner::none);
  EXPECT_NE(s.preconditioner()->reason.find("the diagonal is not positive"), std::string::npos) << s.preconditioner()->reason;
}

// auto's "none" keeps its reason in an object whose apply is the identity (the solvers skip it, but it must
// still be right): Z = R bit for bit, on a NaN-poisoned Z.
TEST_F(GpuPrecond, AutoNoneAppliesTheIdentity) {
  const CsrMatrix a = generate("poisson2d:30");  // small, constant diagonal: none
  const Built b = build(a, Preconditioner::automatic, {}, 3);
  ASSERT_NE(b.m, nullptr);
  ASSERT_EQ(b.m->report().kind, Preconditioner::none) << b.m->report().reason;
  EXPECT_EQ(b.m->inverse_diagonal(), nullptr);
  EXPECT_EQ(b.m->rows(), a.rows);
  EXPECT_DOUBLE_EQ(b.m->bytes_per_apply(3), 16.0 * a.rows * 3);
  const DenseBlock r = random_block(a.rows, 3, 41);
  const DenseBlock z = apply(*b.m, r);
  EXPECT_EQ(std::memcmp(z.data.data(), r.data.data(), r.data.size() * sizeof(double)), 0);
}


// A row of A wider than the row-wise product kernel takes (> 256 distinct columns in A P): a chain with one node
// weakly coupled to every other (theta drops those couplings from the aggregation, so ~hundreds of aggregates
// follow the chain, and the hub's row of A P meets all of them). The hierarchy is still built (those products by
// cuSPARSE, and the report says so) and preconditions CG to convergence: A is strictly diagonally dominant
// (SPD) and the V-cycle symmetric positive, so a breakdown here is a bug (seen once, on a fresh H200 in a full
// run of this suite: breakdown, relative residual 12.7; not reproduced in 50 later runs).
// The matrix: a chain (2.01 on the diagonal, -1 beside it) whose node 0 is coupled to every other node by -0.001.
CsrMatrix hub_and_chain(int32_t n) {
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  double hub = 1.0;
  for (int32_t i = 1; i < n; ++i) {
    ti.push_back(i), tj.push_back(i), tv.push_back(2.01);
    if (i + 1 < n) ti.push_back(i), tj.push_back(i + 1), tv.push_back(-1.0), ti.push_back(i + 1), tj.push_back(i), tv.push_back(-1.0);
    ti.push_back(0), tj.push_back(i), tv.push_back(-0.001), ti.push_back(i), tj.push_back(0), tv.push_back(-0.001);
    hub += 0.001;
  }
  ti.push_back(0), tj.push_back(0), tv.push_back(hub);
  return csr_from_triplets(n, n, ti, tj, tv);
}

TEST_F(GpuPrecond, AmgWideRowsGoToTheLibraryProduct) {
  const CsrMatrix a = hub_and_chain(3000);
  SolverOptions so;
  so.precond = Preconditioner::amg;
  so.precond_options.strength_theta = 0.01;  // the hub's couplings (~2e-4 relative) are weak, the chain's (0.5) strong
  Solver s(a, so);
  const PreconditionerReport& rep = *s.preconditioner();
  ASSERT_GE(rep.levels.size(), 2u) << rep.detail;
  EXPECT_GT(rep.levels[1].rows, 256) << "too few aggregates for a row wider than the kernel's " << rep.detail;
  EXPECT_NE(rep.detail.find("by cuSPARSE (a row wider than our product kernel takes): level 0 A P"), std::string::npos)
      << rep.detail;
  DenseBlock x(a.rows, 1, std::numeric_limits<double>::quiet_NaN());
  const SolveResult r = s.solve(RhsKind::random, 1, 13, x);
  EXPECT_TRUE(r.all_converged()) << to_string(r.columns[0].status);
  expect_true_residual(a, random_block(a.rows, 1, 13), x, so.iteration.stop.rtol, "hub and chain");
}



// auto on a large, easy system (a 3D Laplacian with 100 added to its diagonal, not constant: kappa ~1.1): the
// 40-iteration Jacobi-CG trial already reaches rtol, so Jacobi is taken without an extrapolation, and says so;
// the solve with it converges, checked on the host.
TEST_F(GpuPrecond, AutoTakesJacobiWhenTheTrialReachesRtol) {
  CsrMatrix a = generate("poisson3d:47");  // 103823 rows: above auto's AMG size
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p)
      if (a.col_idx[p] == i) a.values[p] += 100.0 + 0.5 * (i % 3);
  SolverOptions so;
  so.precond = Preconditioner::automatic;
  Solver s(a, so);
  ASSERT_NE(s.preconditioner(), nullptr);
  EXPECT_EQ(s.preconditioner()->kind, Preconditioner::jacobi) << s.preconditioner()->reason;
  EXPECT_NE(s.preconditioner()->reason.find("a 40-iteration Jacobi-CG trial reached rtol"), std::string::npos)
      << s.preconditioner()->reason;
  DenseBlock x(a.rows, 1, std::numeric_limits<double>::quiet_NaN());
  const SolveResult r = s.solve(RhsKind::random, 1, 5, x);
  EXPECT_TRUE(r.all_converged());
  expect_true_residual(a, random_block(a.rows, 1, 5), x, so.iteration.stop.rtol, "easy auto");
}

// Mixed precision with AMG (#35 item 2a): the levels whose kernel has an FP32-values variant (dia's: the stencils'
// fine level) apply it; the iteration stays FP64 unless every value is an FP32 number (poisson's, not aniso3d's
// 0.1 and 0.01), where cg's products read the finest level's copy (their bits are A's: no residual replacement).
// The answer still reaches rtol (checked on the host from the poisoned x), the iterations stay within 10 % (+1) of
// the FP64 hierarchy's, the report names the FP32 levels, and double keeps every level FP64. A mixed asked where no
// level has the variant is refused by name.
TEST_F(GpuPrecond, AmgFp32LevelsKeepTheAnswerAndTheIterations) {
  for (const char* name : {"poisson3d:24", "jump3d:16", "poisson2d:90", "aniso3d:20"}) {
    const CsrMatrix a = generate(name);
    const bool fp32_numbers = std::all_of(a.values.begin(), a.values.end(), [](double v) { return double(float(v)) == v; });
    if (std::string(name).rfind("aniso3d", 0) == 0) EXPECT_FALSE(fp32_numbers) << name;
    if (std::string(name).rfind("poisson", 0) == 0) EXPECT_TRUE(fp32_numbers) << name;
    std::map<Precision, int> its;
    for (const Precision p : {Precision::double_precision, Precision::mixed, Precision::automatic}) {
      const std::string what = std::string(name) + " " + name_of(p);
      SolverOptions so;
      so.precond = Preconditioner::amg, so.kernel = "dia", so.precision = p, so.backend = Backend::gpu;
      so.iteration.stop = {1e-10, 0, 500};
      so.precond_options.coarse_rows = 100;
      Solver s(a, so);
      DenseBlock x(a.rows, 1, std::numeric_limits<double>::quiet_NaN());
      const SolveResult r = s.solve(RhsKind::random, 1, 5, x);
      ASSERT_TRUE(r.all_converged()) << what;
      expect_true_residual(a, random_block(a.rows, 1, 5), x, so.iteration.stop.rtol, what);
      EXPECT_EQ(r.residual_replacements, 0) << what;  // the iteration itself stays FP64 (no FP32 copy of A)
      const PreconditionerReport* m = s.preconditioner();
      ASSERT_NE(m, nullptr);
      ASSERT_GE(m->levels.size(), 2u) << what;
      const bool fp32 = p != Precision::double_precision;
      EXPECT_EQ(m->levels[0].kernel, fp32 ? "dia-f32" : "dia") << what;
      EXPECT_EQ(s.precision(), fp32 ? Precision::mixed : Precision::double_precision) << what;
      EXPECT_EQ(m->precision, s.precision()) << what;
      EXPECT_NE(s.precision_reason().find(fp32 ? "level(s) 0 (dia-f32)" : "asked"), std::string::npos)
          << what << ": " << s.precision_reason();
      EXPECT_EQ(s.precision_reason().find("iteration on the AMG hierarchy's finest level (dia-f32") != std::string::npos,
                fp32 && fp32_numbers)
          << what << ": " << s.precision_reason();
      for (const AmgLevelReport& level : m->levels)  // no FP32 level in a double hierarchy
        if (!fp32) EXPECT_EQ(level.kernel.find("f32"), std::string::npos) << what;
      its[p] = max_iterations(r);
    }
    EXPECT_LE(its[Precision::mixed], 1.1 * its[Precision::double_precision] + 1) << name;
    EXPECT_EQ(its[Precision::mixed], its[Precision::automatic]) << name;
  }
  // every level but the dense coarsest has one now (dia's, csr-vector's): a hierarchy of the dense level alone
  SolverOptions so;
  so.precond = Preconditioner::amg, so.kernel = "csr-scalar", so.precision = Precision::mixed, so.backend = Backend::gpu;
  so.precond_options.coarse_rows = 100;  // bcsstk01's 48 rows: the coarsest level at once
  try {
    Solver s(input("bcsstk01.mtx"), so);
    ADD_FAILURE() << "mixed AMG without an FP32 level was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no level of the AMG hierarchy"), std::string::npos) << e.what();
  }
  so.precision = Precision::automatic;  // auto: FP64 with the reason
  Solver s(input("bcsstk01.mtx"), so);
  EXPECT_EQ(s.precision(), Precision::double_precision);
  EXPECT_NE(s.precision_reason().find("no level's kernel has an FP32-values variant"), std::string::npos)
      << s.precision_reason();
}

}  // namespace
