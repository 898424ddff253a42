// Solver::update_values: new values on the setup's sparsity pattern. An update must give what a fresh setup on
// the new values gives (bit for bit in deterministic mode, where both run the same kernels on the same values
// and, with AMG, the same aggregates: the default theta 0 makes every nonzero strong, so the aggregates depend
// on the pattern alone), keep the kernel choice, refuse another pattern or values the checks refuse and then
// leave the solver as it was. Host-backend cases run everywhere; GPU cases skip without a device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/device_array.hpp"
#include "spcg/spcg.hpp"
#include "tests/residual_checks.hpp"
#include "tests/test_util.hpp"

using namespace spcg;

namespace {

// A's values changed on its pattern, symmetrically, keeping it SPD where A is diagonally dominant: each
// off-diagonal pair scaled by a factor in [0.75, 1.25) hashed from its (unordered) position, the diagonal by 1.5.
CsrMatrix perturbed(const CsrMatrix& a) {
  CsrMatrix b = a;
  for (int32_t i = 0; i < b.rows; ++i)
    for (int32_t q = b.row_ptr[i]; q < b.row_ptr[i + 1]; ++q) {
      const int64_t j = b.col_idx[q], lo = std::min<int64_t>(i, j), hi = std::max<int64_t>(i, j);
      const double h = static_cast<double>((static_cast<uint64_t>(lo) * 2654435761u + static_cast<uint64_t>(hi) * 40503u) % 1000) / 1000.0;
      b.values[q] *= i == j ? 1.5 : 0.75 + 0.5 * h;
    }
  return b;
}

CsrMatrix scaled(const CsrMatrix& a, double by) {
  CsrMatrix b = a;
  for (double& v : b.values) v *= by;
  return b;
}


bool bitwise_equal(const DenseBlock& x, const DenseBlock& y) {
  return x.rows == y.rows && x.cols == y.cols &&
         std::memcmp(x.data.data(), y.data.data(), x.data.size() * sizeof(double)) == 0;
}

// Solves with k random columns into a NaN-poisoned x (zero initial guess).
DenseBlock solve_random(Solver& s, int k, uint64_t seed, SolveResult* r = nullptr) {
  DenseBlock x(s.rows(), k, std::numeric_limits<double>::quiet_NaN());
  const SolveResult res = s.solve(RhsKind::random, k, seed, x);
  for (const ColumnResult& c : res.columns)
    EXPECT_TRUE(c.status == ColumnStatus::converged || c.status == ColumnStatus::deflated) << to_string(c.status);
  if (r) *r = res;
  return x;
}

bool has_phase(const std::vector<Phase>& phases, std::string_view name) {
  for (const Phase& p : phases)
    if (p.name == name) return true;
  return false;
}

// ---- the host backend (Eigen's CG) ----

SolverOptions host_options() {
  SolverOptions o;
  o.backend = Backend::host;
  o.precond = Preconditioner::jacobi;
  o.iteration.stop.rtol = 1e-10;
  o.matrix_name = "A";
  return o;
}

TEST(HostUpdate, GivesTheFreshSetupsSolution) {
  const CsrMatrix a = poisson2d_5pt(24), b = perturbed(a);
  Solver updated(a, host_options());
  EXPECT_TRUE(updated.update_phases().empty());
  const DenseBlock x_old = solve_random(updated, 2, 3);
  updated.update_values(b);
  Solver fresh(b, host_options());
  const DenseBlock x_new = solve_random(updated, 2, 3), x_fresh = solve_random(fresh, 2, 3);
  EXPECT_TRUE(bitwise_equal(x_new, x_fresh));
  EXPECT_GT(spcg::test::max_relative_difference(x_old, x_new), 1e-3);  // the values did change
  EXPECT_EQ(updated.updates(), 1);
  ASSERT_FALSE(updated.update_phases().empty());
  EXPECT_EQ(updated.update_phases().back().name, kUpdateTotalPhase);
  EXPECT_EQ(updated.matrix().values[0], b.values[0]);
  const std::vector<double> rel = relative_residuals(b, x_new, random_block(b.rows, 2, 3));
  for (double r : rel) EXPECT_LE(r, 20 * 1e-10);
}

TEST(HostUpdate, ValuesAloneInCsrOrder) {
  const CsrMatrix a = poisson2d_5pt(16), b = scaled(perturbed(a), 3.0);
  Solver by_matrix(a, host_options()), by_values(a, host_options());
  by_matrix.update_values(b);
  by_values.update_values(b.values.data(), b.nnz());
  EXPECT_TRUE(bitwise_equal(solve_random(by_matrix, 1, 5), solve_random(by_values, 1, 5)));
  EXPECT_THROW(by_values.update_values(b.values.data(), b.nnz() - 1), InputError);
  EXPECT_THROW(by_values.update_values(nullptr, b.nnz()), UsageError);
  EXPECT_THROW(by_values.update_values(DeviceValuesRef{b.nnz(), b.values.data()}), UsageError);  // host backend
}

// Another pattern is refused naming the first difference; the solver then solves as before.
TEST(HostUpdate, AnotherPatternIsRefusedAndTheSolverKept) {
  const CsrMatrix a = poisson2d_5pt(8);
  Solver s(a, host_options());
  const DenseBlock before = solve_random(s, 1, 9);
  auto refused = [&](const CsrMatrix& c, const std::string& words) {
    try {
      s.update_values(c);
      ADD_FAILURE() << "accepted: " << words;
    } catch (const InputError& e) {
      EXPECT_EQ(e.file(), "A");
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused(poisson2d_5pt(9), "the new matrix is 81 x 81, the solver's 64 x 64");
  CsrMatrix fewer = a;  // row 17 loses its last entry
  fewer.col_idx.erase(fewer.col_idx.begin() + fewer.row_ptr[17] - 1);
  fewer.values.erase(fewer.values.begin() + fewer.row_ptr[17] - 1);
  for (int32_t i = 17; i <= fewer.rows; ++i) --fewer.row_ptr[i];
  refused(fewer, "the new matrix has " + std::to_string(a.nnz() - 1) + " entries");
  CsrMatrix moved = a;  // row 17 (1-based), same entry count, another column for its last entry
  const int32_t last = moved.row_ptr[17] - 1;
  moved.col_idx[last] += 1;
  refused(moved, "row 17's pattern differs: its entry " + std::to_string(a.row_length(16)) + " is in column " +
                     std::to_string(a.col_idx[last] + 2));
  CsrMatrix shifted = a;  // rows 2 and 3 trade an entry: the row pointers differ, the count not
  ++shifted.row_ptr[2];
  refused(shifted, "row 2's pattern differs: it holds");
  EXPECT_EQ(s.updates(), 0);
  EXPECT_TRUE(bitwise_equal(solve_random(s, 1, 9), before));
}

// The setup's checks run on the new values, with the setup's errors, and a refusal keeps the old values.
TEST(HostUpdate, TheChecksRunOnTheNewValues) {
  const CsrMatrix a = poisson2d_5pt(8);
  Solver s(a, host_options());
  const DenseBlock before = solve_random(s, 1, 4);
  CsrMatrix nan = a;
  nan.values[5] = std::numeric_limits<double>::quiet_NaN();
  try {
    s.update_values(nan);
    ADD_FAILURE() << "NaN accepted";
  } catch (const MatrixRefusedError& e) {
    EXPECT_FALSE(e.overridable());
    EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos) << e.what();
  }
  CsrMatrix inf = a;
  inf.values[0] = std::numeric_limits<double>::infinity();
  EXPECT_THROW(s.update_values(inf.values.data(), inf.nnz()), MatrixRefusedError);
  CsrMatrix asymmetric = a;
  asymmetric.values[1] *= 2;
  try {
    s.update_values(asymmetric);
    ADD_FAILURE() << "asymmetry accepted";
  } catch (const MatrixRefusedError& e) {
    EXPECT_TRUE(e.overridable());
    EXPECT_NE(std::string(e.what()).find("not symmetric"), std::string::npos) << e.what();
  }
  CsrMatrix negative = a;
  for (int32_t q = a.row_ptr[3]; q < a.row_ptr[4]; ++q)
    negative.values[q] = a.col_idx[q] == 3 ? -4.0 : a.values[q];
  try {
    s.update_values(negative);
    ADD_FAILURE() << "a negative diagonal accepted";
  } catch (const MatrixRefusedError& e) {
    EXPECT_NE(std::string(e.what()).find("row 4 has diagonal -4"), std::string::npos) << e.what();
  }
  EXPECT_EQ(s.updates(), 0);
  EXPECT_TRUE(bitwise_equal(solve_random(s, 1, 4), before));
}

// ---- the GPU backend ----

class GpuUpdate : public spcg::test::GpuTest {};

struct Problem {
  std::string name;
  CsrMatrix first, next;  // set up on first, updated to next
};

std::vector<Problem> problems() {
  std::vector<Problem> p;
  const CsrMatrix poisson = poisson3d_7pt(16);
  p.push_back({"poisson3d:16 perturbed", poisson, perturbed(poisson)});
  p.push_back({"jump3d:16 seed 1 -> 2", jump3d(16, 1), jump3d(16, 2)});  // other jumps on the same grid
  const CsrMatrix fv1 = read_matrix_market(spcg::test::input("fv1.mtx")).matrix;
  p.push_back({"fv1.mtx scaled", fv1, scaled(fv1, 2.5)});
  return p;
}

SolverOptions gpu_options(Preconditioner m, const std::string& kernel, SolverKind kind = SolverKind::cg, int k = 1) {
  SolverOptions o;
  o.backend = Backend::gpu;
  o.precond = m;
  o.kernel = kernel;
  o.solver = kind;
  o.expected_columns = k;
  o.iteration.deterministic = true;
  o.iteration.stop.rtol = 1e-9;
  o.iteration.stop.max_iterations = 20000;
  return o;
}

// For every preconditioner and kernel: update + solve gives a fresh setup's solution bit for bit (deterministic
// mode), the kernel and the preconditioner's kind and levels are kept, the precision chosen as a fresh setup
// chooses it; a second update (back to the first values) gives the first setup's answer again.
TEST_F(GpuUpdate, EqualsAFreshSetupForEveryPreconditionerAndKernel) {
  const Preconditioner preconditioners[] = {Preconditioner::none, Preconditioner::jacobi, Preconditioner::block_jacobi,
                                            Preconditioner::chebyshev, Preconditioner::amg};
  for (const Problem& p : problems())
    for (const Preconditioner m : preconditioners)
      for (const char* kernel : {"csr-vector", "dia", "auto"}) {
        const std::string what = p.name + ", " + name_of(m) + ", " + kernel;
        const SolverOptions o = gpu_options(m, kernel);
        Solver updated(p.first, o);
        const std::string chosen = updated.kernel(1);
        const int levels = updated.preconditioner() ? static_cast<int>(updated.preconditioner()->levels.size()) : 0;
        SolveResult r_old;
        const DenseBlock x_old = solve_random(updated, 1, 11, &r_old);
        updated.update_values(p.next);
        Solver fresh(p.next, o);
        SolveResult r_new, r_fresh;
        const DenseBlock x_new = solve_random(updated, 1, 11, &r_new), x_fresh = solve_random(fresh, 1, 11, &r_fresh);
        EXPECT_TRUE(bitwise_equal(x_new, x_fresh)) << what << ": differs by " << spcg::test::max_relative_difference(x_new, x_fresh);
        EXPECT_EQ(r_new.columns[0].iterations, r_fresh.columns[0].iterations) << what;
        EXPECT_GT(spcg::test::max_relative_difference(x_old, x_new), 1e-6) << what << ": the values did not change the solution";
        EXPECT_EQ(updated.kernel(1), chosen) << what;
        EXPECT_EQ(fresh.kernel(1), chosen) << what;
        if (updated.preconditioner()) {
          EXPECT_EQ(updated.preconditioner()->kind, m) << what;
          EXPECT_EQ(static_cast<int>(updated.preconditioner()->levels.size()), levels) << what;
        }
        const std::vector<double> rel = relative_residuals(p.next, x_new, random_block(p.next.rows, 1, 11));
        EXPECT_LE(rel[0], 20 * 1e-9) << what;
        // the precision is chosen again on the new values, as a fresh setup chooses it
        EXPECT_EQ(updated.precision(), fresh.precision()) << what;
        EXPECT_EQ(updated.precision_reason(), fresh.precision_reason()) << what;
        // a second update, back to the first values: AMG's products now make their values alone on the columns
        // the first update kept, and R = P' gathers through its kept order
        updated.update_values(p.first);
        Solver first(p.first, o);
        EXPECT_TRUE(bitwise_equal(solve_random(updated, 1, 11), solve_random(first, 1, 11))) << what << ", second update";
        EXPECT_TRUE(bitwise_equal(solve_random(updated, 1, 11), x_old)) << what << ", second update: the setup's answer";
      }
}

// Block CG at width 4 (the SpMM kernels, AMG's columnwise level operators under --deterministic) and a chain
// of updates: each equals a fresh setup.
TEST_F(GpuUpdate, BlockCgAndAChainOfUpdates) {
  const CsrMatrix a = poisson3d_7pt(20);
  for (const Preconditioner m : {Preconditioner::jacobi, Preconditioner::amg}) {
    const SolverOptions o = gpu_options(m, "auto", SolverKind::block_cg, 4);
    Solver updated(a, o);
    const std::string chosen = updated.kernel(4);
    CsrMatrix next = a;
    for (int step = 1; step <= 3; ++step) {
      next = perturbed(next);
      updated.update_values(next);
      Solver fresh(next, o);
      const std::string what = std::string(name_of(m)) + " step " + std::to_string(step);
      EXPECT_TRUE(bitwise_equal(solve_random(updated, 4, 2), solve_random(fresh, 4, 2))) << what;
      EXPECT_EQ(updated.kernel(4), chosen) << what;
      EXPECT_EQ(updated.updates(), step);
    }
  }
}

// auto's timed choice is kept (not made again on the new values), and its reason with it.
TEST_F(GpuUpdate, AutosChoiceIsKept) {
  const CsrMatrix a = read_matrix_market(spcg::test::input("nos4.mtx")).matrix;
  SolverOptions o;
  o.backend = Backend::gpu;
  o.solver = SolverKind::block_cg, o.expected_columns = 4;
  Solver s(a, o);
  const std::string k1 = s.kernel(1), k4 = s.kernel(4), reason = s.kernel_reason();
  for (int step = 0; step < 3; ++step) {
    s.update_values(scaled(a, 1.0 + step));
    EXPECT_EQ(s.kernel(1), k1);
    EXPECT_EQ(s.kernel(4), k4);
    EXPECT_EQ(s.kernel_reason(), reason);
  }
  const std::vector<double> rel = relative_residuals(s.matrix(), solve_random(s, 4, 1), random_block(a.rows, 4, 1));
  for (double r : rel) EXPECT_LE(r, 20 * o.iteration.stop.rtol);
}

// The three ways in (a host CSR, host values, device values) and a device-input Solver agree bit for bit.
TEST_F(GpuUpdate, ValuesFromTheHostOrTheDevice) {
  const CsrMatrix a = poisson3d_7pt(12), b = perturbed(a);
  const SolverOptions o = gpu_options(Preconditioner::chebyshev, "auto");
  Solver by_matrix(a, o), by_values(a, o), by_device(a, o);
  by_matrix.update_values(b);
  by_values.update_values(b.values.data(), b.nnz());
  DeviceArray<double> values(std::vector<double>(b.values.begin(), b.values.end()));
  by_device.update_values(DeviceValuesRef{b.nnz(), values.data()});
  const DenseBlock x = solve_random(by_matrix, 1, 3);
  EXPECT_TRUE(bitwise_equal(solve_random(by_values, 1, 3), x));
  EXPECT_TRUE(bitwise_equal(solve_random(by_device, 1, 3), x));
  EXPECT_EQ(by_device.matrix().values[7], b.values[7]);  // the host copy is the new values' (downloaded)
  EXPECT_EQ(by_values.matrix().values[7], b.values[7]);  // (the values alone went up: downloaded too)
  EXPECT_EQ(by_values.matrix().col_idx, a.col_idx);
  EXPECT_THROW(by_device.update_values(DeviceValuesRef{b.nnz() + 1, values.data()}), InputError);
  EXPECT_THROW(by_device.update_values(DeviceValuesRef{b.nnz(), nullptr}), UsageError);

  // a matrix given on the device, updated from the host and from the device
  DeviceArray<int32_t> rp(std::vector<int32_t>(a.row_ptr.begin(), a.row_ptr.end()));
  DeviceArray<int32_t> ci(std::vector<int32_t>(a.col_idx.begin(), a.col_idx.end()));
  DeviceArray<double> va(std::vector<double>(a.values.begin(), a.values.end()));
  Solver device_input(DeviceCsrRef{a.rows, a.cols, a.nnz(), rp.data(), ci.data(), va.data()}, o);
  device_input.update_values(DeviceValuesRef{b.nnz(), values.data()});
  EXPECT_TRUE(bitwise_equal(solve_random(device_input, 1, 3), x));
  device_input.update_values(a);
  device_input.update_values(b);
  EXPECT_TRUE(bitwise_equal(solve_random(device_input, 1, 3), x));

  // a whole CSR on the device: its pattern checked there, the first difference named as the host check names it
  device_input.update_values(a);
  device_input.update_values(DeviceCsrRef{a.rows, a.cols, a.nnz(), rp.data(), ci.data(), values.data()});
  EXPECT_TRUE(bitwise_equal(solve_random(device_input, 1, 3), x));
  auto device_refusal = [&](const CsrMatrix& c, const std::string& words) {
    DeviceArray<int32_t> crp(std::vector<int32_t>(c.row_ptr.begin(), c.row_ptr.end()));
    DeviceArray<int32_t> cci(std::vector<int32_t>(c.col_idx.begin(), c.col_idx.end()));
    DeviceArray<double> cva(std::vector<double>(c.values.begin(), c.values.end()));
    try {
      device_input.update_values(DeviceCsrRef{c.rows, c.cols, c.nnz(), crp.data(), cci.data(), cva.data()});
      ADD_FAILURE() << "accepted: " << words;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  CsrMatrix moved = a;  // row 17's last entry one column to the left
  const int32_t last = moved.row_ptr[17] - 1;
  moved.col_idx[last] -= 1;
  device_refusal(moved, "row 17's pattern differs: its entry " + std::to_string(a.row_length(16)) + " is in column " +
                            std::to_string(a.col_idx[last]) + ", the solver's in column " + std::to_string(a.col_idx[last] + 1));
  CsrMatrix shifted = a;
  ++shifted.row_ptr[2];
  device_refusal(shifted, "row 2's pattern differs: it holds");
  device_refusal(poisson3d_7pt(11), "the new matrix is 1331 x 1331, the solver's 1728 x 1728");
  EXPECT_TRUE(bitwise_equal(solve_random(device_input, 1, 3), x));
}

// Refusals (another pattern, NaN, a non-positive diagonal, a Lanczos failure's kin) leave the solver as it was.
TEST_F(GpuUpdate, RefusalsKeepTheOldValues) {
  const CsrMatrix a = poisson3d_7pt(10);
  for (const Preconditioner m : {Preconditioner::jacobi, Preconditioner::amg}) {
    Solver s(a, gpu_options(m, "auto"));
    const DenseBlock before = solve_random(s, 1, 8);
    CsrMatrix moved = a;
    moved.col_idx[static_cast<size_t>(moved.row_ptr[17]) - 1] -= 1;  // row 17's last entry
    try {
      s.update_values(moved);
      ADD_FAILURE() << "another pattern accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("row 17's pattern differs"), std::string::npos) << e.what();
    }
    CsrMatrix nan = a;
    nan.values[100] = std::numeric_limits<double>::quiet_NaN();
    try {
      s.update_values(nan);
      ADD_FAILURE() << "NaN accepted";
    } catch (const MatrixRefusedError& e) {
      EXPECT_NE(std::string(e.what()).find("NaN or Inf"), std::string::npos) << e.what();
    }
    DeviceArray<double> nan_values(std::vector<double>(nan.values.begin(), nan.values.end()));
    EXPECT_THROW(s.update_values(DeviceValuesRef{nan.nnz(), nan_values.data()}), MatrixRefusedError);
    CsrMatrix negative = a;
    for (int32_t q = a.row_ptr[5]; q < a.row_ptr[6]; ++q)
      if (a.col_idx[q] == 5) negative.values[q] = -1;
    EXPECT_THROW(s.update_values(negative), MatrixRefusedError);
    EXPECT_EQ(s.updates(), 0);
    EXPECT_TRUE(bitwise_equal(solve_random(s, 1, 8), before)) << name_of(m);
  }
}

// The update's phases are reported apart from the setup's: named as the setup's, under the update's total,
// AMG's without strength and aggregation (the aggregates are kept).
TEST_F(GpuUpdate, PhasesOfTheUpdateApartFromTheSetup) {
  const CsrMatrix a = poisson3d_7pt(16);
  Solver s(a, gpu_options(Preconditioner::amg, "auto"));
  const std::vector<Phase> setup = s.setup_phases();
  ASSERT_NE(s.preconditioner(), nullptr);
  EXPECT_TRUE(has_phase(s.preconditioner()->phases, "aggregation"));
  s.update_values(perturbed(a));
  EXPECT_EQ(s.setup_phases().size(), setup.size());
  const std::vector<Phase>& u = s.update_phases();
  for (const char* name : {"pattern check", "upload", "statistics", "conversion", "analysis", "preconditioner", "release"})
    EXPECT_TRUE(has_phase(u, name)) << name;
  ASSERT_FALSE(u.empty());
  EXPECT_EQ(u.back().name, kUpdateTotalPhase);
  double parts = 0;
  for (const Phase& p : u) {
    EXPECT_GE(p.ms, 0) << p.name;
    if (&p != &u.back()) parts += p.ms;
  }
  EXPECT_LE(parts, u.back().ms * (1 + 1e-9)) << "the total covers every phase, the pattern's check included";
  // the values alone (no pattern to check): no check phase
  s.update_values(a.values.data(), a.nnz());
  EXPECT_FALSE(has_phase(s.update_phases(), "pattern check"));
  EXPECT_TRUE(has_phase(s.update_phases(), "upload"));
  const PreconditionerReport& pr = *s.preconditioner();
  EXPECT_FALSE(has_phase(pr.phases, "aggregation"));
  EXPECT_FALSE(has_phase(pr.phases, "strength"));
  EXPECT_TRUE(has_phase(pr.phases, "galerkin: R (A P)"));
  EXPECT_TRUE(has_phase(pr.phases, "coarse factorisation"));
  EXPECT_NE(pr.detail.find("aggregates and level kernels kept"), std::string::npos) << pr.detail;
}

}  // namespace
