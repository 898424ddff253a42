// spcg solve: the main job, as a client of the library (spcg/spcg.hpp). Parses the options into a
// SolveCommand, starts CUDA on a thread of its own while the matrix is read (parallel reader), sets up a
// spcg::Solver (checks, one upload, statistics, layouts and the kernel choice on the device), solves, verifies
// on request, and prints the report with every phase, the start of CUDA and the process's wall time included.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "commands.hpp"
#include "eigen_bridge.hpp"
#include "json.hpp"
#include "options.hpp"
#include "problem.hpp"
#include "report.hpp"
#include "spcg/spcg.hpp"

namespace po = boost::program_options;

namespace spcg {
namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw InputError(path, 0, "cannot open for writing");
  f << text;
  if (!f) throw InputError(path, 0, "write failed");
}

// Everything `spcg solve` was asked, checked and typed.
struct SolveCommand {
  std::string source;  // file or generator spec
  bool generated = false;
  std::string rhs = "ones";  // ones | random | a file
  int nrhs = 1;
  uint64_t seed = 1;
  std::optional<std::string> x0, output, report_file, history;
  SolverOptions solver;  // the library's options, typed
  int threads = 0;       // reader threads (0: all cores)
  bool verify = false;
};

// The value of an enum option, or a UsageError naming the flag and the accepted names.
template <class E>
E option_value(const po::variables_map& vm, const char* flag) {
  const std::string given = vm[flag].as<std::string>();
  if (const std::optional<E> v = parse_option<E>(given)) return *v;
  throw UsageError(std::string("--") + flag + " must be " + option_names<E>() + ", got '" + given + "'");
}

// Returns nullopt after printing the help.
std::optional<SolveCommand> parse_solve_command(const std::vector<std::string>& args) {
  const std::string solvers = "cg | block-cg | multi-cg";
  const std::string persistent_help = "auto | on | off: CG in one cooperative launch for small systems (kernel auto, n <= " +
                                      std::to_string(persistent_cg_max_rows()) + ")";
  po::options_description opts("spcg solve [options]\noptions");
  opts.add_options()
      ("help,h", "show this help")
      ("matrix", po::value<std::string>(), "Matrix Market file (.mtx, .mtx.gz); default: the built-in inputs/fv1.mtx")
      ("generate", po::value<std::string>(), ("generated problem instead of a file: " + generator_help()).c_str())
      ("rhs", po::value<std::string>()->default_value("ones"), "ones | random | FILE (Matrix Market array or coordinate)")
      ("nrhs", po::value<int>()->default_value(1), "number of right-hand sides k (ones/random)")
      ("seed", po::value<uint64_t>()->default_value(1), "seed for --rhs random")
      ("tol", po::value<double>()->default_value(1e-8), "relative tolerance: stop when ||r|| <= max(tol ||b||, atol)")
      ("atol", po::value<double>()->default_value(0.0), "absolute tolerance")
      ("maxit", po::value<int>()->default_value(10000), "maximum iterations")
      ("solver", po::value<std::string>()->default_value("cg"), solvers.c_str())
      ("kernel", po::value<std::string>()->default_value("auto"), "auto or a registry kernel (see spcg bench spmv --list)")
      ("precond", po::value<std::string>()->default_value("none"),
       "none | jacobi | block-jacobi | chebyshev | amg | auto (chosen from the matrix, with the reason)")
      ("block-size", po::value<int>()->default_value(PreconditionerOptions{}.block_size),
       "block-jacobi: b x b diagonal blocks, 1..8 (0: detect the node block structure)")
      ("cheb-degree", po::value<int>()->default_value(PreconditionerOptions{}.chebyshev_degree),
       "chebyshev: the polynomial's degree (degree - 1 SpMVs per apply)")
      ("cheb-ratio", po::value<double>()->default_value(PreconditionerOptions{}.chebyshev_ratio),
       "chebyshev: fit the polynomial on [lambda_max / ratio, lambda_max] of D^-1 A")
      ("amg-theta", po::value<double>()->default_value(PreconditionerOptions{}.strength_theta),
       "amg: strength of connection, |a_ij| >= theta sqrt(a_ii a_jj)")
      ("amg-prolongator", po::value<std::string>()->default_value(name_of(PreconditionerOptions{}.prolongator)),
       "amg: smoothed (Vanek-Mandel-Brezina) | plain (the tentative P: cheaper setup, more iterations)")
      ("amg-p-smoothings", po::value<int>()->default_value(PreconditionerOptions{}.prolongator_smoothings),
       "amg: damped-Jacobi steps on the tentative prolongator (smoothed aggregation), 1..3")
      ("amg-omega", po::value<double>()->default_value(PreconditionerOptions{}.prolongator_omega),
       "amg: each prolongator smoothing's damping x lambda_max(D^-1 A), in (0, 2)")
      ("amg-smoother", po::value<std::string>()->default_value(name_of(PreconditionerOptions{}.smoother)),
       "amg: chebyshev | l1-jacobi")
      ("amg-sweeps", po::value<int>()->default_value(PreconditionerOptions{}.smoother_degree),
       "amg: the smoother's degree (Chebyshev) or sweeps (l1-Jacobi), before and after the coarse correction")
      ("amg-smoother-ratio", po::value<double>()->default_value(PreconditionerOptions{}.smoother_ratio),
       "amg: the Chebyshev smoother works on [lambda_max / ratio, lambda_max] of D^-1 A")
      ("amg-coarse-rows", po::value<int>()->default_value(PreconditionerOptions{}.coarse_rows),
       "amg: coarsen until a level has at most this many rows (solved by a dense Cholesky)")
      ("vector-ops", po::value<std::string>()->default_value("fused"), "fused | thrust")
      ("x0", po::value<std::string>(), "initial guess (Matrix Market); default zero")
      ("output", po::value<std::string>(), "write the solution x (Matrix Market array)")
      ("report-file", po::value<std::string>(), "write the report as JSON (.json) or CSV (.csv)")
      ("history", po::value<std::string>(), "write the residual history as CSV")
      ("monitor", po::value<int>()->default_value(0), "print a residual line every N iterations")
      ("check-every", po::value<int>()->default_value(8), "fused path: iterations between residual reads")
      ("stagnation", po::value<int>()->default_value(200),
       "block-cg: hand the running columns to multi-cg after N iterations without a new best residual, when the block has lost rank or is within 1000x of the target (0: never)")
      ("timing", po::value<std::string>()->default_value("auto"), "kernels | phases | auto (kernels for n >= 200000)")
      ("graph", po::value<std::string>()->default_value("auto"), "auto | on | off: CUDA graph for the iteration batches")
      ("persistent", po::value<std::string>()->default_value("auto"), persistent_help.c_str())
      ("deterministic", "atomic-free kernels, fixed-order reductions; prints a checksum of x")
      ("verify", "check ||b - A x|| / ||b|| on the host with Eigen (and compare with Eigen's CG for small systems)")
      ("backend", po::value<std::string>()->default_value("auto"), "gpu | host | auto (gpu when a CUDA device exists)")
      ("threads", po::value<int>()->default_value(0), "threads reading the matrix file (0: all cores)")
      ("force", "solve even if the matrix is not symmetric or has a non-positive diagonal")
      ("profile", "bracket the solve with cudaProfilerStart/Stop (for ncu/nsys --capture-range)");
  po::variables_map vm;
  if (!parse_command_line(args, opts, po::positional_options_description{}, vm)) return std::nullopt;
  SolveCommand c;
  if (vm.count("matrix") && vm.count("generate")) throw UsageError("--matrix and --generate conflict: give one");
  c.generated = vm.count("generate") > 0;
  c.source = c.generated ? vm["generate"].as<std::string>()
                         : vm.count("matrix") ? vm["matrix"].as<std::string>() : default_matrix_path();
  SolverOptions& so = c.solver;
  SolveOptions& o = so.iteration;
  so.solver = option_value<SolverKind>(vm, "solver");
  so.precond = option_value<Preconditioner>(vm, "precond");
  PreconditionerOptions& po_ = so.precond_options;
  po_.block_size = vm["block-size"].as<int>();
  po_.chebyshev_degree = vm["cheb-degree"].as<int>();
  po_.chebyshev_ratio = vm["cheb-ratio"].as<double>();
  po_.strength_theta = vm["amg-theta"].as<double>();
  po_.prolongator = option_value<AmgProlongator>(vm, "amg-prolongator");
  po_.smoother = option_value<AmgSmoother>(vm, "amg-smoother");
  po_.smoother_degree = vm["amg-sweeps"].as<int>();
  po_.coarse_rows = vm["amg-coarse-rows"].as<int>();
  po_.smoother_ratio = vm["amg-smoother-ratio"].as<double>();
  po_.prolongator_smoothings = vm["amg-p-smoothings"].as<int>();
  po_.prolongator_omega = vm["amg-omega"].as<double>();
  o.vector_ops = option_value<VectorOps>(vm, "vector-ops");
  so.timing = option_value<KernelTiming>(vm, "timing");
  o.graph = option_value<Switch>(vm, "graph");
  o.persistent = option_value<Switch>(vm, "persistent");
  so.backend = option_value<Backend>(vm, "backend");
  so.kernel = vm["kernel"].as<std::string>();
  c.nrhs = vm["nrhs"].as<int>();
  const int maxit = vm["maxit"].as<int>(), monitor = vm["monitor"].as<int>();
  const double tol = vm["tol"].as<double>(), atol = vm["atol"].as<double>();
  if (c.nrhs < 1 || c.nrhs > 4096) throw UsageError("--nrhs must be between 1 and 4096");
  if (maxit < 0) throw UsageError("--maxit must be >= 0");
  if (!(tol >= 0) || !(atol >= 0) || !std::isfinite(tol) || !std::isfinite(atol))
    throw UsageError("--tol and --atol must be finite and >= 0");
  if (monitor < 0 || vm["check-every"].as<int>() < 1) throw UsageError("--monitor must be >= 0 and --check-every >= 1");
  if (vm["stagnation"].as<int>() < 0) throw UsageError("--stagnation must be >= 0");
  if (vm["threads"].as<int>() < 0) throw UsageError("--threads must be >= 0");
  if (o.vector_ops == VectorOps::thrust && so.solver != SolverKind::cg)
    throw UsageError("--vector-ops thrust is the reference path of --solver cg only");
  c.rhs = vm["rhs"].as<std::string>();
  c.seed = vm["seed"].as<uint64_t>();
  for (auto [name, field] : {std::pair{"x0", &c.x0}, std::pair{"output", &c.output},
                             std::pair{"report-file", &c.report_file}, std::pair{"history", &c.history}})
    if (vm.count(name)) *field = vm[name].as<std::string>();
  c.threads = vm["threads"].as<int>();
  c.verify = vm.count("verify") > 0, so.profile_solves = vm.count("profile") > 0;
  so.check_matrix = vm.count("force") == 0;
  so.matrix_name = c.source;
  o.stop = {tol, atol, maxit};
  o.check_every = vm["check-every"].as<int>();
  o.stagnation_window = vm["stagnation"].as<int>();
  o.deterministic = vm.count("deterministic") > 0, o.monitor_every = monitor, o.keep_history = c.history.has_value();
  if (monitor > 0) o.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  return c;
}

// --report-file (JSON or CSV by its extension) and --history (CSV).
void write_report_files(const SolveCommand& c, const SolveReport& rep) {
  if (c.report_file) {
    const std::string& path = *c.report_file;
    const bool csv = path.size() > 4 && path.substr(path.size() - 4) == ".csv";
    write_text(path, csv ? report_csv(rep) : report_json(rep) + "\n");
  }
  if (c.history) {
    std::string csv = "column,iteration,residual_norm\n";
    for (size_t j = 0; j < rep.result.history.size(); ++j)
      for (const auto& [it, rn] : rep.result.history[j]) csv += std::to_string(j) + "," + std::to_string(it) + "," + Json::number(rn) + "\n";
    write_text(*c.history, csv);
  }
}

DenseBlock read_initial_guess(const std::string& path, int32_t n, int k) {
  DenseFile f = read_dense_matrix_market(path);
  if (f.block.rows != n || f.block.cols != k)
    throw InputError(path, 0, "initial guess is " + std::to_string(f.block.rows) + " x " + std::to_string(f.block.cols) +
                                  ", expected " + std::to_string(n) + " x " + std::to_string(k));
  require_finite(f.block, path);
  return std::move(f.block);
}

}  // namespace

std::string default_matrix_path() {
  for (const std::string& p : {std::string(SPCG_SOURCE_DIR) + "/inputs/fv1.mtx", std::string("inputs/fv1.mtx")})
    if (std::filesystem::exists(p)) return p;
  return "inputs/fv1.mtx";
}

int run_solve(const std::vector<std::string>& args) {
  // CUDA starts first, on a thread of its own: it takes about as long as reading a large file.
  CudaStart cuda;
  const std::optional<SolveCommand> parsed = parse_solve_command(args);
  if (!parsed) return 0;
  const SolveCommand& c = *parsed;
  SolveReport rep;
  Problem prob;
  {
    ScopedRange r("read");
    ReadOptions ro;
    ro.threads = c.threads;
    prob = load_problem(c.source, ro, /*with_stats=*/false);
  }
  rep.phases.push_back({"read", prob.read_ms});
  rep.reader = prob.read;
  const int32_t n = prob.a.rows;
  // A right-hand side file fixes k; ones / random take --nrhs.
  const bool rhs_from_file = c.rhs != "ones" && c.rhs != "random";
  std::optional<DenseBlock> host_b;
  if (rhs_from_file) host_b = make_rhs(c.rhs, n, c.nrhs, c.seed);
  const int k = host_b ? host_b->cols : c.nrhs;
  std::optional<DenseBlock> x0;
  if (c.x0) x0 = read_initial_guess(*c.x0, n, k);

  const auto t_wait = std::chrono::steady_clock::now();
  std::string why_no_gpu;
  const bool have_gpu = cuda.wait(&why_no_gpu);
  const double waited_ms = ms_since(t_wait);
  if (c.solver.backend == Backend::gpu && !have_gpu) throw CudaError("--backend gpu: " + why_no_gpu);
  if (c.solver.backend == Backend::automatic && !have_gpu)
    std::printf("No CUDA device (%s): running the host reference solver (Eigen ConjugateGradient).\n", why_no_gpu.c_str());
  rep.phases.insert(rep.phases.begin(), {"start (CUDA, overlapped)", cuda.ms()});
  if (waited_ms > 0.05) rep.phases.push_back({"wait for CUDA", waited_ms});

  SolverOptions so = c.solver;
  so.backend = have_gpu && so.backend != Backend::host ? Backend::gpu : Backend::host;
  so.expected_columns = k;
  so.duplicates_summed = prob.duplicates_summed;
  const std::string backend = name_of(so.backend);
  rep.matrix = c.source, rep.name = prob.name, rep.rows = n, rep.nnz = prob.a.nnz(), rep.nrhs = k;
  rep.solver = name_of(so.solver), rep.precond = name_of(so.precond), rep.vector_ops = name_of(so.iteration.vector_ops);
  rep.backend = backend;
  rep.rtol = so.iteration.stop.rtol, rep.atol = so.iteration.stop.atol;

  // The setup: checks, upload, statistics, kernel choice. A refusal --force can override says so.
  std::optional<Solver> made;
  try {
    made.emplace(std::move(prob.a), so);
  } catch (const MatrixRefusedError& e) {
    if (!e.overridable()) throw;
    throw InputError(e.file(), e.line(), e.problem() + " (use --force to try anyway)");
  }
  Solver& solver = *made;
  const CsrMatrix& a = solver.matrix();
  for (const Phase& p : solver.setup_phases())
    if (p.name != "setup (total)") rep.phases.push_back(p);
  rep.kernel = solver.kernel(so.solver == SolverKind::cg ? 1 : k);
  if (const PreconditionerReport* pr = solver.preconditioner()) {
    rep.preconditioner = *pr;
    rep.precond = name_of(pr->kind);
    if (so.precond == Preconditioner::automatic) rep.precond = std::string("auto -> ") + name_of(pr->kind);
  }
  rep.kernel_reason = solver.kernel_reason();
  DenseBlock x;  // the solution on the host
  if (host_b) {
    x = x0 ? *x0 : DenseBlock(n, k, 0.0);
    rep.result = solver.solve(*host_b, x);
  } else {
    rep.result = solver.solve(c.rhs == "ones" ? RhsKind::ones : RhsKind::random, k, c.seed, x, x0 ? &*x0 : nullptr);
  }
  if (so.backend == Backend::gpu) {
    // "setup (total)": the CSR in host memory to the first iteration (the right-hand sides in place included)
    double setup_ms = 0;
    for (const Phase& p : solver.setup_phases())
      if (p.name == "setup (total)") setup_ms = p.ms;
    rep.phases.push_back({"vectors", rep.result.vectors_ms});
    rep.phases.push_back({"setup (total)", setup_ms + rep.result.vectors_ms});
  }
  rep.phases.push_back({"solve", rep.result.solve_ms});
  if (so.iteration.deterministic) rep.checksum = fnv1a_checksum(x.data);
  auto need_host_b = [&]() -> const DenseBlock& {  // verify reads b on the host
    if (!host_b) host_b = make_rhs(c.rhs, n, k, c.seed);
    return *host_b;
  };
  if (c.verify) {
    ScopedRange r("verify");
    const auto t0 = std::chrono::steady_clock::now();
    const DenseBlock& b = need_host_b();
    const std::vector<double> rel = relative_residuals(a, x, b);
    rep.verify_relative_residual = *std::max_element(rel.begin(), rel.end());
    if (n <= 200000 && so.backend == Backend::gpu) {
      HostSolveResult h = eigen_cg(a, b, so.iteration.stop.rtol, so.iteration.stop.max_iterations,
                                   rep.preconditioner.kind == Preconditioner::jacobi);
      rep.eigen_iterations = *std::max_element(h.iterations.begin(), h.iterations.end());
      double num = 0, den = 0;
      for (size_t i = 0; i < x.data.size(); ++i)
        num = std::max(num, std::abs(x.data[i] - h.x.data[i])), den = std::max(den, std::abs(h.x.data[i]));
      rep.eigen_solution_difference = den > 0 ? num / den : num;
    }
    rep.phases.push_back({"verify", ms_since(t0)});
  }
  if (c.output) write_dense_matrix_market(*c.output, x, {" solution written by spcg solve"});
  rep.phases.push_back({"wall (process)", ms_since_process_start()});
  print_report(rep);
  write_report_files(c, rep);
  return rep.result.all_converged() ? 0 : 3;
}

}  // namespace spcg
