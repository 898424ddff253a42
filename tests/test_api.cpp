// The public interface (spcg/spcg.hpp) as a user sees it: typed options and their names, the Solver on host and
// device inputs (checked by the host residual in long double and against each other), setup kept between
// solves, errors as typed exceptions. Only public headers are included, plus DeviceArray to own the caller's
// device memory. GPU tests skip without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "device_array.hpp"
#include "spcg/spcg.hpp"
#include "test_util.hpp"

using namespace spcg;

namespace {

template <class E>
void expect_names_round_trip() {
  for (const auto& [value, name] : OptionNames<E>::list) {
    EXPECT_STREQ(name_of(value), name);
    ASSERT_TRUE(parse_option<E>(name).has_value()) << name;
    EXPECT_EQ(*parse_option<E>(name), value) << name;
  }
  EXPECT_FALSE(parse_option<E>("no-such-name").has_value());
  EXPECT_FALSE(parse_option<E>("").has_value());
}

TEST(Options, EveryNameParsesBackToItsValue) {
  expect_names_round_trip<SolverKind>();
  expect_names_round_trip<Preconditioner>();
  expect_names_round_trip<VectorOps>();
  expect_names_round_trip<Switch>();
  expect_names_round_trip<KernelTiming>();
  expect_names_round_trip<Backend>();
  EXPECT_EQ(option_names<SolverKind>(), "cg, multi-cg or block-cg");
  expect_names_round_trip<AmgProlongator>();
  expect_names_round_trip<AmgSmoother>();
  EXPECT_EQ(option_names<Preconditioner>(), "none, jacobi, block-jacobi, chebyshev, amg or auto");
}

// Every column converged (or deflated: block CG dropped its direction as dependent on the others', and it
// still met the tolerance), its residual recomputed on the host within 20x the tolerance (rounding between the
// solver's recursive residual and the true one), and the reported true residual equal to that one.
void expect_solves(const CsrMatrix& a, const DenseBlock& b, const DenseBlock& x, const SolveResult& r, double rtol,
                   const std::string& what) {
  ASSERT_EQ(r.columns.size(), static_cast<size_t>(b.cols)) << what;
  const std::vector<double> rel = relative_residuals(a, x, b);
  for (int j = 0; j < b.cols; ++j) {
    EXPECT_TRUE(r.columns[j].status == ColumnStatus::converged || r.columns[j].status == ColumnStatus::deflated)
        << what << " column " << j << ": " << to_string(r.columns[j].status);
    EXPECT_LE(rel[j], 20 * rtol) << what << " column " << j;
    EXPECT_NEAR(r.columns[j].true_residual / r.columns[j].b_norm, rel[j], 1e-3 * rel[j] + 1e-15) << what;
  }
}

TEST(HostSolver, SolvesAndKeepsItsSetup) {
  const CsrMatrix a = poisson2d_5pt(20);
  SolverOptions o;
  o.backend = Backend::host;
  o.precond = Preconditioner::jacobi;
  o.iteration.stop.rtol = 1e-10;
  Solver solver(a, o);
  EXPECT_EQ(solver.backend(), Backend::host);
  EXPECT_EQ(solver.kernel(1), "eigen");
  EXPECT_TRUE(solver.stats().numerically_symmetric);
  for (uint64_t seed : {1, 2}) {  // the same solver twice
    DenseBlock x(a.rows, 2, std::nan(""));
    const SolveResult r = solver.solve(RhsKind::random, 2, seed, x);
    expect_solves(a, random_block(a.rows, 2, seed), x, r, 1e-10, "host seed " + std::to_string(seed));
  }
  DenseBlock b(a.rows, 1, 1.0), x(a.rows, 1, 0.0);
  expect_solves(a, b, x, solver.solve(b, x), 1e-10, "host ones");
}

// The host verdict goes through the Monitor: an iteration limit is reported as such, never as converged.
TEST(HostSolver, IterationLimitIsNotConverged) {
  SolverOptions o;
  o.backend = Backend::host;
  o.iteration.stop = {1e-12, 0, 3};
  Solver solver(poisson3d_7pt(10), o);
  DenseBlock x;
  const SolveResult r = solver.solve(RhsKind::ones, 1, 1, x);
  EXPECT_EQ(r.columns[0].status, ColumnStatus::max_iterations);
  EXPECT_FALSE(r.all_converged());
}

TEST(HostSolver, RefusalsAreTypedAndNameTheMatrix) {
  SolverOptions o;
  o.backend = Backend::host;
  o.matrix_name = "my-matrix";
  CsrMatrix indefinite = poisson2d_5pt(4);
  indefinite.values[0] = -1.0;  // a negative diagonal entry (row 1)
  try {
    Solver s(indefinite, o);
    FAIL() << "accepted a negative diagonal";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "my-matrix");
    EXPECT_NE(std::string(e.what()).find("row 1"), std::string::npos) << e.what();
  }
  Solver ok(poisson2d_5pt(4), o);
  DenseBlock b(3, 1, 1.0), x(3, 1, 0.0);
  EXPECT_THROW(ok.solve(b, x), UsageError);  // 3 rows against 16
  DenseBlock y;
  EXPECT_THROW(ok.solve(RhsKind::ones, 0, 1, y), UsageError);
}

class GpuApi : public ::testing::Test {
 protected:
  void SetUp() override { SPCG_REQUIRE_GPU(); }
  void TearDown() override {
    std::string why;
    if (spcg::test::gpu_available(&why)) ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};

// Host blocks, device-made right-hand sides and caller-owned device arrays give the same solution, bit for bit
// in deterministic mode with a named kernel (auto's timed trial may pick another kernel in another setup, and
// another kernel rounds differently); the setup is made once.
TEST_F(GpuApi, HostAndDeviceInputsGiveTheSameSolution) {
  const CsrMatrix a = read_matrix_market(spcg::test::input("nos4.mtx")).matrix;
  const int k = 3;
  for (const SolverKind kind : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
    const std::string what = name_of(kind);
    SolverOptions o;
    o.solver = kind, o.expected_columns = k, o.precond = Preconditioner::jacobi, o.kernel = "csr-vector";
    o.iteration.deterministic = true;
    o.iteration.stop.rtol = 1e-10;
    const int cols = kind == SolverKind::cg ? 1 : k;
    const DenseBlock b = random_block(a.rows, cols, 7);
    Solver from_host(a, o);
    EXPECT_EQ(from_host.backend(), Backend::gpu);
    const std::vector<Phase> setup = from_host.setup_phases();
    DenseBlock x1(a.rows, cols, 0.0), x2;
    const SolveResult r1 = from_host.solve(b, x1);
    expect_solves(a, b, x1, r1, 1e-10, what + " host blocks");
    const SolveResult r2 = from_host.solve(RhsKind::random, cols, 7, x2);  // B made on the device
    EXPECT_EQ(std::memcmp(x1.data.data(), x2.data.data(), x1.data.size() * sizeof(double)), 0) << what;
    EXPECT_EQ(from_host.setup_phases().size(), setup.size()) << what << ": the setup was not rebuilt";

    // The matrix and the blocks in device memory the caller owns.
    DeviceArray<int32_t> rp(std::vector<int32_t>(a.row_ptr.begin(), a.row_ptr.end()));
    DeviceArray<int32_t> ci(std::vector<int32_t>(a.col_idx.begin(), a.col_idx.end()));
    DeviceArray<double> va(std::vector<double>(a.values.begin(), a.values.end()));
    Solver from_device(DeviceCsrRef{a.rows, a.cols, a.nnz(), rp.data(), ci.data(), va.data()}, o);
    DeviceArray<double> db(std::vector<double>(b.data.begin(), b.data.end()));
    DeviceArray<double> dx(std::vector<double>(b.data.size(), 0.0));
    const SolveResult r3 = from_device.solve(DeviceBlockRef{a.rows, cols, db.data()}, DeviceBlockRef{a.rows, cols, dx.data()});
    const std::vector<double> x3 = dx.download<std::vector<double>>();
    EXPECT_EQ(std::memcmp(x1.data.data(), x3.data(), x3.size() * sizeof(double)), 0) << what;
    EXPECT_EQ(r3.columns[0].iterations, r1.columns[0].iterations) << what;
    EXPECT_EQ(from_device.kernel(cols), from_host.kernel(cols)) << what;
    EXPECT_EQ(from_device.matrix().col_idx.size(), a.col_idx.size()) << what << ": downloaded on demand";
  }
}

TEST_F(GpuApi, RefusalsAreTypedOnTheDeviceToo) {
  SolverOptions o;
  o.matrix_name = "unsymmetric";
  CsrMatrix u = poisson2d_5pt(6);
  u.values[1] = -2.0;  // a_12 != a_21
  EXPECT_THROW(Solver(u, o), InputError);
  o.check_matrix = false;  // --force: the solve runs and reports what happened
  Solver forced(u, o);
  DenseBlock x;
  EXPECT_NO_THROW(forced.solve(RhsKind::ones, 1, 1, x));
  o.kernel = "no-such-kernel";
  EXPECT_THROW(Solver(poisson2d_5pt(6), o), UsageError);
}

}  // namespace
