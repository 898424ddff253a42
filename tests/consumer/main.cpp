// The README's library example as an outside project builds it: write and read a Matrix Market file, set up a
// solver once, solve two batches of right-hand sides, check the answers on the host. Exit 0 only when every
// column converged and its residual recomputed here meets the tolerance.
#include <spcg/spcg.hpp>

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "system.mtx";
  try {
    spcg::write_matrix_market(path, spcg::generate("poisson2d:40"));
    spcg::CsrMatrix a = spcg::read_matrix_market(path).matrix;

    spcg::SolverOptions o;
    o.solver = spcg::SolverKind::multi_cg;
    o.precond = spcg::Preconditioner::jacobi;
    o.expected_columns = 4;
    o.iteration.stop.rtol = 1e-10;
    o.matrix_name = path;
    spcg::Solver solver(a, o);  // setup once (a is copied: it is used below to check the answers)
    std::printf("backend %s, kernel %s\n", spcg::name_of(solver.backend()), solver.kernel(4).c_str());

    bool ok = true;
    for (uint64_t seed : {1, 2}) {
      spcg::DenseBlock b = spcg::random_block(a.rows, 4, seed), x(a.rows, 4, 0.0);
      const spcg::SolveResult r = solver.solve(b, x);
      const std::vector<double> rel = spcg::relative_residuals(a, x, b);
      for (size_t j = 0; j < r.columns.size(); ++j) {
        std::printf("seed %llu column %zu: %s after %d iterations, ||b - Ax|| / ||b|| = %.2e\n",
                    static_cast<unsigned long long>(seed), j, spcg::to_string(r.columns[j].status),
                    r.columns[j].iterations, rel[j]);
        ok = ok && r.columns[j].status == spcg::ColumnStatus::converged && rel[j] <= 20 * 1e-10;
      }
    }
    // A refused matrix is an exception of the typed hierarchy, naming the matrix.
    spcg::CsrMatrix broken = a;
    broken.values[0] = -1.0;
    try {
      spcg::Solver refused(std::move(broken), o);
      ok = false;
    } catch (const spcg::InputError& e) {
      std::printf("refused as expected: %s\n", e.what());
    }
    std::printf("%s\n", ok ? "consumer: ok" : "consumer: WRONG ANSWER");
    return ok ? 0 : 1;
  } catch (const spcg::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
