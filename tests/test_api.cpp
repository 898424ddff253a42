// The public interface (spcg/spcg.hpp) as a user sees it: typed options and their names, the Solver on host and
// device inputs (checked by the host residual in long double and against each other), setup kept between
// solves, errors as typed exceptions. Only public headers are included, plus DeviceArray to own the caller's
// device memory. GPU tests skip without a device.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "kernels/device_array.hpp"
#include "spcg/spcg.hpp"
#include "tests/test_util.hpp"

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

class GpuApi : public spcg::test::GpuTest {};

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
  {
    // Not symmetric but nearly SPD: the run may converge or stop, but whatever it reports must be true of x.
    Solver forced(u, o);
    DenseBlock x;
    const SolveResult r = forced.solve(RhsKind::ones, 1, 1, x);
    ASSERT_EQ(r.columns.size(), 1u);
    EXPECT_NE(r.columns[0].status, ColumnStatus::running);
    if (r.columns[0].status == ColumnStatus::converged)
      EXPECT_LE(relative_residuals(u, x, DenseBlock(u.rows, 1, 1.0))[0], 20 * o.iteration.stop.rtol)
          << "reported converged, but the residual recomputed from x says otherwise";
  }
  // Negative definite (-A, A SPD), forced past the diagonal check: p'Ap < 0 for every p, so CG must stop at its
  // first step with a breakdown, never report converged, and leave x at its initial guess (no step was taken).
  CsrMatrix negative = poisson2d_5pt(6);
  for (double& v : negative.values) v = -v;
  for (const SolverKind kind : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg})
    for (const Switch persistent : {Switch::automatic, Switch::off}) {
      const std::string what = std::string(name_of(kind)) + " persistent " + name_of(persistent);
      o.solver = kind, o.expected_columns = 2, o.iteration.persistent = persistent;
      Solver forced(negative, o);
      DenseBlock x(negative.rows, 2, 0.0);
      const DenseBlock b = random_block(negative.rows, 2, 3);
      const SolveResult r = forced.solve(b, x);
      ASSERT_EQ(r.columns.size(), 2u) << what;
      EXPECT_FALSE(r.all_converged()) << what;
      for (const ColumnResult& c : r.columns) {
        EXPECT_EQ(c.status, ColumnStatus::breakdown) << what << ": " << to_string(c.status);
        EXPECT_EQ(c.iterations, 0) << what;
      }
      for (double v : x.data) ASSERT_EQ(v, 0.0) << what << ": x moved on a breakdown";
      // the reported true residual is ||b|| (x = 0), recomputed on the host
      const std::vector<double> rel = relative_residuals(negative, x, b);
      for (int j = 0; j < 2; ++j) EXPECT_NEAR(r.columns[j].true_residual / r.columns[j].b_norm, rel[j], 1e-12) << what;
    }
  o.solver = SolverKind::cg, o.iteration.persistent = Switch::automatic;
  o.kernel = "no-such-kernel";
  EXPECT_THROW(Solver(poisson2d_5pt(6), o), UsageError);
}


// ---- host checks (no GPU needed) ----

constexpr double kEps = std::numeric_limits<double>::epsilon();

TEST(Options, NamesOfEveryStatusAndOfValuesOutsideTheLists) {
  const std::vector<std::pair<ColumnStatus, std::string>> statuses = {
      {ColumnStatus::running, "running"},         {ColumnStatus::converged, "converged"},
      {ColumnStatus::deflated, "deflated"},       {ColumnStatus::max_iterations, "max-iterations"},
      {ColumnStatus::breakdown, "breakdown"},     {ColumnStatus::non_finite, "non-finite"},
      {ColumnStatus::precond_not_positive, "preconditioner-not-positive"}, {ColumnStatus::interrupted, "interrupted"},
      {ColumnStatus::stagnated, "stagnated"}};
  for (const auto& [s, name] : statuses) EXPECT_EQ(to_string(s), name);
  EXPECT_STREQ(to_string(static_cast<ColumnStatus>(99)), "?");
  EXPECT_STREQ(name_of(static_cast<SolverKind>(99)), "?");
  EXPECT_STREQ(name_of(static_cast<Preconditioner>(-1)), "?");
  EXPECT_EQ(option_names<AmgProlongator>(), "smoothed or plain");
  EXPECT_EQ(option_names<Backend>(), "auto, gpu or host");
}

TEST(Options, AllConvergedCountsConvergedAndDeflatedOnly) {
  SolveResult r;
  EXPECT_TRUE(r.all_converged()) << "no columns: nothing failed";
  r.columns.resize(2);
  r.columns[0].status = ColumnStatus::converged;
  r.columns[1].status = ColumnStatus::deflated;
  EXPECT_TRUE(r.all_converged());
  for (const ColumnStatus s : {ColumnStatus::running, ColumnStatus::max_iterations, ColumnStatus::breakdown,
                               ColumnStatus::non_finite, ColumnStatus::precond_not_positive, ColumnStatus::interrupted,
                               ColumnStatus::stagnated}) {
    r.columns[1].status = s;
    EXPECT_FALSE(r.all_converged()) << to_string(s);
  }
}

// The refusals and which of them check_matrix = false (--force) may override: a non-symmetric matrix and a
// non-positive diagonal are overridable; a non-square matrix and NaN/Inf entries never pass. Both backends
// run the same checks (the GPU's on the device statistics) when a GPU is there.
std::vector<Backend> backends_here() {
  std::vector<Backend> b = {Backend::host};
  std::string why;
  if (spcg::test::gpu_available(&why)) b.push_back(Backend::gpu);
  return b;
}

TEST(Refusals, OverridableOnlyForAsymmetryAndTheDiagonal) {
  CsrMatrix rect;  // 2 x 3
  rect.rows = 2, rect.cols = 3, rect.row_ptr = {0, 2, 3}, rect.col_idx = {0, 2, 1}, rect.values = {4, 1, 4};
  CsrMatrix nan_entry = poisson2d_5pt(4);
  nan_entry.values[5] = std::numeric_limits<double>::quiet_NaN();
  CsrMatrix unsymmetric = poisson2d_5pt(4);
  unsymmetric.values[1] = -2.0;  // a_12 = -2, a_21 = -1
  CsrMatrix negative_diagonal = poisson2d_5pt(4);
  for (int32_t p = negative_diagonal.row_ptr[2]; p < negative_diagonal.row_ptr[3]; ++p)
    if (negative_diagonal.col_idx[p] == 2) negative_diagonal.values[p] = -3.0;  // row 3
  struct Case {
    std::string name;
    const CsrMatrix* a;
    bool overridable;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"rectangular", &rect, false, "matrix is 2 x 3, CG needs a square matrix"},
      {"nan", &nan_entry, false, "matrix has 1 NaN or Inf entries"},
      {"unsymmetric", &unsymmetric, true, "matrix is not symmetric"},
      {"negative diagonal", &negative_diagonal, true, "row 3 has diagonal -3 (1 such rows)"}};
  for (const Backend backend : backends_here())
    for (const Case& c : cases) {
      const std::string what = c.name + " on " + name_of(backend);
      SolverOptions o;
      o.backend = backend;
      o.matrix_name = "m-" + c.name;
      try {
        Solver s(*c.a, o);
        ADD_FAILURE() << what << ": accepted";
      } catch (const MatrixRefusedError& e) {
        EXPECT_EQ(e.overridable(), c.overridable) << what;
        EXPECT_EQ(e.file(), o.matrix_name) << what;
        EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos) << what << ": " << e.what();
      }
      o.check_matrix = false;  // --force
      if (c.overridable) {
        Solver s(*c.a, o);
        EXPECT_EQ(s.backend(), backend) << what;
        EXPECT_FALSE(s.stats().numerically_symmetric && s.stats().diagonal_positive) << what;
      } else {
        EXPECT_THROW(Solver(*c.a, o), MatrixRefusedError) << what << ": --force let it through";
      }
    }
}

// Host backend: its options and errors, each thrown before any device is touched.
TEST(HostSolver, OptionsAndShapesAreChecked) {
  const CsrMatrix a = poisson2d_5pt(5);
  SolverOptions o;
  o.backend = Backend::host;
  for (const Preconditioner p : {Preconditioner::block_jacobi, Preconditioner::chebyshev, Preconditioner::amg}) {
    o.precond = p;
    try {
      Solver s(a, o);
      ADD_FAILURE() << name_of(p) << " accepted on the host";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("offers --precond none or jacobi, not ") + name_of(p)),
                std::string::npos) << e.what();
    }
  }
  // Jacobi on a zero diagonal, the checks overridden: the Jacobi check still refuses, naming the matrix
  CsrMatrix zero_diagonal = a;
  for (int32_t p = zero_diagonal.row_ptr[3]; p < zero_diagonal.row_ptr[4]; ++p)
    if (zero_diagonal.col_idx[p] == 3) zero_diagonal.values[p] = 0.0;
  o.precond = Preconditioner::jacobi, o.check_matrix = false, o.matrix_name = "zero-diag";
  try {
    Solver s(zero_diagonal, o);
    ADD_FAILURE() << "Jacobi accepted a zero diagonal";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "zero-diag");
    EXPECT_NE(std::string(e.what()).find("row 4 has diagonal 0 (zero or missing)"), std::string::npos) << e.what();
  }
  o = SolverOptions{};
  o.backend = Backend::host;
  Solver s(a, o);
  DenseBlock x0(a.rows, 2, 0.0), wrong(a.rows + 1, 2, 0.0), x;
  try {
    s.solve(RhsKind::ones, 2, 1, x, &wrong);
    ADD_FAILURE() << "a wrong initial guess accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the initial guess is 26 x 2, expected 25 x 2"), std::string::npos) << e.what();
  }
  DenseBlock b(a.rows, 2, 1.0), x_short(a.rows, 1, 0.0);
  try {
    s.solve(b, x_short);
    ADD_FAILURE() << "X of the wrong width accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("X is 25 x 1, expected 25 x 2"), std::string::npos) << e.what();
  }
  // blocks or a matrix on the device need the GPU backend
  std::vector<double> storage(static_cast<size_t>(a.rows) * 2, 0.0);
  EXPECT_THROW(s.solve(DeviceBlockRef{a.rows, 2, storage.data()}, DeviceBlockRef{a.rows, 2, storage.data()}), UsageError);
  const DeviceCsrRef device_ref{a.rows, a.cols, a.nnz(), nullptr, nullptr, nullptr};
  try {
    Solver d(device_ref, o);
    ADD_FAILURE() << "a device matrix accepted on the host backend";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("needs the GPU backend"), std::string::npos) << e.what();
  }
  // Backend::gpu where no GPU is usable is a CudaError saying why; where one is, it is the GPU
  std::string why;
  SolverOptions g;
  g.backend = Backend::gpu;
  if (!spcg::test::gpu_available(&why)) {
    try {
      Solver d(a, g);
      ADD_FAILURE() << "the GPU backend without a GPU";
    } catch (const CudaError& e) {
      EXPECT_NE(std::string(e.what()).find("GPU backend: " + why), std::string::npos) << e.what();
    }
    SolverOptions automatic;
    EXPECT_THROW(Solver(device_ref, automatic), CudaError);
    EXPECT_EQ(Solver(a, automatic).backend(), Backend::host) << "auto falls back to the host without a GPU";
  } else {
    EXPECT_EQ(Solver(a, g).backend(), Backend::gpu);
  }
}

// What a host solver reports about itself: no kernel reason and no preconditioner object (Eigen's Jacobi is
// internal), the statistics equal to the host's, the matrix as given, its phases and options.
TEST(HostSolver, ReportsItsSetup) {
  const CsrMatrix a = poisson2d_5pt(7);
  SolverOptions o;
  o.backend = Backend::host;
  o.iteration.stop.rtol = 1e-9;
  o.matrix_name = "p7";
  Solver s(a, o);
  EXPECT_EQ(s.rows(), a.rows);
  EXPECT_EQ(s.kernel(1), "eigen");
  EXPECT_EQ(s.kernel(8), "eigen");
  EXPECT_TRUE(s.kernel_reason().empty());
  EXPECT_EQ(s.preconditioner(), nullptr) << "none: no preconditioner";
  EXPECT_EQ(s.options().matrix_name, "p7");
  EXPECT_EQ(s.options().iteration.stop.rtol, 1e-9);
  ASSERT_EQ(s.setup_phases().size(), 1u);
  EXPECT_EQ(s.setup_phases()[0].name, "statistics");
  const MatrixStats st = compute_stats(a);
  EXPECT_EQ(s.stats().nnz, st.nnz);
  EXPECT_EQ(s.stats().bandwidth, st.bandwidth);
  EXPECT_EQ(s.matrix().col_idx, a.col_idx);
  EXPECT_EQ(s.matrix().values, a.values);
  EXPECT_GT(persistent_cg_max_rows(), 0);
  { ScopedRange range("test-range"); }  // an NVTX range (no-op without NVTX): construct and destroy
}

// An exact initial guess is taken as such (0 iterations); a zero right-hand side converges at once to x = 0.
TEST(HostSolver, InitialGuessAndZeroRightHandSide) {
  const CsrMatrix a = poisson2d_5pt(12);
  SolverOptions o;
  o.backend = Backend::host;
  o.iteration.stop.rtol = 1e-6;
  Solver s(a, o);
  const DenseBlock b = random_block(a.rows, 2, 4);
  DenseBlock exact(a.rows, 2, 0.0);
  {
    SolverOptions tight = o;
    tight.iteration.stop.rtol = 1e-13;
    Solver t(a, tight);
    const SolveResult r = t.solve(b, exact);
    ASSERT_TRUE(r.all_converged());
  }
  DenseBlock x = exact;
  const SolveResult r = s.solve(b, x);
  for (int j = 0; j < 2; ++j) {
    EXPECT_EQ(r.columns[j].status, ColumnStatus::converged);
    EXPECT_EQ(r.columns[j].iterations, 0) << "the guess already meets rtol";
  }
  DenseBlock y(a.rows, 2, std::nan(""));  // output only: poisoned
  const SolveResult ry = s.solve(RhsKind::random, 2, 4, y, &exact);  // the same b, made by the solver
  for (int j = 0; j < 2; ++j) EXPECT_EQ(ry.columns[j].iterations, 0);
  EXPECT_LE(relative_residuals(a, y, b)[1], 1e-6);
  DenseBlock zero_b(a.rows, 1, 0.0), zero_x(a.rows, 1, 0.0);
  const SolveResult rz = s.solve(zero_b, zero_x);
  EXPECT_EQ(rz.columns[0].status, ColumnStatus::converged);
  EXPECT_EQ(rz.columns[0].iterations, 0);
  EXPECT_EQ(rz.columns[0].b_norm, 0.0);
  for (double v : zero_x.data) EXPECT_EQ(v, 0.0);
}

// set_stop_rule: later solves stop by the new rule on the same setup; a negative or non-finite tolerance and a
// negative limit are refused.
TEST(HostSolver, StopRuleChangesWithoutANewSetup) {
  const CsrMatrix a = poisson2d_5pt(16);
  SolverOptions o;
  o.backend = Backend::host, o.iteration.stop.rtol = 1e-3;
  Solver s(a, o);
  const DenseBlock b(a.rows, 1, 1.0);
  DenseBlock x(a.rows, 1, 0.0);
  const int loose = s.solve(b, x).columns[0].iterations;
  s.set_stop_rule(StopRule{1e-10, 0, 10000});
  DenseBlock y(a.rows, 1, 0.0);
  const SolveResult tight = s.solve(b, y);
  EXPECT_GT(tight.columns[0].iterations, loose);
  EXPECT_LE(relative_residuals(a, y, b)[0], 1e-10 * 1.01);
  EXPECT_EQ(s.options().iteration.stop.rtol, 1e-10);
  EXPECT_THROW(s.set_stop_rule(StopRule{-1, 0, 10}), UsageError);
  EXPECT_THROW(s.set_stop_rule(StopRule{1e-8, std::nan(""), 10}), UsageError);
  EXPECT_THROW(s.set_stop_rule(StopRule{1e-8, 0, -1}), UsageError);
}

// The host backend's auto: Jacobi where the diagonal is positive, none where it is not (as auto's rule on the
// GPU); Jacobi asked for on such a matrix is an InputError naming the row.
TEST(HostSolver, AutoTakesNoneOnANonPositiveDiagonal) {
  CsrMatrix a = poisson2d_5pt(6);
  for (int32_t q = a.row_ptr[3]; q < a.row_ptr[4]; ++q)
    if (a.col_idx[q] == 3) a.values[q] = 0.0;
  SolverOptions o;
  o.backend = Backend::host, o.check_matrix = false, o.precond = Preconditioner::automatic;
  EXPECT_NO_THROW(Solver(a, o));
  o.precond = Preconditioner::jacobi;
  try {
    Solver s(a, o);
    ADD_FAILURE() << "Jacobi on a zero diagonal was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("row 4"), std::string::npos) << e.what();
  }
}

// atol on the host: Eigen's CG stops at the library's rule ||r|| <= max(rtol ||b||, atol) (each column's
// tolerance max(rtol, atol / ||b||)), and the verdict is the Monitor's. An unreachable rtol with an atol above
// the residual after the limit converges before the limit; with an atol below it, max-iterations. The residual
// recomputed from x meets atol.
TEST(HostSolver, AtolDecidesTheVerdict) {
  const CsrMatrix a = poisson2d_5pt(20);
  const DenseBlock b = random_block(a.rows, 1, 12);
  SolverOptions o;
  o.backend = Backend::host;
  o.iteration.stop = {1e-30, 0, 25};
  DenseBlock x(a.rows, 1, 0.0);
  const SolveResult limited = Solver(a, o).solve(b, x);
  ASSERT_EQ(limited.columns[0].status, ColumnStatus::max_iterations);
  const double reached = limited.columns[0].recursive_residual;
  ASSERT_GT(reached, 0.0);
  for (const double factor : {2.0, 0.5}) {
    o.iteration.stop.atol = factor * reached;
    DenseBlock y(a.rows, 1, 0.0);
    const SolveResult r = Solver(a, o).solve(b, y);
    const double true_norm = relative_residuals(a, y, b)[0] * r.columns[0].b_norm;
    if (factor > 1) {
      EXPECT_EQ(r.columns[0].status, ColumnStatus::converged) << "atol " << o.iteration.stop.atol;
      EXPECT_LT(r.columns[0].iterations, 25) << "atol stops the host solve before the limit";
      EXPECT_LE(r.columns[0].recursive_residual, o.iteration.stop.atol);
      EXPECT_LE(true_norm, 1.01 * o.iteration.stop.atol + 64 * kEps * a.rows * r.columns[0].b_norm);
    } else {
      EXPECT_EQ(r.columns[0].status, ColumnStatus::max_iterations) << "atol " << o.iteration.stop.atol;
    }
    EXPECT_NEAR(r.columns[0].true_residual, true_norm, 1e-10 * true_norm);
  }
}

// A Solver moved into another (construction and assignment) keeps its setup and solves; the moved-from one
// is destroyed cleanly.
void expect_moves_keep_the_setup(Backend backend) {
  const CsrMatrix a = poisson2d_5pt(15);
  SolverOptions o;
  o.backend = backend;
  o.precond = Preconditioner::jacobi;
  o.iteration.stop.rtol = 1e-10;
  o.matrix_name = "moved";
  std::vector<Solver> solvers;
  solvers.emplace_back(a, o);
  Solver moved(std::move(solvers.back()));
  solvers.pop_back();  // the moved-from solver is destroyed here
  EXPECT_EQ(moved.rows(), a.rows);
  EXPECT_EQ(moved.backend(), backend);
  EXPECT_EQ(moved.options().matrix_name, "moved");
  const DenseBlock b = random_block(a.rows, 2, 21);
  DenseBlock x(a.rows, 2, 0.0);
  expect_solves(a, b, x, moved.solve(b, x), 1e-10, std::string("move-constructed, ") + name_of(backend));
  SolverOptions other = o;
  other.precond = Preconditioner::none;
  Solver assigned(poisson2d_5pt(3), other);  // a setup of its own, released by the assignment
  assigned = std::move(moved);
  EXPECT_EQ(assigned.rows(), a.rows);
  EXPECT_EQ(assigned.options().precond, Preconditioner::jacobi);
  for (uint64_t seed : {22, 23}) {
    DenseBlock y(a.rows, 2, std::nan(""));  // output only: poisoned
    const SolveResult r = assigned.solve(RhsKind::random, 2, seed, y);
    expect_solves(a, random_block(a.rows, 2, seed), y, r, 1e-10,
                  std::string("move-assigned, ") + name_of(backend) + " seed " + std::to_string(seed));
  }
}

TEST(HostSolver, MovedSolverKeepsItsSetup) { expect_moves_keep_the_setup(Backend::host); }
TEST_F(GpuApi, MovedSolverKeepsItsSetup) { expect_moves_keep_the_setup(Backend::gpu); }

// ---- GPU ----

// preconditioner() is null without one and otherwise says what was built (auto: why); kernel_reason() is
// auto's reason (empty for a named kernel) and kernel(k) names auto's choice.
TEST_F(GpuApi, PreconditionerAndKernelReports) {
  const CsrMatrix a = poisson2d_5pt(30);
  for (const Preconditioner p : {Preconditioner::none, Preconditioner::jacobi, Preconditioner::block_jacobi,
                                 Preconditioner::chebyshev, Preconditioner::amg, Preconditioner::automatic}) {
    const std::string what = name_of(p);
    SolverOptions o;
    o.precond = p;
    o.precond_options.coarse_rows = 50;
    o.precond_options.block_size = 2;
    Solver s(a, o);
    const PreconditionerReport* r = s.preconditioner();
    if (p == Preconditioner::none) {
      EXPECT_EQ(r, nullptr) << what;
    } else {
      ASSERT_NE(r, nullptr) << what;
      EXPECT_GE(r->setup_ms, 0.0) << what;
      if (p == Preconditioner::automatic) {
        // 900 rows: below AMG's size, constant diagonal: none, with the reason
        EXPECT_EQ(r->kind, Preconditioner::none) << r->reason;
        EXPECT_NE(r->reason.find("rows < 100000"), std::string::npos) << r->reason;
        EXPECT_NE(r->reason.find("constant diagonal"), std::string::npos) << r->reason;
      } else {
        EXPECT_EQ(r->kind, p) << what;
        EXPECT_TRUE(r->reason.empty()) << what << ": " << r->reason;
        EXPECT_FALSE(r->phases.empty()) << what;
      }
      if (p == Preconditioner::block_jacobi) {
        EXPECT_EQ(r->block_size, 2);
        EXPECT_NE(r->detail.find("blocks 2 x 2"), std::string::npos) << r->detail;
      }
      if (p == Preconditioner::chebyshev) {
        EXPECT_NE(r->detail.find("degree 3 on ["), std::string::npos) << r->detail;
        EXPECT_GT(r->lambda_max, r->lambda_min);
        EXPECT_GT(r->lambda_min, 0.0);
      }
      if (p == Preconditioner::amg) {
        ASSERT_GE(r->levels.size(), 2u) << r->detail;
        EXPECT_EQ(r->levels[0].rows, a.rows);
        EXPECT_EQ(r->levels[0].nnz, a.nnz());
        EXPECT_LE(r->levels.back().rows, 50);
        EXPECT_EQ(r->levels.back().kernel, "dense inverse");
        EXPECT_NE(r->detail.find(std::to_string(r->levels.size()) + " levels"), std::string::npos) << r->detail;
        EXPECT_GT(r->operator_complexity, 1.0);
        EXPECT_GT(r->grid_complexity, 1.0);
      }
    }
    EXPECT_FALSE(s.kernel_reason().empty()) << what << ": auto gives its reason";
    EXPECT_EQ(s.kernel(1).rfind("auto -> ", 0), 0u) << s.kernel(1);
    DenseBlock x;
    const SolveResult res = s.solve(RhsKind::random, 1, 5, x);
    expect_solves(a, random_block(a.rows, 1, 5), x, res, o.iteration.stop.rtol, what);
  }
  // (csr-vector, csr-adaptive and csr-sym describe their own setup in the reason even when named; csr-scalar
  // has nothing to say, so the header's "empty for a named kernel" is checked on it)
  SolverOptions named;
  named.kernel = "csr-scalar";
  Solver s(a, named);
  EXPECT_TRUE(s.kernel_reason().empty()) << s.kernel_reason();
  EXPECT_EQ(s.kernel(1), "csr-scalar");
  EXPECT_EQ(s.kernel(4), "csr-scalar");
}

// atol end to end: each column stops at its first residual at or below max(rtol ||b_j||, atol) (the history
// before it is above, the last entry at or below), the residual recomputed from x on the host meets it, and a
// column where atol binds takes fewer iterations than with atol = 0. Column 0 is large (rtol binds), column 1
// small (atol binds), column 2 zero (converged at once, x stays 0).
// SolveOptions::interrupted (Python's Ctrl-C) ends a solve that would otherwise run for a long time: every solver
// stops at a residual check with its columns `interrupted` (never converged), and the same Solver solves again.
TEST_F(GpuApi, InterruptEndsTheSolveAndKeepsTheSetup) {
  const CsrMatrix a = poisson2d_5pt(200);
  for (const SolverKind kind : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
    const std::string what = name_of(kind);
    const int k = kind == SolverKind::cg ? 1 : 2;
    int asked = 0, interrupts_left = 1;
    SolverOptions o;
    o.solver = kind, o.expected_columns = k, o.precond = Preconditioner::jacobi;
    o.iteration.persistent = Switch::off, o.iteration.check_every = 1;
    o.iteration.stop = {1e-300, 0, 2000000};  // unreachable: only the interrupt ends the first solve early
    o.iteration.interrupted = [&] {
      ++asked;
      return interrupts_left > 0 && interrupts_left-- > 0;
    };
    Solver solver(a, o);
    DenseBlock x;
    const SolveResult stopped = solver.solve(RhsKind::random, k, 3, x);
    EXPECT_GE(asked, 1) << what;
    ASSERT_EQ(stopped.columns.size(), static_cast<size_t>(k)) << what;
    for (const ColumnResult& c : stopped.columns) {
      EXPECT_EQ(c.status, ColumnStatus::interrupted) << what;
      EXPECT_LT(c.iterations, 2000000) << what;
    }
    EXPECT_FALSE(stopped.all_converged()) << what;
    solver.set_stop_rule({1e-8, 0, 10000});
    const SolveResult again = solver.solve(RhsKind::random, k, 3, x);
    EXPECT_TRUE(again.all_converged()) << what;
    const DenseBlock b = random_block(a.rows, k, 3);
    for (double r : relative_residuals(a, x, b)) EXPECT_LT(r, 1e-7) << what;
  }
}

TEST_F(GpuApi, AtolStopsEachColumnAtItsTolerance) {
  const CsrMatrix a = poisson2d_5pt(32);
  DenseBlock b = random_block(a.rows, 3, 17);
  for (int32_t i = 0; i < a.rows; ++i) b.at(i, 0) *= 1000.0, b.at(i, 2) = 0.0;
  std::vector<double> b_norm(3, 0.0);
  for (int j = 0; j < 3; ++j) {
    long double s = 0;
    for (int32_t i = 0; i < a.rows; ++i) s += static_cast<long double>(b.at(i, j)) * b.at(i, j);
    b_norm[j] = static_cast<double>(std::sqrt(s));
  }
  const double rtol = 1e-6, atol = 1e-3;
  ASSERT_GT(rtol * b_norm[0], atol);
  ASSERT_LT(rtol * b_norm[1], atol / 10);
  struct Path {
    std::string name;
    SolverKind solver;
    VectorOps ops;
    Switch persistent;
  };
  for (const Path& path : {Path{"cg fused", SolverKind::cg, VectorOps::fused, Switch::off},
                           Path{"cg persistent", SolverKind::cg, VectorOps::fused, Switch::on},
                           Path{"cg thrust", SolverKind::cg, VectorOps::thrust, Switch::off},
                           Path{"multi-cg", SolverKind::multi_cg, VectorOps::fused, Switch::off},
                           Path{"block-cg", SolverKind::block_cg, VectorOps::fused, Switch::off}}) {
    SolverOptions o;
    o.solver = path.solver, o.expected_columns = 3;
    o.iteration.vector_ops = path.ops, o.iteration.persistent = path.persistent;
    o.iteration.keep_history = true;
    o.iteration.stop = {rtol, atol, 5000};
    Solver with_atol(a, o);
    DenseBlock x(a.rows, 3, 0.0);  // the initial guess
    const SolveResult r = with_atol.solve(b, x);
    if (path.persistent == Switch::on) EXPECT_TRUE(r.used_persistent) << path.name;
    o.iteration.stop.atol = 0;
    DenseBlock x_rtol(a.rows, 3, 0.0);
    const SolveResult r_rtol = Solver(a, o).solve(b, x_rtol);
    ASSERT_EQ(r.columns.size(), 3u) << path.name;
    ASSERT_EQ(r.history.size(), 3u) << path.name;
    const std::vector<double> rel = relative_residuals(a, x, b);
    for (int j = 0; j < 3; ++j) {
      const std::string what = path.name + " column " + std::to_string(j);
      const double tol = std::max(rtol * b_norm[j], atol);
      const ColumnResult& c = r.columns[j];
      EXPECT_TRUE(c.status == ColumnStatus::converged || (path.solver == SolverKind::block_cg && c.status == ColumnStatus::deflated))
          << what << ": " << to_string(c.status);
      EXPECT_NEAR(c.b_norm, b_norm[j], 1e-12 * b_norm[j]) << what;
      // (the solvers compare ||r||^2 with tol^2 and ||b_j|| is summed on the device: a relative 1e-12 either way)
      const double above = tol * (1 - 1e-12), below = tol * (1 + 1e-12);
      EXPECT_LE(c.recursive_residual, below) << what;
      // the stop: the last recorded residual is the first at or below the tolerance
      const auto& h = r.history[j];
      ASSERT_FALSE(h.empty()) << what;
      EXPECT_EQ(h.back().first, c.iterations) << what;
      EXPECT_LE(h.back().second, below) << what;
      for (size_t e = 0; e + 1 < h.size(); ++e) EXPECT_GT(h[e].second, above) << what << ": went on past iteration " << h[e].first;
      // the true residual, recomputed from x on the host
      const double true_norm = rel[j] * b_norm[j];
      double x_norm = 0;
      for (int32_t i = 0; i < a.rows; ++i) x_norm = std::max(x_norm, std::abs(x.at(i, j)));
      EXPECT_LE(true_norm, 1.01 * tol + 64 * kEps * a.rows * (8 * x_norm + b_norm[j])) << what;
      if (j == 2) {
        EXPECT_EQ(c.iterations, 0) << what;
        for (int32_t i = 0; i < a.rows; ++i) ASSERT_EQ(x.at(i, 2), 0.0) << what;
      }
    }
    EXPECT_LT(r.columns[1].iterations, r_rtol.columns[1].iterations) << path.name << ": atol did not stop column 1 sooner";
    EXPECT_LE(r_rtol.columns[1].recursive_residual, rtol * b_norm[1] * (1 + 1e-12)) << path.name;
  }
}

// Errors of the GPU setup and solve, each a typed exception with what went wrong.
TEST_F(GpuApi, SetupAndSolveErrorsAreTyped) {
  const CsrMatrix a = poisson2d_5pt(10);
  SolverOptions o;
  o.kernel = "csr-sym", o.iteration.deterministic = true;  // atomics: not deterministic
  try {
    Solver s(a, o);
    ADD_FAILURE() << "a deterministic solve accepted an atomic kernel";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel 'csr-sym' is not deterministic"), std::string::npos) << e.what();
  }
  o = SolverOptions{};
  o.expected_columns = 2000000000;  // 6 x 100 rows x 2e9 columns x 8 bytes: far beyond any device
  try {
    Solver s(a, o);
    ADD_FAILURE() << "a setup for 2e9 columns fitted";
  } catch (const DeviceMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("not enough GPU memory: this solve needs about"), std::string::npos) << e.what();
  }
  o = SolverOptions{};
  o.solver = SolverKind::multi_cg, o.iteration.vector_ops = VectorOps::thrust;
  Solver thrust_multi(a, o);
  DenseBlock x;
  EXPECT_THROW(thrust_multi.solve(RhsKind::ones, 2, 0, x), UsageError);
  o = SolverOptions{};
  o.iteration.persistent = Switch::on, o.kernel = "csr-vector";  // a named kernel keeps no persistent layout
  Solver named(a, o);
  try {
    named.solve(RhsKind::ones, 1, 0, x);
    ADD_FAILURE() << "persistent on with a named kernel";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("the persistent CG was asked for"), std::string::npos) << e.what();
  }
  // device inputs: shapes and pointers
  o = SolverOptions{};
  Solver s(a, o);
  DeviceArray<double> db(std::vector<double>(static_cast<size_t>(a.rows), 1.0));
  EXPECT_THROW(s.solve(DeviceBlockRef{a.rows - 1, 1, db.data()}, DeviceBlockRef{a.rows - 1, 1, db.data()}), UsageError);
  try {
    s.solve(DeviceBlockRef{a.rows, 1, db.data()}, DeviceBlockRef{a.rows, 1, nullptr});
    ADD_FAILURE() << "a null X accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("DeviceBlockRef: missing data"), std::string::npos) << e.what();
  }
  try {
    Solver d(DeviceCsrRef{a.rows, a.cols, a.nnz(), nullptr, nullptr, nullptr}, o);
    ADD_FAILURE() << "a device matrix without arrays accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("DeviceCsrRef: negative sizes or missing arrays"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Solver(DeviceCsrRef{-1, 3, 0, nullptr, nullptr, nullptr}, o), UsageError);
}

// A batch between two reads of the residuals runs the iterations its columns' rates say they still need (at most
// check_every): a fixed batch's iterations past convergence run at full cost as no-ops. Against a read after every
// iteration (check_every = 1: the fewest applies a solve can make), the solution is the same bit for bit, each
// column's iterations the same, and at most two more applies ran; for AMG-PCG (few, costly iterations) and
// Jacobi-CG, cg and multi-cg, replayed from graphs and launched one by one. Among the sizes, one whose iteration
// count a fixed batch of 8 overshoots by 3 or more (so that the bound tells the two rules apart).
TEST_F(GpuApi, BatchesEndNearConvergence) {
  bool tells_apart = false;
  for (const int side : {96, 128, 160})
    for (const Preconditioner p : {Preconditioner::amg, Preconditioner::jacobi})
      for (const SolverKind kind : {SolverKind::cg, SolverKind::multi_cg})
        for (const Switch graph : {Switch::on, Switch::off}) {
          const CsrMatrix a = poisson2d_5pt(side);
          const int k = kind == SolverKind::cg ? 1 : 2;
          const std::string what = std::to_string(side) + " " + name_of(p) + " " + name_of(kind) +
                                   (graph == Switch::on ? " graph" : " launches");
          SolverOptions o;
          o.solver = kind, o.expected_columns = k, o.precond = p, o.kernel = "csr-vector";
          o.iteration.deterministic = true, o.iteration.persistent = Switch::off, o.iteration.graph = graph;
          o.iteration.stop.rtol = 1e-9;
          const DenseBlock b = random_block(a.rows, k, 11);
          o.iteration.check_every = 1;
          Solver each(a, o);
          DenseBlock x1(a.rows, k, 0.0), x8(a.rows, k, 0.0);  // (x is the start: zero)
          const SolveResult r1 = each.solve(b, x1);
          o.iteration.check_every = 8;
          Solver batched(a, o);
          const SolveResult r8 = batched.solve(b, x8);
          expect_solves(a, b, x8, r8, 1e-9, what);
          ASSERT_EQ(r8.columns.size(), r1.columns.size()) << what;
          for (size_t j = 0; j < r1.columns.size(); ++j) {
            EXPECT_EQ(r8.columns[j].iterations, r1.columns[j].iterations) << what << " column " << j;
            tells_apart |= r1.columns[j].iterations % 8 >= 1 && r1.columns[j].iterations % 8 <= 5;
          }
          EXPECT_EQ(std::memcmp(x1.data.data(), x8.data.data(), x1.data.size() * sizeof(double)), 0) << what;
          EXPECT_LE(r8.operator_applies, r1.operator_applies + 2) << what;
        }
  EXPECT_TRUE(tells_apart) << "no size whose iterations a fixed batch of 8 overshoots by 3 or more";
}

// Timing, progress and profiling options on the GPU: the per-kernel table counts every SpMV the iteration
// ran, progress lines reach the callback (the library prints nothing), profiling brackets change nothing.
TEST_F(GpuApi, TimingProgressAndProfilingOptions) {
  const CsrMatrix a = poisson2d_5pt(40);
  const DenseBlock b = random_block(a.rows, 1, 8);
  SolverOptions o;
  o.timing = KernelTiming::kernels, o.iteration.persistent = Switch::off, o.profile_solves = true;
  o.iteration.monitor_every = 10;
  std::vector<std::string> lines;
  o.iteration.progress = [&](const std::string& l) { lines.push_back(l); };
  Solver s(a, o);
  DenseBlock x(a.rows, 1, 0.0);
  ::testing::internal::CaptureStdout();
  const SolveResult r = s.solve(b, x);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), "");
  expect_solves(a, b, x, r, o.iteration.stop.rtol, "timed");
  EXPECT_FALSE(r.used_graph) << "per-kernel timing runs without a graph (auto)";
  int64_t spmv_calls = 0, residual_calls = 0;
  for (const KernelStat& k : r.kernels) {
    if (k.name == "spmv") spmv_calls += k.calls;
    if (k.name == "residual") residual_calls += k.calls;
  }
  EXPECT_GE(spmv_calls, r.columns[0].iterations);
  EXPECT_GE(residual_calls, 2) << "the first residual and the true residual that confirms convergence";
  EXPECT_EQ(spmv_calls + residual_calls, r.operator_applies)
      << "every SpMV of the iteration (and the residuals b - A x) in the table";
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines.front().find("iter      0"), std::string::npos) << lines.front();
  EXPECT_GE(lines.size(), static_cast<size_t>(r.columns[0].iterations / 10)) << "a line per 10 iterations";
}


// The initial guess on the device path: an exact one is taken as such (0 iterations) for right-hand sides made
// on the device and for host blocks; a wrong shape is refused.
TEST_F(GpuApi, InitialGuessIsUsed) {
  const CsrMatrix a = poisson2d_5pt(20);
  for (const SolverKind kind : {SolverKind::cg, SolverKind::multi_cg, SolverKind::block_cg}) {
    SolverOptions o;
    o.solver = kind, o.expected_columns = 2, o.iteration.stop.rtol = 1e-6;
    Solver s(a, o);
    SolverOptions tight = o;
    tight.iteration.stop.rtol = 1e-13;
    DenseBlock exact(a.rows, 2, std::nan(""));
    ASSERT_TRUE(Solver(a, tight).solve(RhsKind::random, 2, 31, exact).all_converged());
    DenseBlock x(a.rows, 2, std::nan(""));
    const SolveResult r = s.solve(RhsKind::random, 2, 31, x, &exact);
    for (int j = 0; j < 2; ++j) EXPECT_EQ(r.columns[j].iterations, 0) << name_of(kind) << " column " << j;
    EXPECT_EQ(x.data, exact.data) << name_of(kind) << ": a converged guess comes back unchanged";
    DenseBlock y = exact;
    const SolveResult rh = s.solve(random_block(a.rows, 2, 31), y);
    for (int j = 0; j < 2; ++j) EXPECT_EQ(rh.columns[j].iterations, 0) << name_of(kind) << " host blocks, column " << j;
    const DenseBlock wrong(a.rows, 3, 0.0);
    EXPECT_THROW(s.solve(RhsKind::random, 2, 31, x, &wrong), UsageError);
  }
}

// ---- spcg::fingerprint: the device hash spcg.cg's cache compares (python/spcg/_device.py keeps its reference) ----
// The definition on the host, element by element: int32 widened with its sign, 64-bit elements by their bits.
uint64_t host_fingerprint(const void* data, int64_t n, int element_bytes, int tag) {
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint64_t w = 0;
    if (element_bytes == 4) w = static_cast<uint64_t>(static_cast<int64_t>(static_cast<const int32_t*>(data)[i]));
    else std::memcpy(&w, static_cast<const char*>(data) + 8 * i, 8);
    uint64_t z = w + 0x9E3779B97F4A7C15ull * (static_cast<uint64_t>(i) + (static_cast<uint64_t>(tag) << 40));
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    total += z ^ (z >> 31);
  }
  return total;
}

// (the host's row offsets are 64-bit words, the values the device's int32 offsets widen to)
std::array<uint64_t, 3> host_fingerprint(const CsrMatrix& a) {
  return {host_fingerprint(a.row_ptr.data(), a.rows + int64_t{1}, 8, 0), host_fingerprint(a.col_idx.data(), a.nnz(), 4, 1),
          host_fingerprint(a.values.data(), a.nnz(), 8, 2)};
}

// Every argument is checked before the device is touched; empty arrays need no device at all.
TEST(Fingerprint, ArgumentsAreCheckedBeforeTheDevice) {
  EXPECT_TRUE(fingerprint(std::vector<DeviceWordsRef>{}).empty());
  EXPECT_EQ(fingerprint({DeviceWordsRef{nullptr, 0, 4}, DeviceWordsRef{nullptr, 0, 8}}), (std::vector<uint64_t>{0, 0}));
  EXPECT_EQ(fingerprint(DeviceCsrRef{}), (std::array<uint64_t, 3>{0, 0, 0}));  // no rows: row_ptr may be null
  const int32_t host[2] = {1, 2};
  const std::vector<std::pair<std::vector<DeviceWordsRef>, std::string>> bad = {
      {{DeviceWordsRef{nullptr, 0, 2}}, "elements of 2 bytes"},
      {{DeviceWordsRef{nullptr, -1, 4}}, "a negative count"},
      {{DeviceWordsRef{nullptr, 3, 8}}, "3 elements at null"},
      {std::vector<DeviceWordsRef>(4), "4 arrays, at most 3"},
      {{DeviceWordsRef{reinterpret_cast<const char*>(host) + 2, 1, 4}}, "not aligned to its 4-byte elements"}};
  for (const auto& [arrays, message] : bad) {
    try {
      fingerprint(arrays);
      ADD_FAILURE() << message << ": accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(fingerprint(DeviceCsrRef{-1, 0, 0, nullptr, nullptr, nullptr}), UsageError);
  EXPECT_THROW(fingerprint(DeviceCsrRef{2, 2, 0, nullptr, nullptr, nullptr}), UsageError);  // rows, no row pointers
  // host memory: refused by name where there is a GPU (the kernel would fault on it), CudaError where there is none
  std::string why;
  if (spcg::test::gpu_available(&why)) EXPECT_THROW(fingerprint({DeviceWordsRef{host, 2, 4}}), UsageError);
  else EXPECT_THROW(fingerprint({DeviceWordsRef{host, 2, 4}}), CudaError);
}

// int32 (negative ones included), int64 and float64 arrays of every length class (0, 1, odd, past 2^23 words),
// at every position: the host definition's hashes, bit for bit.
TEST_F(GpuApi, FingerprintIsTheHostDefinition) {
  std::mt19937_64 rng(34);
  std::normal_distribution<double> normal;
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{2}, int64_t{31}, int64_t{257}, int64_t{10007}, (int64_t{1} << 23) + 5}) {
    std::vector<int32_t> i32(static_cast<size_t>(n));
    std::vector<int64_t> i64(static_cast<size_t>(n));
    std::vector<double> f64(static_cast<size_t>(n));
    for (size_t k = 0; k < i32.size(); ++k) {
      i32[k] = static_cast<int32_t>(static_cast<uint32_t>(rng()));
      i64[k] = static_cast<int64_t>(rng());
      f64[k] = std::ldexp(normal(rng), static_cast<int>(rng() % 2000) - 1000);
    }
    const DeviceArray<int32_t> d32(i32);
    const DeviceArray<int64_t> d64(i64);
    const DeviceArray<double> df(f64);
    const DeviceWordsRef a{d32.data(), n, 4}, b{d64.data(), n, 8}, c{df.data(), n, 8};
    const std::string what = std::to_string(n) + " elements";
    EXPECT_EQ(fingerprint({a, b, c}), (std::vector<uint64_t>{host_fingerprint(i32.data(), n, 4, 0),
                                                            host_fingerprint(i64.data(), n, 8, 1),
                                                            host_fingerprint(f64.data(), n, 8, 2)})) << what;
    EXPECT_EQ(fingerprint({c, a}), (std::vector<uint64_t>{host_fingerprint(f64.data(), n, 8, 0),
                                                         host_fingerprint(i32.data(), n, 4, 1)})) << what;
    EXPECT_EQ(fingerprint({b}), (std::vector<uint64_t>{host_fingerprint(i64.data(), n, 8, 0)})) << what;
  }
}

// A device CSR: the host definition's hashes, on the legacy stream and on the caller's non-blocking stream, where
// a change written just before is seen (one value a ulp larger; two column indices swapped); the same hashes from
// several threads at once (each has its own scratch).
TEST_F(GpuApi, FingerprintOfADeviceCsrSeesEveryChangeOnTheCallersStream) {
  CsrMatrix a = poisson2d_5pt(40);
  const std::array<uint64_t, 3> want = host_fingerprint(a);
  DeviceArray<int32_t> rp(row_offsets32(a)), ci(a.col_idx);
  DeviceArray<double> va(a.values);
  const DeviceCsrRef ref{a.rows, a.cols, a.nnz(), rp.data(), ci.data(), va.data()};
  EXPECT_EQ(fingerprint(ref), want);
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(fingerprint(ref, stream), want);

  const size_t q = static_cast<size_t>(a.nnz() / 2);
  a.values[q] = std::nextafter(a.values[q], 1e300);
  ASSERT_EQ(cudaMemcpyAsync(va.data() + q, &a.values[q], sizeof(double), cudaMemcpyHostToDevice, stream), cudaSuccess);
  std::array<uint64_t, 3> got = fingerprint(ref, stream);
  EXPECT_EQ(got, host_fingerprint(a));
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  EXPECT_NE(got[2], want[2]);

  std::swap(a.col_idx[0], a.col_idx[1]);
  ASSERT_EQ(cudaMemcpyAsync(ci.data(), a.col_idx.data(), 2 * sizeof(int32_t), cudaMemcpyHostToDevice, stream), cudaSuccess);
  got = fingerprint(ref, stream);
  EXPECT_EQ(got, host_fingerprint(a));
  EXPECT_NE(got[1], want[1]);
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  const std::array<uint64_t, 3> now = host_fingerprint(a);
  spcg::test::rethrow_first(spcg::test::on_threads(4, [&](int) {
    for (int k = 0; k < 20; ++k)
      if (fingerprint(ref) != now) throw Error("a thread's fingerprint differs");
  }));
}

// A device CSR put in canonical order: rows of random entries in random order with repeated columns (values that
// are multiples of 1/4, so the sums are exact in any order) come out as the host's csr_from_triplets makes them;
// is_canonical says so before and after; empty rows, an empty matrix and the caller's arrays left as they were.
TEST_F(GpuApi, CanonicalCopyOfADeviceCsrSortsRowsAndSumsDuplicates) {
  SplitMix64 rng(11);
  for (const int32_t n : {0, 1, 7, 300}) {
    std::vector<int32_t> ti, tj;
    std::vector<double> tv;
    HostVector<int32_t> row_ptr{0}, col_idx;
    HostVector<double> values;
    for (int32_t i = 0; i < n; ++i) {
      const int length = i % 5 == 3 ? 0 : static_cast<int>(rng.next() % 9);
      for (int e = 0; e < length; ++e) {
        const int32_t j = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(std::min(n, 6) + i % 3)) % n;
        const double v = 0.25 * static_cast<double>(static_cast<int64_t>(rng.next() % 17) - 8);
        ti.push_back(i), tj.push_back(j), tv.push_back(v), col_idx.push_back(j), values.push_back(v);
      }
      row_ptr.push_back(static_cast<int32_t>(col_idx.size()));
    }
    int64_t duplicates = 0;
    const CsrMatrix want = csr_from_triplets(n, n, ti, tj, tv, &duplicates);
    DeviceArray<int32_t> rp(row_ptr), ci(col_idx.empty() ? HostVector<int32_t>{0} : col_idx);
    DeviceArray<double> va(values.empty() ? HostVector<double>{0.0} : values);
    const DeviceCsrRef a{n, n, static_cast<int64_t>(col_idx.size()), rp.data(), ci.data(), va.data()};
    const bool sorted = duplicates == 0 && std::equal(want.col_idx.begin(), want.col_idx.end(), col_idx.begin(), col_idx.end());
    EXPECT_EQ(is_canonical(a), sorted) << n << " rows";
    DeviceArray<int32_t> out_rp(static_cast<size_t>(n) + 1), out_ci(std::max<size_t>(col_idx.size(), 1));
    DeviceArray<double> out_va(std::max<size_t>(values.size(), 1));
    const int64_t kept = canonical_copy(a, out_rp.data(), out_ci.data(), out_va.data());
    ASSERT_EQ(kept, want.nnz()) << n << " rows";
    EXPECT_EQ(static_cast<int64_t>(col_idx.size()) - kept, duplicates) << n << " rows";
    const std::vector<int32_t> got_rp = out_rp.download();
    EXPECT_EQ(std::vector<RowOffset>(got_rp.begin(), got_rp.end()), std::vector<RowOffset>(want.row_ptr.begin(), want.row_ptr.end())) << n << " rows";
    std::vector<int32_t> got_ci = out_ci.download();
    std::vector<double> got_va = out_va.download();
    got_ci.resize(static_cast<size_t>(kept)), got_va.resize(static_cast<size_t>(kept));
    EXPECT_EQ(got_ci, std::vector<int32_t>(want.col_idx.begin(), want.col_idx.end())) << n << " rows";
    EXPECT_EQ(got_va, std::vector<double>(want.values.begin(), want.values.end())) << n << " rows";
    const DeviceCsrRef out{n, n, kept, out_rp.data(), out_ci.data(), out_va.data()};
    EXPECT_TRUE(is_canonical(out)) << n << " rows";
    if (!col_idx.empty()) EXPECT_EQ(ci.download(), std::vector<int32_t>(col_idx.begin(), col_idx.end())) << "the input is kept";
  }
}

}  // namespace
