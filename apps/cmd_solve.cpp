// spcg solve: the main job. Parses the options into a SolveCommand, starts CUDA on a thread of its own while
// the matrix is read (parallel reader), checks the matrix (square, symmetric, finite, positive diagonal), sets
// up on the GPU (one upload; statistics, layouts and the kernel choice on the device), solves, verifies on
// request and prints the report with every phase, the start of CUDA and the process's wall time included.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "commands.hpp"
#include "options.hpp"
#include <cuda_profiler_api.h>

#include "blas1.hpp"
#include "cuda_check.hpp"
#include "eigen_bridge.hpp"
#include "error.hpp"
#include "generators.hpp"
#include "json.hpp"
#include "matrix_setup.hpp"
#include "nvtx.hpp"
#include "problem.hpp"
#include "registry.hpp"
#include "report.hpp"
#include "solver.hpp"

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
  std::string rhs = "ones";
  int nrhs = 1;
  uint64_t seed = 1;
  std::optional<std::string> x0, output, report_file, history;
  std::string solver = "cg", kernel = "auto", precond = "none", vector_ops = "fused", timing = "auto";
  std::optional<std::string> backend;  // gpu | host; default: gpu when a device exists
  SolveOptions options;
  int threads = 0;  // reader threads (0: all cores)
  bool verify = false, force = false, profile = false;
};

// Returns nullopt after printing the help.
std::optional<SolveCommand> parse_solve_command(const std::vector<std::string>& args) {
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
      ("solver", po::value<std::string>()->default_value("cg"), "cg | block-cg | multi-cg")
      ("kernel", po::value<std::string>()->default_value("auto"), "auto or a registry kernel (see spcg bench spmv --list)")
      ("precond", po::value<std::string>()->default_value("none"), "none | jacobi")
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
      ("persistent", po::value<std::string>()->default_value("auto"),
       "auto | on | off: CG in one cooperative launch for small systems (kernel auto, n <= 65536)")
      ("deterministic", "atomic-free kernels, fixed-order reductions; prints a checksum of x")
      ("verify", "check ||b - A x|| / ||b|| on the host with Eigen (and compare with Eigen's CG for small systems)")
      ("backend", po::value<std::string>(), "gpu | host (default gpu when a CUDA device exists)")
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
  c.solver = vm["solver"].as<std::string>(), c.precond = vm["precond"].as<std::string>();
  c.vector_ops = vm["vector-ops"].as<std::string>(), c.timing = vm["timing"].as<std::string>();
  c.kernel = vm["kernel"].as<std::string>();
  const std::string graph = vm["graph"].as<std::string>(), persistent = vm["persistent"].as<std::string>();
  c.nrhs = vm["nrhs"].as<int>();
  const int maxit = vm["maxit"].as<int>(), monitor = vm["monitor"].as<int>();
  const double tol = vm["tol"].as<double>(), atol = vm["atol"].as<double>();
  if (c.solver != "cg" && c.solver != "block-cg" && c.solver != "multi-cg")
    throw UsageError("--solver must be cg, block-cg or multi-cg, got '" + c.solver + "'");
  if (c.precond != "none" && c.precond != "jacobi")
    throw UsageError("--precond must be none or jacobi, got '" + c.precond + "'");
  if (c.vector_ops != "fused" && c.vector_ops != "thrust")
    throw UsageError("--vector-ops must be fused or thrust, got '" + c.vector_ops + "'");
  if (c.timing != "auto" && c.timing != "kernels" && c.timing != "phases")
    throw UsageError("--timing must be auto, kernels or phases");
  if (graph != "auto" && graph != "on" && graph != "off") throw UsageError("--graph must be auto, on or off");
  if (persistent != "auto" && persistent != "on" && persistent != "off")
    throw UsageError("--persistent must be auto, on or off");
  if (c.nrhs < 1 || c.nrhs > 4096) throw UsageError("--nrhs must be between 1 and 4096");
  if (maxit < 0) throw UsageError("--maxit must be >= 0");
  if (!(tol >= 0) || !(atol >= 0) || !std::isfinite(tol) || !std::isfinite(atol))
    throw UsageError("--tol and --atol must be finite and >= 0");
  if (monitor < 0 || vm["check-every"].as<int>() < 1) throw UsageError("--monitor must be >= 0 and --check-every >= 1");
  if (vm["stagnation"].as<int>() < 0) throw UsageError("--stagnation must be >= 0");
  if (vm["threads"].as<int>() < 0) throw UsageError("--threads must be >= 0");
  if (c.vector_ops == "thrust" && c.solver != "cg")
    throw UsageError("--vector-ops thrust is the reference path of --solver cg only");
  if (vm.count("backend")) {
    c.backend = vm["backend"].as<std::string>();
    if (*c.backend != "gpu" && *c.backend != "host")
      throw UsageError("--backend must be gpu or host, got '" + *c.backend + "'");
  }
  c.rhs = vm["rhs"].as<std::string>();
  c.seed = vm["seed"].as<uint64_t>();
  for (auto [name, field] : {std::pair{"x0", &c.x0}, std::pair{"output", &c.output},
                             std::pair{"report-file", &c.report_file}, std::pair{"history", &c.history}})
    if (vm.count(name)) *field = vm[name].as<std::string>();
  c.threads = vm["threads"].as<int>();
  c.verify = vm.count("verify") > 0, c.force = vm.count("force") > 0, c.profile = vm.count("profile") > 0;
  SolveOptions& o = c.options;
  o.stop = {tol, atol, maxit};
  o.precond = c.precond, o.vector_ops = c.vector_ops, o.check_every = vm["check-every"].as<int>(), o.graph = graph;
  o.stagnation_window = vm["stagnation"].as<int>();
  o.persistent = persistent;
  o.deterministic = vm.count("deterministic") > 0, o.monitor_every = monitor, o.keep_history = c.history.has_value();
  return c;
}

// Refuses a matrix CG cannot solve, naming the first offending row (--force lets a non-symmetric or
// non-positive-diagonal matrix through; the solver then reports the breakdown).
void check_matrix(const MatrixStats& st, const SolveCommand& c) {
  if (!st.square)
    throw InputError(c.source, 0, "matrix is " + std::to_string(st.rows) + " x " + std::to_string(st.cols) +
                                      ", CG needs a square matrix");
  if (st.non_finite_values > 0)
    throw InputError(c.source, 0, "matrix has " + std::to_string(st.non_finite_values) + " NaN or Inf entries");
  if (!st.numerically_symmetric && !c.force)
    throw InputError(c.source, 0, "matrix is not symmetric (max relative asymmetry " + std::to_string(st.max_asymmetry) +
                                      "); CG needs an SPD matrix (use --force to try anyway)");
  // a_ii = e_i' A e_i > 0 for every SPD A, so a zero, negative or missing diagonal proves A indefinite (or
  // singular) before any iteration runs; the solver would only report a breakdown or a stall later.
  if (!st.diagonal_positive && !c.force) {
    char diag[64];
    std::snprintf(diag, sizeof diag, st.first_nonpositive_value == 0 ? "0 (zero or missing)" : "%.6g",
                  st.first_nonpositive_value);
    throw InputError(c.source, 0, "matrix is not positive definite: row " + std::to_string(st.first_nonpositive_row + 1) +
                                      " has diagonal " + diag + " (" + std::to_string(st.nonpositive_diagonal) +
                                      " such rows), and an SPD matrix has a positive diagonal (use --force to try anyway)");
  }
}

// Refuses before allocating when the device cannot hold the system (matrix, conversion copy, vectors).
void check_device_memory(const CsrMatrix& a, int k, const std::string& solver) {
  size_t free_b = 0, total_b = 0;
  CHECK_CUDA(cudaMemGetInfo(&free_b, &total_b));
  const double vectors = (solver == "block-cg" ? 8.0 : 6.0) * a.rows * double(k) * 8;
  const double needed = 2.0 * (12.0 * a.nnz() + 4.0 * a.rows) + vectors;
  if (needed > double(free_b))
    throw DeviceMemoryError("not enough GPU memory: this solve needs about " + std::to_string(needed / (1 << 20)) +
                            " MiB, " + std::to_string(double(free_b) / (1 << 20)) + " MiB free of " +
                            std::to_string(double(total_b) / (1 << 20)));
}

std::vector<double> inverse_diagonal_for(const SolveCommand& c, const CsrMatrix& a) {
  if (c.precond != "jacobi") return {};
  try {
    return jacobi_inverse_diagonal(a);
  } catch (const InputError& e) {
    throw InputError(c.source, 0, e.problem());
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

// The host reference solver (Eigen's ConjugateGradient) on the same system: no GPU, or --backend host.
void solve_on_host(const SolveCommand& c, const Problem& prob, DenseBlock& b, DenseBlock& x, SolveReport& rep) {
  const double tol = c.options.stop.rtol, atol = c.options.stop.atol;
  rep.kernel = "eigen";
  auto t0 = std::chrono::steady_clock::now();
  HostSolveResult h = eigen_cg(prob.a, b, tol, c.options.stop.max_iterations, c.precond, c.x0 ? &x : nullptr);
  rep.phases.push_back({"solve", ms_since(t0)});
  const std::vector<double> rel = relative_residuals(prob.a, h.x, b);
  for (int j = 0; j < b.cols; ++j) {
    ColumnResult col;
    col.iterations = h.iterations[j];
    col.b_norm = 0;
    for (int i = 0; i < b.rows; ++i) col.b_norm += b.at(i, j) * b.at(i, j);
    col.b_norm = std::sqrt(col.b_norm);
    col.recursive_residual = h.relative_error[j] * (col.b_norm > 0 ? col.b_norm : 1);
    col.true_residual = rel[j] * (col.b_norm > 0 ? col.b_norm : 1);
    col.status = !std::isfinite(rel[j]) || !std::isfinite(h.relative_error[j]) ? ColumnStatus::non_finite
                 : rel[j] <= std::max(tol, atol / std::max(col.b_norm, 1e-300)) * 1.0001 || h.relative_error[j] <= tol
                     ? ColumnStatus::converged
                     : ColumnStatus::max_iterations;
    rep.result.columns.push_back(col);
  }
  rep.result.solver = "eigen-cg";
  rep.result.solve_ms = rep.phases.back().ms;
  x = std::move(h.x);
}

// The right-hand sides on the device: ones and random are made there (random bit for bit as make_rhs makes
// them on the host); a file is read and uploaded.
void fill_rhs(const SolveCommand& c, int32_t n, DeviceBlock& B, DenseBlock* host_b) {
  if (host_b && host_b->rows == n) {
    B.values.upload(host_b->data);
  } else if (c.rhs == "ones") {
    launch_fill(1.0, B.data(), B.size(), 0);
  } else if (c.rhs == "random") {
    launch_fill_splitmix_uniform(c.seed, B.data(), B.size(), 0);
  } else {
    throw Error("fill_rhs: a right-hand side file must be read first");
  }
}

}  // namespace

int run_solve(const std::vector<std::string>& args) {
  // CUDA starts first, on a thread of its own: it takes about as long as reading a large file.
  CudaStart cuda;
  const std::optional<SolveCommand> parsed = parse_solve_command(args);
  if (!parsed) return 0;
  const SolveCommand& c = *parsed;
  SolveReport rep;

  Problem prob;
  {
    NvtxRange r("read");
    ReadOptions ro;
    ro.threads = c.threads;
    prob = load_problem(c.source, ro, /*with_stats=*/false);
  }
  rep.phases.push_back({"read", prob.read_ms});
  rep.reader = prob.read;
  const int32_t n = prob.a.rows;
  // A right-hand side file fixes k; ones / random take --nrhs.
  const bool rhs_from_file = c.rhs != "ones" && c.rhs != "random";
  std::optional<DenseBlock> file_b;
  if (rhs_from_file) file_b = make_rhs(c.rhs, n, c.nrhs, c.seed);
  const int k = file_b ? file_b->cols : c.nrhs;

  const auto t_wait = std::chrono::steady_clock::now();
  std::string why_no_gpu;
  const bool have_gpu = cuda.wait(&why_no_gpu);
  const double waited_ms = ms_since(t_wait);
  const std::string backend = c.backend ? *c.backend : (have_gpu ? "gpu" : "host");
  if (backend == "gpu" && !have_gpu) throw CudaError("--backend gpu: " + why_no_gpu);
  if (!c.backend && !have_gpu)
    std::printf("No CUDA device (%s): running the host reference solver (Eigen ConjugateGradient).\n", why_no_gpu.c_str());
  rep.phases.insert(rep.phases.begin(), {"start (CUDA, overlapped)", cuda.ms()});
  if (waited_ms > 0.05) rep.phases.push_back({"wait for CUDA", waited_ms});

  rep.matrix = c.source, rep.name = prob.name, rep.rows = n, rep.nnz = prob.a.nnz(), rep.nrhs = k;
  rep.solver = c.solver, rep.precond = c.precond, rep.vector_ops = c.vector_ops, rep.backend = backend;
  rep.rtol = c.options.stop.rtol, rep.atol = c.options.stop.atol;
  DenseBlock x;  // the solution on the host: filled after the solve
  std::optional<DenseBlock> host_b = std::move(file_b);
  auto need_host_b = [&]() -> DenseBlock& {  // verify and the host solver read b on the host
    if (!host_b) host_b = make_rhs(c.rhs, n, k, c.seed);
    return *host_b;
  };

  if (backend == "host") {
    const auto t0 = std::chrono::steady_clock::now();
    prob.stats = compute_stats(prob.a, prob.duplicates_summed);
    rep.phases.push_back({"statistics", ms_since(t0)});
    check_matrix(prob.stats, c);
    inverse_diagonal_for(c, prob.a);  // the Jacobi check
    x = c.x0 ? read_initial_guess(*c.x0, n, k) : DenseBlock(n, k, 0.0);
    solve_on_host(c, prob, need_host_b(), x, rep);
  } else {
    SolveOptions o = c.options;
    o.time_kernels = c.timing == "kernels" || (c.timing == "auto" && n >= 200000);
    const auto t_setup = std::chrono::steady_clock::now();
    MatrixSetup setup(prob.a, prob.duplicates_summed);
    const MatrixStats& st = setup.stats();  // uploads the CSR, then one pass on the device
    check_matrix(st, c);
    check_device_memory(prob.a, k, c.solver);
    const std::vector<double> dinv_host = inverse_diagonal_for(c, prob.a);
    OperatorOptions oo;
    oo.deterministic = o.deterministic;
    oo.expected_k = c.solver == "cg" ? 1 : k;
    std::unique_ptr<LinearOperator> op;
    const auto t_op = std::chrono::steady_clock::now();
    {
      NvtxRange r("setup");
      op = make_operator(c.kernel, setup, oo);
    }
    const double operator_ms = ms_since(t_op);
    if (o.deterministic && !op->deterministic())
      throw UsageError("--deterministic: kernel '" + op->name() + "' is not deterministic (choose one of ours)");
    const auto t_vectors = std::chrono::steady_clock::now();
    DeviceArray<double> dinv(dinv_host, "Jacobi inverse diagonal");
    DeviceBlock B(n, k, "right-hand sides"), X(n, k, "solution");
    fill_rhs(c, n, B, host_b ? &*host_b : nullptr);
    if (c.x0) X.values.upload(read_initial_guess(*c.x0, n, k).data);
    else if (X.size()) CHECK_CUDA(cudaMemsetAsync(X.data(), 0, X.values.bytes(), 0));  // +0.0 is all zero bits
    CHECK_CUDA(cudaDeviceSynchronize());
    const double vectors_ms = ms_since(t_vectors);
    const SetupInfo& si = op->setup_info();
    const SetupTimes& shared = setup.times();
    rep.phases.push_back({"upload", shared.upload_ms});
    rep.phases.push_back({"statistics", shared.statistics_ms});
    rep.phases.push_back({"conversion", shared.conversion_ms + si.convert_ms});
    rep.phases.push_back({"analysis", std::max(0.0, operator_ms - shared.conversion_ms - si.convert_ms - si.upload_ms)});
    rep.phases.push_back({"vectors", vectors_ms});
    rep.phases.push_back({"setup (total)", ms_since(t_setup)});
    rep.kernel = op->chosen(c.solver == "cg" ? 1 : k);
    if (op->name() == "auto") rep.kernel = "auto -> " + rep.kernel;
    rep.kernel_reason = si.reason;
    if (c.profile) CHECK_CUDA(cudaProfilerStart());
    {
      NvtxRange r("solve");
      rep.result = solve(c.solver, *op, dinv_host.empty() ? nullptr : dinv.data(), B, X, o);
    }
    if (c.profile) CHECK_CUDA(cudaProfilerStop());
    rep.phases.push_back({"solve", rep.result.solve_ms});
    x = DenseBlock(n, k);
    x.data = X.values.download<HostVector<double>>();
  }
  if (c.options.deterministic) rep.checksum = fnv1a_checksum(x.data);
  if (c.verify) {
    NvtxRange r("verify");
    const auto t0 = std::chrono::steady_clock::now();
    const DenseBlock& b = need_host_b();
    const std::vector<double> rel = relative_residuals(prob.a, x, b);
    rep.verify_relative_residual = *std::max_element(rel.begin(), rel.end());
    if (n <= 200000 && backend == "gpu") {
      HostSolveResult h = eigen_cg(prob.a, b, c.options.stop.rtol, c.options.stop.max_iterations, c.precond);
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
  return rep.result.all_converged() ? 0 : 3;
}

}  // namespace spcg
