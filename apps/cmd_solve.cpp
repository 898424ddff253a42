// spcg solve: the main job. Reads or generates A, checks it (square, symmetric, finite, fits), builds the
// operator, runs the solver, verifies on request and prints the report.
#include <boost/program_options.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>

#include "commands.hpp"
#include <cuda_profiler_api.h>

#include "cuda_check.hpp"
#include "eigen_bridge.hpp"
#include "error.hpp"
#include "generators.hpp"
#include "json.hpp"
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

}  // namespace

int run_solve(const std::vector<std::string>& args) {
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
      ("force", "solve even if the matrix is not symmetric or has a non-positive diagonal")
      ("profile", "bracket the solve with cudaProfilerStart/Stop (for ncu/nsys --capture-range)");
  po::variables_map vm;
  po::store(po::command_line_parser(args).options(opts).run(), vm);
  if (vm.count("help")) {
    std::cout << opts << "\n";
    return 0;
  }
  po::notify(vm);
  if (vm.count("matrix") && vm.count("generate")) throw UsageError("--matrix and --generate conflict: give one");
  const std::string solver = vm["solver"].as<std::string>(), precond = vm["precond"].as<std::string>();
  const std::string vops = vm["vector-ops"].as<std::string>(), timing = vm["timing"].as<std::string>();
  const std::string graph = vm["graph"].as<std::string>(), persistent = vm["persistent"].as<std::string>();
  const int nrhs = vm["nrhs"].as<int>(), maxit = vm["maxit"].as<int>(), monitor = vm["monitor"].as<int>();
  const double tol = vm["tol"].as<double>(), atol = vm["atol"].as<double>();
  if (solver != "cg" && solver != "block-cg" && solver != "multi-cg")
    throw UsageError("--solver must be cg, block-cg or multi-cg, got '" + solver + "'");
  if (precond != "none" && precond != "jacobi") throw UsageError("--precond must be none or jacobi, got '" + precond + "'");
  if (vops != "fused" && vops != "thrust") throw UsageError("--vector-ops must be fused or thrust, got '" + vops + "'");
  if (timing != "auto" && timing != "kernels" && timing != "phases") throw UsageError("--timing must be auto, kernels or phases");
  if (graph != "auto" && graph != "on" && graph != "off") throw UsageError("--graph must be auto, on or off");
  if (persistent != "auto" && persistent != "on" && persistent != "off")
    throw UsageError("--persistent must be auto, on or off");
  if (nrhs < 1 || nrhs > 4096) throw UsageError("--nrhs must be between 1 and 4096");
  if (maxit < 0) throw UsageError("--maxit must be >= 0");
  if (!(tol >= 0) || !(atol >= 0) || !std::isfinite(tol) || !std::isfinite(atol))
    throw UsageError("--tol and --atol must be finite and >= 0");
  if (monitor < 0 || vm["check-every"].as<int>() < 1) throw UsageError("--monitor must be >= 0 and --check-every >= 1");
  if (vm["stagnation"].as<int>() < 0) throw UsageError("--stagnation must be >= 0");
  if (vops == "thrust" && solver != "cg") throw UsageError("--vector-ops thrust is the reference path of --solver cg only");

  std::string why_no_gpu;
  const bool have_gpu = cuda_device_available(&why_no_gpu);
  std::string backend = vm.count("backend") ? vm["backend"].as<std::string>() : (have_gpu ? "gpu" : "host");
  if (backend != "gpu" && backend != "host") throw UsageError("--backend must be gpu or host, got '" + backend + "'");
  if (backend == "gpu" && !have_gpu) throw CudaError("--backend gpu: " + why_no_gpu);
  if (!vm.count("backend") && !have_gpu)
    std::printf("No CUDA device (%s): running the host reference solver (Eigen ConjugateGradient).\n", why_no_gpu.c_str());

  SolveReport rep;
  const std::string source = vm.count("generate") ? vm["generate"].as<std::string>()
                                                  : vm.count("matrix") ? vm["matrix"].as<std::string>()
                                                                       : default_matrix_path();
  Problem prob;
  {
    NvtxRange r("read");
    prob = load_problem(source);
  }
  rep.phases.push_back({"read", prob.read_ms});
  rep.phases.push_back({"statistics", prob.stats_ms});
  const MatrixStats& st = prob.stats;
  if (!st.square)
    throw InputError(source, 0, "matrix is " + std::to_string(st.rows) + " x " + std::to_string(st.cols) + ", CG needs a square matrix");
  if (!st.numerically_symmetric && !vm.count("force"))
    throw InputError(source, 0, "matrix is not symmetric (max relative asymmetry " + std::to_string(st.max_asymmetry) +
                                    "); CG needs an SPD matrix (use --force to try anyway)");
  // a_ii = e_i' A e_i > 0 for every SPD A, so a zero, negative or missing diagonal proves A indefinite (or
  // singular) before any iteration runs; the solver would only report a breakdown or a stall later.
  if (st.square && !st.diagonal_positive && !vm.count("force")) {
    char diag[64];
    std::snprintf(diag, sizeof diag, st.first_nonpositive_value == 0 ? "0 (zero or missing)" : "%.6g",
                  st.first_nonpositive_value);
    throw InputError(source, 0, "matrix is not positive definite: row " + std::to_string(st.first_nonpositive_row + 1) +
                                    " has diagonal " + diag + " (" + std::to_string(st.nonpositive_diagonal) +
                                    " such rows), and an SPD matrix has a positive diagonal (use --force to try anyway)");
  }
  std::vector<double> dinv_host;
  if (precond == "jacobi") {
    try {
      dinv_host = jacobi_inverse_diagonal(prob.a);
    } catch (const InputError& e) {
      throw InputError(source, 0, e.problem());
    }
  }
  const std::string rhs_spec = vm["rhs"].as<std::string>();
  DenseBlock b = make_rhs(rhs_spec, prob.a.rows, nrhs, vm["seed"].as<uint64_t>());
  require_finite(b, "right-hand side");
  const int k = b.cols;
  DenseBlock x(prob.a.rows, k, 0.0);
  if (vm.count("x0")) {
    DenseFile f = read_dense_matrix_market(vm["x0"].as<std::string>());
    if (f.block.rows != prob.a.rows || f.block.cols != k)
      throw InputError(vm["x0"].as<std::string>(), 0, "initial guess is " + std::to_string(f.block.rows) + " x " +
                                                          std::to_string(f.block.cols) + ", expected " +
                                                          std::to_string(prob.a.rows) + " x " + std::to_string(k));
    require_finite(f.block, vm["x0"].as<std::string>());
    x = std::move(f.block);
  }
  rep.matrix = source, rep.name = prob.name, rep.rows = st.rows, rep.nnz = st.nnz, rep.nrhs = k;
  rep.solver = solver, rep.precond = precond, rep.vector_ops = vops, rep.backend = backend, rep.rtol = tol, rep.atol = atol;
  SolveOptions o;
  o.stop = {tol, atol, maxit};
  o.precond = precond, o.vector_ops = vops, o.check_every = vm["check-every"].as<int>(), o.graph = graph;
  o.stagnation_window = vm["stagnation"].as<int>();
  o.persistent = persistent;
  o.deterministic = vm.count("deterministic") > 0, o.monitor_every = monitor, o.keep_history = vm.count("history") > 0;
  o.time_kernels = timing == "kernels" || (timing == "auto" && st.rows >= 200000);

  if (backend == "host") {
    rep.kernel = "eigen";
    auto t0 = std::chrono::steady_clock::now();
    HostSolveResult h = eigen_cg(prob.a, b, tol, maxit, precond, vm.count("x0") ? &x : nullptr);
    rep.phases.push_back({"solve", ms_since(t0)});
    const std::vector<double> rel = relative_residuals(prob.a, h.x, b);
    for (int j = 0; j < k; ++j) {
      ColumnResult c;
      c.iterations = h.iterations[j];
      c.b_norm = 0;
      for (int i = 0; i < b.rows; ++i) c.b_norm += b.at(i, j) * b.at(i, j);
      c.b_norm = std::sqrt(c.b_norm);
      c.recursive_residual = h.relative_error[j] * (c.b_norm > 0 ? c.b_norm : 1);
      c.true_residual = rel[j] * (c.b_norm > 0 ? c.b_norm : 1);
      c.status = !std::isfinite(rel[j]) || !std::isfinite(h.relative_error[j]) ? ColumnStatus::non_finite
                 : rel[j] <= std::max(tol, atol / std::max(c.b_norm, 1e-300)) * 1.0001 || h.relative_error[j] <= tol
                     ? ColumnStatus::converged
                     : ColumnStatus::max_iterations;
      rep.result.columns.push_back(c);
    }
    rep.result.solver = "eigen-cg";
    rep.result.solve_ms = rep.phases.back().ms;
    x = std::move(h.x);
  } else {
    check_device_memory(prob.a, k, solver);
    OperatorOptions oo;
    oo.deterministic = o.deterministic;
    oo.expected_k = solver == "cg" ? 1 : k;
    auto t0 = std::chrono::steady_clock::now();
    std::unique_ptr<LinearOperator> op;
    {
      NvtxRange r("setup");
      op = make_operator(vm["kernel"].as<std::string>(), prob.a, oo);
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    const SetupInfo& si = op->setup_info();
    rep.phases.push_back({"conversion", si.convert_ms});
    rep.phases.push_back({"upload", si.upload_ms});
    if (si.analysis_ms > 0) rep.phases.push_back({"analysis", si.analysis_ms});
    rep.phases.push_back({"setup (total)", ms_since(t0)});
    rep.kernel = auto_choice(*op, solver == "cg" ? 1 : k);
    if (op->name() == "auto") rep.kernel = "auto -> " + rep.kernel;
    rep.kernel_reason = si.reason;
    if (o.deterministic && !op->deterministic())
      throw UsageError("--deterministic: kernel '" + op->name() + "' is not deterministic (choose one of ours)");
    t0 = std::chrono::steady_clock::now();
    DeviceArray<double> dinv(dinv_host, "Jacobi inverse diagonal");
    DeviceBlock B(b.rows, k, "right-hand sides"), X(b.rows, k, "solution");
    B.values.upload(b.data);
    X.values.upload(x.data);
    rep.phases.push_back({"upload vectors", ms_since(t0)});
    if (vm.count("profile")) CHECK_CUDA(cudaProfilerStart());
    {
      NvtxRange r("solve");
      rep.result = solve(solver, *op, dinv_host.empty() ? nullptr : dinv.data(), B, X, o);
    }
    if (vm.count("profile")) CHECK_CUDA(cudaProfilerStop());
    rep.phases.push_back({"solve", rep.result.solve_ms});
    x.data = X.values.download();
  }
  if (o.deterministic) rep.checksum = fnv1a_checksum(x.data);
  if (vm.count("verify")) {
    NvtxRange r("verify");
    const std::vector<double> rel = relative_residuals(prob.a, x, b);
    rep.verify_relative_residual = *std::max_element(rel.begin(), rel.end());
    if (prob.a.rows <= 200000 && backend == "gpu") {
      HostSolveResult h = eigen_cg(prob.a, b, tol, maxit, precond);
      rep.eigen_iterations = *std::max_element(h.iterations.begin(), h.iterations.end());
      double num = 0, den = 0;
      for (size_t i = 0; i < x.data.size(); ++i)
        num = std::max(num, std::abs(x.data[i] - h.x.data[i])), den = std::max(den, std::abs(h.x.data[i]));
      rep.eigen_solution_difference = den > 0 ? num / den : num;
    }
  }
  print_report(rep);
  if (vm.count("output")) write_dense_matrix_market(vm["output"].as<std::string>(), x, {" solution written by spcg solve"});
  if (vm.count("report-file")) {
    const std::string path = vm["report-file"].as<std::string>();
    const bool csv = path.size() > 4 && path.substr(path.size() - 4) == ".csv";
    write_text(path, csv ? report_csv(rep) : report_json(rep) + "\n");
  }
  if (vm.count("history")) {
    std::string csv = "column,iteration,residual_norm\n";
    for (size_t j = 0; j < rep.result.history.size(); ++j)
      for (const auto& [it, rn] : rep.result.history[j]) csv += std::to_string(j) + "," + std::to_string(it) + "," + Json::number(rn) + "\n";
    write_text(vm["history"].as<std::string>(), csv);
  }
  return rep.result.all_converged() ? 0 : 3;
}

}  // namespace spcg
