// spcg solve: the main job, as a client of the library (spcg/spcg.hpp). Parses the options into a
// SolveCommand, starts CUDA on a thread of its own while the matrix is read (parallel reader), sets up a
// spcg::Solver (checks, one upload, statistics, layouts and the kernel choice on the device), solves, verifies
// on request, and prints the report with every phase, the start of CUDA and the process's wall time included.
#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string_view>
#include <thread>
#include <variant>

#include "apps/commands.hpp"
#include "sparse/eigen_bridge.hpp"
#include "spcg/generators.hpp"
#include "sparse/json.hpp"
#include "apps/options.hpp"
#include "sparse/problem.hpp"
#include "sparse/parallel.hpp"
#include "apps/report.hpp"
#include "apps/ranks.hpp"
#include "spcg/distributed.hpp"
#include "spcg/spcg.hpp"
#include "sparse/timing.hpp"

namespace po = boost::program_options;

namespace spcg {
namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f) throw InputError(path, 0, "cannot open for writing");
  f << text;
  if (!f) throw InputError(path, 0, "write failed");
}

// --rhs: the right-hand sides the solver makes (the library's RhsKind), or a Matrix Market file whose columns
// fix k.
struct RhsFile {
  std::string path;
};
using RhsSource = std::variant<RhsKind, RhsFile>;
constexpr std::array<std::pair<RhsKind, const char*>, 2> kRhsKinds{{{RhsKind::ones, "ones"}, {RhsKind::random, "random"}}};

RhsSource parse_rhs(const std::string& given) {
  for (const auto& [kind, name] : kRhsKinds)
    if (given == name) return kind;
  return RhsFile{given};
}

// The most right-hand sides one solve takes, whether --nrhs asks for them or --rhs FILE brings them: one limit,
// one check.
constexpr int kMaxRhsColumns = 4096;
void check_rhs_columns(int k, const std::string& what) {
  if (k < 1 || k > kMaxRhsColumns)
    throw UsageError(what + " must be between 1 and " + std::to_string(kMaxRhsColumns) + ", got " + std::to_string(k));
}

// --rhs FILE, read before the matrix: a block wider than a solve takes is refused before the matrix's read. Its
// rows are checked against the matrix once that is read (require_rhs_rows).
DenseBlock read_rhs_file(const std::string& path) {
  DenseFile f = read_dense_matrix_market(path);
  check_rhs_columns(f.block.cols, "the columns of --rhs " + path);
  require_finite(f.block, path);
  return std::move(f.block);
}

void require_rhs_rows(const DenseBlock& b, GlobalIndex n, const std::string& path) {
  if (b.rows != n)
    throw InputError(path, 0, "right-hand side has " + std::to_string(b.rows) + " rows, the matrix has " + std::to_string(n));
}

// ones / random on the host (--verify), the values the solver makes on the device.
DenseBlock made_rhs(RhsKind kind, int32_t n, int k, uint64_t seed) {
  return kind == RhsKind::ones ? DenseBlock(n, k, 1.0) : random_block(n, k, seed);
}

// The library's setup phase that sums the others (every Solver lists it under this name).
constexpr std::string_view kSetupTotal = kSetupTotalPhase;  // the library names it
double setup_total_ms(const std::vector<Phase>& phases) {
  for (const Phase& p : phases)
    if (p.name == kSetupTotal) return p.ms;
  return 0;
}

// --verify also solves with Eigen's CG and compares the solutions, up to this many rows.
constexpr int32_t kEigenComparisonMaxRows = 200000;

// The CLI's default preconditioner: auto, which picks one from the matrix and prints why, on one GPU and on
// several (where it chooses among the distributed ones). The library's SolverOptions keeps none: a program
// names its preconditioner, and auto's trial adds setup time it may not want. Where auto cannot run, the
// default is what can: with --force none (auto's choice takes the SPD checks --force skips as passed: on the
// host backend it is Jacobi, which refuses a non-positive diagonal).
Preconditioner default_preconditioner(bool force) {
  static_assert(runs_on_several_gpus(Preconditioner::automatic));
  return force ? Preconditioner::none : Preconditioner::automatic;
}

// Everything `spcg solve` was asked, checked and typed.
struct SolveCommand {
  std::string source;  // file or generator spec
  // --matrix A1.mtx,A2.mtx,... (or --generate S1,S2,...): the later matrices of a sequence on source's pattern,
  // each an update of the setup's values followed by a solve
  std::vector<std::string> later;
  bool generated = false;
  RhsSource rhs = RhsKind::ones;
  int nrhs = 1;
  uint64_t seed = 1;
  std::optional<std::string> x0, output, report_file, history, plot;
  SolverOptions solver;  // the library's options, typed
  int threads = 0;       // reader threads (0: all cores)
  bool verify = false;
  int gpus = 1;            // ranks, one GPU each (--gpus); mpirun / srun set them instead
  int repeat = 1;          // solves of the same system on the one setup (--repeat)
  std::string rendezvous;  // MPI ranks: the file where rank 0 leaves the NCCL id
};

// Each output (--output, --report-file, --history, --plot) opened for writing before the read and the solve start, so
// that one that cannot be written ends the command before any work is done. A file that was not there is
// removed again (the solve writes it at the end); one that was is left as it is (opened to append, nothing
// written).
void check_outputs(const SolveCommand& c) {
  for (const std::optional<std::string>& path : {c.output, c.report_file, c.history, c.plot}) {
    if (!path) continue;
    std::error_code ec;
    const bool existed = std::filesystem::exists(std::filesystem::symlink_status(*path, ec));
    if (!std::ofstream(*path, std::ios::app)) throw InputError(*path, 0, "cannot open for writing");
    if (!existed) std::filesystem::remove(*path, ec);
  }
}

// The value of an enum option, or a UsageError naming the flag and the accepted names.
template <class E>
E option_value(const po::variables_map& vm, const char* flag) {
  const std::string given = vm[flag].as<std::string>();
  if (const std::optional<E> v = parse_option<E>(given)) return *v;
  throw UsageError(std::string("--") + flag + " must be " + option_names<E>() + ", got '" + given + "'");
}

// "cg | multi-cg | block-cg": an enum option's names for its help text, from the library's one list.
template <class E>
std::string choices() {
  std::string s;
  for (const auto& [v, n] : OptionNames<E>::list) s += (s.empty() ? "" : " | ") + std::string(n);
  return s;
}

// An enum option whose default is the library's (the help prints that value's name).
template <class E>
po::typed_value<std::string>* enum_value(E library_default) {
  return po::value<std::string>()->default_value(name_of(library_default));
}

// Returns nullopt after printing the help. as_ranks: this process is (or launches) ranks of a solve on several
// GPUs (where --device is refused).
std::optional<SolveCommand> parse_solve_command(const std::vector<std::string>& args, bool as_ranks) {
  // Every default the help shows is the library's own (SolverOptions{}, PreconditionerOptions{}, ReadOptions{}),
  // but the CLI's: the matrix, --rhs, --nrhs, --seed, --precond (auto), --monitor.
  const SolverOptions lib;
  const SolveOptions& it = lib.iteration;
  const PreconditionerOptions pc;
  const std::string persistent_help = choices<Switch>() + ": CG in one cooperative launch for small systems (kernel auto, n <= " +
                                      std::to_string(persistent_cg_max_rows()) + ")";
  const std::string precond_help =
      choices<Preconditioner>() + "; auto: chosen from the matrix, with the reason (the default; on several GPUs among " +
      option_names_where<Preconditioner>([](Preconditioner p) { return runs_on_several_gpus(p) && p != Preconditioner::automatic; }) + "; with --force " + name_of(default_preconditioner(true)) + ")";
  const std::string rhs_help = std::string(kRhsKinds[0].second) + " | " + kRhsKinds[1].second +
                               " | FILE (Matrix Market array or coordinate; at most " + std::to_string(kMaxRhsColumns) + " columns)";
  po::options_description opts("spcg solve [MATRIX] [options]\noptions");
  opts.add_options()
      ("help,h", "show this help")
      ("matrix", po::value<std::string>(),
       "Matrix Market file (.mtx, .mtx.gz), also as the first argument (spcg solve A.mtx); default: the built-in inputs/fv1.mtx. "
       "A1.mtx,A2.mtx,...: a sequence of one sparsity pattern (time or Newton steps): the first is set up and solved, each "
       "later one updates the setup's values (its choices kept) and is solved; the report gives each step's update and solve")
      ("generate", po::value<std::string>(), ("generated problem instead of a file: " + generator_help() +
                                              "; a comma-separated sequence as --matrix's (jump3d:64:1,jump3d:64:2: other jumps on one grid)").c_str())
      ("rhs", po::value<std::string>()->default_value(kRhsKinds[0].second), rhs_help.c_str())
      ("nrhs", po::value<int>()->default_value(1),
       ("number of right-hand sides k (ones/random), 1.." + std::to_string(kMaxRhsColumns)).c_str())
      ("seed", po::value<std::string>()->default_value("1"), "seed for --rhs random (a non-negative integer)")
      ("tol", po::value<double>()->default_value(it.stop.rtol), "relative tolerance: stop when ||r|| <= max(tol ||b||, atol)")
      ("atol", po::value<double>()->default_value(it.stop.atol), "absolute tolerance")
      ("maxit", po::value<int>()->default_value(it.stop.max_iterations), "maximum iterations")
      ("solver", enum_value(lib.solver), choices<SolverKind>().c_str())
      ("kernel", po::value<std::string>()->default_value(lib.kernel.name()), "auto or a registry kernel (see spcg bench spmv --list)")
      ("precond", enum_value(default_preconditioner(false)), precond_help.c_str())
      ("block-size", po::value<int>()->default_value(pc.block_size),
       "block-jacobi: b x b diagonal blocks, 1..8 (0: detect the node block structure)")
      ("cheb-degree", po::value<int>()->default_value(pc.chebyshev_degree),
       "chebyshev: the polynomial's degree (degree - 1 SpMVs per apply)")
      ("cheb-ratio", po::value<double>()->default_value(pc.chebyshev_ratio),
       "chebyshev: fit the polynomial on [lambda_max / ratio, lambda_max] of D^-1 A")
      ("amg-theta", po::value<double>()->default_value(pc.strength_theta),
       "amg: strength of connection, |a_ij| >= theta sqrt(a_ii a_jj)")
      ("amg-prolongator", enum_value(pc.prolongator),
       "amg: smoothed (Vanek-Mandel-Brezina) | plain (the tentative P: cheaper setup, more iterations)")
      ("amg-p-smoothings", po::value<int>()->default_value(pc.prolongator_smoothings),
       "amg: damped-Jacobi steps on the tentative prolongator (smoothed aggregation), 1..3")
      ("amg-omega", po::value<double>()->default_value(pc.prolongator_omega),
       "amg: each prolongator smoothing's damping x lambda_max(D^-1 A), in (0, 2)")
      ("amg-smoother", enum_value(pc.smoother), ("amg: " + choices<AmgSmoother>()).c_str())
      ("amg-sweeps", po::value<int>()->default_value(pc.smoother_degree),
       "amg: the smoother's degree (Chebyshev) or sweeps (l1-Jacobi), before and after the coarse correction")
      ("amg-smoother-ratio", po::value<double>()->default_value(pc.smoother_ratio),
       "amg: the Chebyshev smoother works on [lambda_max / ratio, lambda_max] of D^-1 A")
      ("amg-coarse-rows", po::value<int>()->default_value(pc.coarse_rows),
       "amg: coarsen until a level has at most this many rows (solved by a dense Cholesky)")
      ("amg-whole-rows", po::value<int64_t>()->default_value(pc.whole_level_rows),
       "amg on several GPUs: a coarse level of at most this many rows is held whole by every rank (below it, each "
       "rank's redundant copy); a larger one stays split over the ranks")
      ("smoothing-apart", "amg, chebyshev: run the smoother's steps apart from the product (the same bits, 16 B a row "
       "more a step), where a kernel would fuse them")
      ("vector-ops", enum_value(it.vector_ops), (choices<VectorOps>() + " (thrust: the reference path of cg)").c_str())
      ("x0", po::value<std::string>(), "initial guess (Matrix Market); default zero")
      ("output", po::value<std::string>(), "write the solution x (Matrix Market array)")
      ("report-file", po::value<std::string>(), "write the report as JSON (.json) or CSV (.csv)")
      ("history", po::value<std::string>(), "write the residual history as CSV")
      ("plot", po::value<std::string>(), "draw the residual history of every column (and, on several GPUs, each rank's phases) as SVG")
      ("monitor", po::value<int>()->default_value(it.monitor_every), "print a residual line every N iterations (0: none)")
      ("check-every", po::value<int>()->default_value(it.check_every), "fused path: the most iterations between residual reads (fewer near convergence)")
      ("stagnation", po::value<int>()->default_value(it.stagnation_window),
       "block-cg: hand the running columns to multi-cg after N iterations without a new best residual, when the block has lost rank or is within 1000x of the target (0: never)")
      ("timing", enum_value(lib.timing), (choices<KernelTiming>() + " (auto: per-kernel events on large systems)").c_str())
      ("graph", enum_value(it.graph), (choices<Switch>() + ": CUDA graph for the iteration batches").c_str())
      ("persistent", enum_value(it.persistent), persistent_help.c_str())
      ("precision", enum_value(lib.precision),
       (choices<Precision>() + ": cg's matrix values in the iteration; mixed: the kernel's FP32 variant (dia-f32) with FP64 "
        "vectors, sums and true residual; auto: mixed where every value is an FP32 number and the kernel has one. With "
        "--precond amg the iteration stays FP64 and mixed (auto too) is the hierarchy's: FP32 values on the levels whose "
        "kernel has the variant").c_str())
      ("recurrence", enum_value(it.recurrence),
       (choices<CgRecurrence>() + ": cg's with Jacobi or none; one-reduction sums once an iteration (Chronopoulos-Gear, "
        "the true residual put back where it says converged); auto: one-reduction on several GPUs").c_str())
      ("deterministic", "atomic-free kernels, fixed-order reductions; prints a checksum of x")
      ("verify", "check ||b - A x|| / ||b|| on the host with Eigen (and compare with Eigen's CG for small systems)")
      ("backend", enum_value(lib.backend), (choices<Backend>() + " (auto: gpu when a CUDA device exists)").c_str())
      ("threads", po::value<int>()->default_value(ReadOptions{}.threads), "threads reading the matrix file (0: all cores)")
      ("gpus", po::value<int>()->default_value(1),
       ("solve on N GPUs of this machine, one process each (NCCL); " + several_gpus_names<SolverKind>() + " with " +
        several_gpus_names<Preconditioner>() + ". Under mpirun / srun each process is a rank by itself").c_str())
      ("device", po::value<int>()->default_value(0),
       "the GPU of a one-GPU solve, by its index among the visible ones; chosen before CUDA starts, so that CUDA "
       "initialises that GPU alone")
      ("rendezvous", po::value<std::string>(), "MPI ranks: the file rank 0 leaves the NCCL id in (default: spcg-<uid>/ in $TMPDIR or /tmp, named after the "
       "job; written owner-only, removed once every rank has read it)")
      ("repeat", po::value<int>()->default_value(1),
       "solve the same system N times on the one setup; the report (and x) are the first solve's, with the later ones' median time")
      ("force", "solve even if the matrix is not symmetric or has a non-positive diagonal")
      ("profile", "bracket the solve with cudaProfilerStart/Stop (for ncu/nsys --capture-range)");
  po::positional_options_description matrix_argument;  // spcg solve A.mtx
  matrix_argument.add("matrix", 1);
  po::variables_map vm;
  if (!parse_command_line(args, opts, matrix_argument, vm)) return std::nullopt;
  SolveCommand c;
  if (vm.count("matrix") && vm.count("generate")) throw UsageError("--matrix and --generate conflict: give one");
  c.generated = vm.count("generate") > 0;
  c.source = c.generated ? vm["generate"].as<std::string>()
                         : vm.count("matrix") ? vm["matrix"].as<std::string>() : default_matrix_path();
  {  // a sequence: the first sets up, the later ones update
    std::vector<std::string> all;
    for (size_t from = 0;;) {
      const size_t comma = c.source.find(',', from);
      all.push_back(c.source.substr(from, comma == std::string::npos ? std::string::npos : comma - from));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    for (const std::string& one : all)
      if (one.empty())
        throw UsageError(std::string(c.generated ? "--generate" : "--matrix") + " '" + c.source +
                         "': an empty name in the comma-separated sequence");
    c.source = all.front();
    c.later.assign(all.begin() + 1, all.end());
  }
  SolverOptions& so = c.solver;
  SolveOptions& o = so.iteration;
  so.solver = option_value<SolverKind>(vm, "solver");
  const bool force = vm.count("force") > 0;
  so.precond = vm["precond"].defaulted() ? default_preconditioner(force) : option_value<Preconditioner>(vm, "precond");
  PreconditionerOptions& po_ = so.precond_options;
  po_.block_size = vm["block-size"].as<int>();
  po_.chebyshev_degree = vm["cheb-degree"].as<int>();
  po_.chebyshev_ratio = vm["cheb-ratio"].as<double>();
  po_.strength_theta = vm["amg-theta"].as<double>();
  po_.prolongator = option_value<AmgProlongator>(vm, "amg-prolongator");
  po_.smoother = option_value<AmgSmoother>(vm, "amg-smoother");
  po_.smoother_degree = vm["amg-sweeps"].as<int>();
  po_.coarse_rows = vm["amg-coarse-rows"].as<int>();
  po_.whole_level_rows = vm["amg-whole-rows"].as<int64_t>();
  po_.fuse_smoothing = vm.count("smoothing-apart") == 0;
  po_.smoother_ratio = vm["amg-smoother-ratio"].as<double>();
  po_.prolongator_smoothings = vm["amg-p-smoothings"].as<int>();
  po_.prolongator_omega = vm["amg-omega"].as<double>();
  o.vector_ops = option_value<VectorOps>(vm, "vector-ops");
  so.timing = option_value<KernelTiming>(vm, "timing");
  o.graph = option_value<Switch>(vm, "graph");
  o.persistent = option_value<Switch>(vm, "persistent");
  o.recurrence = option_value<CgRecurrence>(vm, "recurrence");
  so.precision = option_value<Precision>(vm, "precision");
  so.backend = option_value<Backend>(vm, "backend");
  so.kernel = vm["kernel"].as<std::string>();
  c.nrhs = vm["nrhs"].as<int>();
  const int maxit = vm["maxit"].as<int>(), monitor = vm["monitor"].as<int>();
  const double tol = vm["tol"].as<double>(), atol = vm["atol"].as<double>();
  check_rhs_columns(c.nrhs, "--nrhs");
  if (maxit < 0) throw UsageError("--maxit must be >= 0");
  if (!(tol >= 0) || !(atol >= 0) || !std::isfinite(tol) || !std::isfinite(atol))
    throw UsageError("--tol and --atol must be finite and >= 0");
  if (monitor < 0 || vm["check-every"].as<int>() < 1) throw UsageError("--monitor must be >= 0 and --check-every >= 1");
  if (vm["stagnation"].as<int>() < 0) throw UsageError("--stagnation must be >= 0");
  if (vm["threads"].as<int>() < 0) throw UsageError("--threads must be >= 0");
  if (o.vector_ops == VectorOps::thrust && so.solver != SolverKind::cg)
    throw UsageError("--vector-ops thrust is the reference path of --solver cg only");
  c.rhs = parse_rhs(vm["rhs"].as<std::string>());
  {  // as text: Boost reads "-1" into an unsigned value as 2^64 - 1
    const std::string seed = vm["seed"].as<std::string>();
    const auto [end, ec] = std::from_chars(seed.data(), seed.data() + seed.size(), c.seed);
    if (ec != std::errc() || end != seed.data() + seed.size()) throw UsageError("--seed must be a non-negative integer, got '" + seed + "'");
  }
  for (auto [name, field] : {std::pair{"x0", &c.x0}, std::pair{"output", &c.output},
                             std::pair{"report-file", &c.report_file}, std::pair{"history", &c.history},
                             std::pair{"plot", &c.plot}})
    if (vm.count(name)) *field = vm[name].as<std::string>();
  c.threads = vm["threads"].as<int>();
  c.gpus = vm["gpus"].as<int>();
  if (c.gpus < 1 || c.gpus > 1024) throw UsageError("--gpus must be between 1 and 1024");
  if (vm["device"].as<int>() < 0) throw UsageError("--device must be >= 0");
  c.repeat = vm["repeat"].as<int>();
  if (c.repeat < 1 || c.repeat > 10000) throw UsageError("--repeat must be between 1 and 10000");
  if (!vm["device"].defaulted() && (c.gpus > 1 || as_ranks))
    throw UsageError("--device picks the GPU of a one-GPU solve; ranks take one GPU each");
  if (vm.count("rendezvous")) c.rendezvous = vm["rendezvous"].as<std::string>();
  c.verify = vm.count("verify") > 0, so.profile_solves = vm.count("profile") > 0;
  so.check_matrix = !force;
  so.matrix_name = c.source;
  o.stop = {tol, atol, maxit};
  o.check_every = vm["check-every"].as<int>();
  o.stagnation_window = vm["stagnation"].as<int>();
  o.deterministic = vm.count("deterministic") > 0, o.monitor_every = monitor, o.keep_history = c.history || c.plot;
  if (monitor > 0) o.progress = [](const std::string& line) { std::printf("%s\n", line.c_str()); };
  return c;
}

// --report-file (JSON or CSV by its extension), --history (CSV) and --plot (SVG).
void write_report_files(const SolveCommand& c, const SolveReport& rep) {
  if (c.plot) write_text(*c.plot, residual_svg(rep));
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

DenseBlock read_initial_guess(const std::string& path, GlobalIndex n, int k) {
  DenseFile f = read_dense_matrix_market(path);
  if (f.block.rows != n || f.block.cols != k)
    throw InputError(path, 0, "initial guess is " + std::to_string(f.block.rows) + " x " + std::to_string(f.block.cols) +
                                  ", expected " + std::to_string(n) + " x " + std::to_string(k));
  require_finite(f.block, path);
  return std::move(f.block);
}

// ---- several GPUs: one process per rank ----

// The options a rank cannot run, refused once (by the launcher, before any process starts) in the library's
// words: what runs on several GPUs is declared there (several_gpus_refusal).
void check_rank_options(const SolveCommand& c) {
  if (const std::string why = several_gpus_refusal(c.solver); !why.empty()) throw UsageError(why);
  if (!c.later.empty())
    throw UsageError("a sequence of matrices (new values on one pattern) runs on one GPU: a rank's Solver does not "
                     "take new values yet");
  // past 2^31 rows (a generated system; a file's rows are int32) x stays with its ranks: nothing gathers it whole,
  // and a whole right-hand side or initial guess cannot hold that many rows
  if (c.generated && generated_rows(c.source) > std::numeric_limits<int32_t>::max()) {
    const char* gathers = c.output ? "--output" : c.verify ? "--verify" : c.solver.iteration.deterministic ? "--deterministic's checksum"
                        : std::holds_alternative<RhsFile>(c.rhs) ? "--rhs FILE" : c.x0 ? "--x0" : nullptr;
    if (gathers)
      throw UsageError(std::string(gathers) + ": " + c.source + " has " + std::to_string(generated_rows(c.source)) +
                       " rows, more than a whole vector on one process holds (2^31 - 1): drop it");
  }
}

// An integer option's value from the raw arguments (--gpus and --device are decided before CUDA starts); `absent`
// when it is not there or not a number (the full parse then says what is wrong).
int raw_int_option(const std::vector<std::string>& args, const std::string& flag, int absent) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string v;
    if (args[i] == flag && i + 1 < args.size()) v = args[i + 1];
    else if (args[i].rfind(flag + "=", 0) == 0) v = args[i].substr(flag.size() + 1);
    else continue;
    try {
      return std::stoi(v);
    } catch (const std::exception&) {
      return absent;
    }
  }
  return absent;
}

// Rows [begin, end) of a block given whole (a right-hand side or initial guess file, whose rows are the
// system's): all of it on one GPU.
DenseBlock rows_of(DenseBlock whole, GlobalIndex begin, GlobalIndex end) {
  if (begin == 0 && end == whole.rows) return whole;
  DenseBlock out(static_cast<int32_t>(end - begin), whole.cols);
  std::copy(whole.data.begin() + static_cast<long>(begin) * whole.cols, whole.data.begin() + static_cast<long>(end) * whole.cols,
            out.data.begin());
  return out;
}

// Joins a thread on every exit path.
struct JoinOnExit {
  std::thread& t;
  ~JoinOnExit() {
    if (t.joinable()) t.join();
  }
};

// One solve, on one GPU (or the host) or as one rank of several (`ranks`: this process's place; the rank count
// is a parameter, not another path). A rank gets its NCCL id and starts NCCL after CUDA on a thread of its own
// while it reads or generates; the library partitions (rank_share, generated_share) and sets up the rank's
// Solver; rank 0 gathers the ranks' figures (and x, when written, verified or checksummed) and reports.
int solve(const SolveCommand& c, const std::optional<RankContext>& ranks, CudaStart& cuda) {
  const int rank = ranks ? ranks->rank : 0, size = ranks ? ranks->size : 1;
  if (ranks && c.gpus != 1 && c.gpus != size)
    throw UsageError("--gpus " + std::to_string(c.gpus) + ", but " + ranks->started_by + " started " + std::to_string(size) + " ranks");
  if (!ranks && c.gpus > 1) throw UsageError("--gpus " + std::to_string(c.gpus) + " needs this program's launcher");
  if (ranks) check_rank_options(c);
  if (rank == 0) check_outputs(c);  // rank 0 writes them
  const std::string rank_name = "rank " + std::to_string(rank);
  std::optional<ScopedRange> rank_range;  // Nsight Systems: each process's phases under its rank
  if (ranks) rank_range.emplace(rank_name.c_str());
  SolveReport rep;
  // A rank gets NCCL's id from rank 0 and starts NCCL once CUDA is up (~0.5 s: topology, buffers), on a thread of
  // its own, overlapping its generation or read (CUDA itself started first thing in run_solve)
  CommunicatorPtr comm;
  std::exception_ptr start_failure;
  double nccl_ms = 0, id_ms = 0, sums_ms = 0;
  std::string why_no_gpu;
  bool have_gpu = false;
  std::thread starter([&] {
    try {
      NcclId id;
      if (ranks) {
        const auto t_id = std::chrono::steady_clock::now();
        id = share_unique_id(*ranks, c.rendezvous, 120);
        id_ms = ms_since(t_id);
      }
      have_gpu = cuda.wait(&why_no_gpu);
      if (!ranks) return;
      if (!have_gpu) throw CudaError(why_no_gpu);
      const auto t_nccl = std::chrono::steady_clock::now();
      comm = make_nccl_communicator(rank, size, id);
      nccl_ms = ms_since(t_nccl);
      const auto t_sums = std::chrono::steady_clock::now();
      connect_sums(*comm);  // while this rank still reads or generates
      sums_ms = ms_since(t_sums);
    } catch (...) {
      start_failure = std::current_exception();
    }
  });
  JoinOnExit join_starter{starter};

  // the matrix: a file (read whole on one GPU; on ranks each reads a share of its bytes, and the rows travel to
  // their owners once NCCL is up), or a generator (a rank makes its own rows only)
  auto t0 = std::chrono::steady_clock::now();
  const RhsFile* rhs_file = std::get_if<RhsFile>(&c.rhs);
  std::optional<DenseBlock> b_whole;  // --rhs FILE fixes k; ones / random take --nrhs
  if (rhs_file) b_whole = read_rhs_file(rhs_file->path);
  Problem whole;
  RankBlocks share;
  ReadOptions read_options;
  read_options.threads = c.threads;  // 0: every thread this process may use (a rank's share of the host's: run_solve)
  std::optional<MatrixFile> file_part;  // a rank's share of the file's bytes, parsed
  if (ranks && c.generated) {
    ScopedRange r("generate");
    share = generated_share(c.source, size, rank);
    rep.phases.push_back({"generate (own rows)", ms_since(t0)});
    whole.name = c.source;
  } else if (ranks) {
    ScopedRange r("read");
    read_options.part = {rank, size};
    file_part = read_matrix_market(c.source, read_options);
    whole.name = file_part->info.name.empty() ? std::filesystem::path(c.source).filename().string() : file_part->info.name;
    whole.read = file_part->info.read;
    rep.phases.push_back({"read (1/" + std::to_string(size) + " of the file)", ms_since(t0)});
  } else {
    ScopedRange r("read");
    whole = load_problem(c.source, read_options, /*with_stats=*/false);
    rep.phases.push_back({"read", whole.read_ms});
  }
  // the system's rows: a generated one on ranks may pass 2^31 (check_rank_options kept every whole vector off it)
  const GlobalIndex n = ranks && c.generated ? generated_rows(c.source) : file_part ? file_part->matrix.rows : whole.a.rows;
  const double problem_ms = ms_since(t0);
  // the right-hand side's and initial guess's sizes, checked before waiting for CUDA and NCCL
  if (b_whole) require_rhs_rows(*b_whole, n, rhs_file->path);
  const int k = b_whole ? b_whole->cols : c.nrhs;
  std::optional<DenseBlock> x0_whole;
  if (c.x0) x0_whole = read_initial_guess(*c.x0, n, k);

  t0 = std::chrono::steady_clock::now();
  starter.join();
  if (start_failure) std::rethrow_exception(start_failure);
  const double waited_ms = ms_since(t0);
  if (ranks) {
    // the starter thread's steps, one after the other, all overlapped with the read or generation (CUDA's own
    // start began with the process, so it also overlaps the id)
    rep.phases.insert(rep.phases.begin(), {{"start: NCCL id (overlapped)", id_ms},
                                           {"start: CUDA (overlapped)", cuda.ms()},
                                           {"start: NCCL (overlapped)", nccl_ms},
                                           {"start: NCCL's sums connected (overlapped)", sums_ms}});
    rep.phases.push_back({"wait for CUDA + NCCL", waited_ms});
    end_rendezvous(*ranks, c.rendezvous);  // every rank has joined
    if (file_part) {  // the parts' rows to their owners: the partition, the rows, the plan
      ScopedRange r("file rows");
      FileShare fs = file_share(std::move(*file_part), c.source, read_options, *comm);
      file_part.reset();
      share = std::move(fs.share);
      whole.duplicates_summed = fs.info.duplicates_summed;
      rep.phases.push_back({"file rows to their ranks", fs.exchange_ms});
      for (const Phase& step : fs.steps) rep.phases.push_back({"  of which " + step.name, step.ms});
    }
  } else {
    if (c.solver.backend == Backend::gpu && !have_gpu) throw CudaError("--backend gpu: " + why_no_gpu);
    if (c.solver.backend == Backend::automatic && !have_gpu)
      std::printf("No CUDA device (%s): running the host reference solver (Eigen ConjugateGradient).\n", why_no_gpu.c_str());
    rep.phases.insert(rep.phases.begin(), {"start (CUDA, overlapped)", cuda.ms()});
    if (waited_ms > 0.05) rep.phases.push_back({"wait for CUDA", waited_ms});
  }

  // this rank's rows of b and x0 (a rank reading a file knows them once the rows are exchanged)
  const GlobalIndex begin = ranks ? share.row_begin : 0, end = ranks ? share.row_end : n;
  std::optional<DenseBlock> b_rows, x0_rows;
  if (b_whole) b_rows = rows_of(rank == 0 && c.verify ? *b_whole : std::move(*b_whole), begin, end);  // rank 0 keeps it for --verify
  if (x0_whole) x0_rows = rows_of(std::move(*x0_whole), begin, end);

  SolverOptions so = c.solver;
  so.backend = have_gpu && so.backend != Backend::host ? Backend::gpu : Backend::host;
  so.expected_columns = k;
  so.duplicates_summed = whole.duplicates_summed;
  rep.matrix = c.source, rep.name = whole.name, rep.rows = n, rep.nnz = ranks ? 0 : whole.a.nnz(), rep.nrhs = k;
  rep.reader = whole.read;
  rep.solver = name_of(so.solver), rep.precond = name_of(so.precond), rep.vector_ops = name_of(so.iteration.vector_ops);
  rep.backend = ranks ? "gpu x " + std::to_string(size) + " (NCCL, " + ranks->started_by + ")" : name_of(so.backend);
  rep.rtol = so.iteration.stop.rtol, rep.atol = so.iteration.stop.atol;

  // The setup: checks, upload, statistics, kernel choice (and a rank's connections). A refusal --force can
  // override says so.
  const int64_t rank_nnz = share.local.nnz() + share.halo.nnz();
  std::optional<Solver> made;
  try {
    if (ranks) made.emplace(std::move(share), n, *comm, so);  // taken over, not copied (a share can be tens of GB)
    else made.emplace(std::move(whole.a), so);
  } catch (const MatrixRefusedError& e) {
    if (!e.overridable()) throw;
    throw InputError(e.file(), e.line(), e.problem() + " (use --force to try anyway)");
  }
  Solver& solver = *made;
  for (const Phase& p : solver.setup_phases())
    if (p.name != kSetupTotal) rep.phases.push_back(p);
  rep.kernel = (ranks ? "rank 0: " : "") + solver.kernel(so.solver == SolverKind::cg ? 1 : k);
  rep.kernel_reason = solver.kernel_reason();
  rep.precision = name_of(solver.precision());
  rep.precision_reason = solver.precision_reason();
  if (const PreconditionerReport* pr = solver.preconditioner()) {
    rep.preconditioner = *pr;
    rep.precond = name_of(pr->kind);
    if (so.precond == Preconditioner::automatic) rep.precond = std::string("auto -> ") + name_of(pr->kind);
  }
  DenseBlock x;  // the solution (this rank's rows) on the host
  auto solve_once = [&](DenseBlock& into) {
    if (b_rows) {
      into = x0_rows ? *x0_rows : DenseBlock(solver.rows(), k, 0.0);
      return solver.solve(*b_rows, into);
    }
    return solver.solve(std::get<RhsKind>(c.rhs), k, c.seed, into, x0_rows ? &*x0_rows : nullptr);
  };
  rep.result = solve_once(x);
  // --repeat: the same system again on the kept setup (and a rank's connections): what a time-stepping user pays
  // per solve, reported beside the first solve's. The report, x and the exit status are the first solve's.
  std::vector<double> later_ms;
  for (int i = 1; i < c.repeat; ++i) {
    DenseBlock again;
    later_ms.push_back(solve_once(again).solve_ms);
  }
  if (so.backend == Backend::gpu) {
    // the CSR in host memory to the first iteration (the right-hand sides in place included)
    rep.phases.push_back({"vectors", rep.result.vectors_ms});
    rep.phases.push_back({std::string(kSetupTotal), setup_total_ms(solver.setup_phases()) + rep.result.vectors_ms});
  }
  rep.phases.push_back({"solve", rep.result.solve_ms});
  if (!later_ms.empty()) {
    std::sort(later_ms.begin(), later_ms.end());
    rep.phases.push_back({"solve again (median of " + std::to_string(later_ms.size()) + ")", later_ms[later_ms.size() / 2]});
  }

  if (ranks) {  // the ranks' figures, summed into rank 0's report
    const CommunicationStats st = communication_stats(*comm);
    RankLine me;
    me.setup_ms = setup_total_ms(solver.setup_phases());
    me.rows = solver.rows(), me.nnz = rank_nnz, me.halo_in = solver.halo_entries(), me.halo_out = solver.send_entries();
    me.problem_ms = problem_ms, me.nccl_ms = nccl_ms, me.solve_ms = rep.result.solve_ms;
    me.sums = st.sums, me.sum_ms = st.sum_ms, me.exchanges = st.exchanges;
    me.sent_bytes = double(st.exchange_bytes_sent), me.exchange_ms = st.exchange_ms;
    me.memory_bytes = double(solver.device_memory_in_use());
    std::vector<double> fig(static_cast<size_t>(size) * kRankFigures, 0.0);
    pack_rank_figures(me, fig.data() + static_cast<size_t>(rank) * kRankFigures);
    sum_over_ranks(*comm, fig);
    for (int r = 0; r < size; ++r) {
      rep.ranks.push_back(unpack_rank_figures(fig.data() + static_cast<size_t>(r) * kRankFigures, r));
      rep.nnz += rep.ranks.back().nnz;
    }
    // x whole on rank 0 when it is written, checked or checksummed (a sum of disjoint rows)
    if (c.output || c.verify || so.iteration.deterministic) {
      std::vector<double> all(static_cast<size_t>(n) * k, 0.0);  // n fits int32 here (check_rank_options)
      std::copy(x.data.begin(), x.data.end(), all.begin() + static_cast<long>(begin) * k);
      sum_over_ranks(*comm, all);
      x = DenseBlock(static_cast<int32_t>(n), k);
      std::copy(all.begin(), all.end(), x.data.begin());
    }
  }
  if (rank != 0) return rep.result.all_converged() ? 0 : 3;

  if (so.iteration.deterministic) rep.checksum = fnv1a_checksum(x.data);
  if (c.verify) {
    ScopedRange r("verify");
    const auto tv = std::chrono::steady_clock::now();
    // on ranks, rank 0 makes or reads the whole matrix now (the ranks held shares)
    const CsrMatrix& a = !ranks ? solver.matrix() : (whole.a = c.generated ? generate(c.source) : read_matrix_market(c.source).matrix);
    const DenseBlock& b = b_whole ? *b_whole : *(b_whole = made_rhs(std::get<RhsKind>(c.rhs), static_cast<int32_t>(n), k, c.seed));
    const std::vector<double> rel = relative_residuals(a, x, b);
    rep.verify_relative_residual = *std::max_element(rel.begin(), rel.end());
    if (n <= kEigenComparisonMaxRows && so.backend == Backend::gpu) {
      HostSolveResult h = eigen_cg(a, b, so.iteration.stop.rtol, so.iteration.stop.max_iterations,
                                   rep.preconditioner.kind == Preconditioner::jacobi);
      rep.eigen_iterations = *std::max_element(h.iterations.begin(), h.iterations.end());
      double num = 0, den = 0;
      for (size_t i = 0; i < x.data.size(); ++i)
        num = std::max(num, std::abs(x.data[i] - h.x.data[i])), den = std::max(den, std::abs(h.x.data[i]));
      rep.eigen_solution_difference = den > 0 ? num / den : num;
    }
    rep.phases.push_back({"verify", ms_since(tv)});
  }
  if (c.output)
    write_dense_matrix_market(*c.output, x, {" solution written by spcg solve" +
                                             (ranks ? " (" + std::to_string(size) + " GPUs)" : std::string())});
  // A sequence's later matrices (one GPU or the host): each one's values on the kept setup, then a solve with the
  // same right-hand sides. The report above, x and --verify are the first matrix's; the steps are listed apart.
  bool steps_converged = true;
  for (const std::string& source : c.later) {
    ScopedRange step_range("step");
    StepLine st;
    st.matrix = source;
    const auto t_read = std::chrono::steady_clock::now();
    ReadOptions ro;
    ro.threads = c.threads;
    Problem next = load_problem(source, ro, /*with_stats=*/false);
    st.read_ms = ms_since(t_read);
    try {
      solver.update_values(std::move(next.a));
    } catch (const MatrixRefusedError& e) {  // named by the step's matrix, not the first's
      throw InputError(source, 0, e.problem() + (e.overridable() ? " (use --force to try anyway)" : ""));
    } catch (const InputError& e) {
      throw InputError(source, e.line(), e.problem());
    }
    st.update_phases = solver.update_phases();
    st.precision = name_of(solver.precision()), st.precision_reason = solver.precision_reason();
    if (const PreconditionerReport* pr = solver.preconditioner()) st.preconditioner = *pr;
    DenseBlock xs;
    const SolveResult r = solve_once(xs);
    st.solve_ms = r.solve_ms, st.converged = r.all_converged();
    for (const ColumnResult& col : r.columns) {
      st.iterations = std::max(st.iterations, col.iterations);
      st.relative_true_residual = std::max(st.relative_true_residual, col.b_norm > 0 ? col.true_residual / col.b_norm : col.true_residual);
    }
    if (so.iteration.deterministic) st.checksum = fnv1a_checksum(xs.data);
    steps_converged = steps_converged && st.converged;
    rep.steps.push_back(std::move(st));
  }
  rep.phases.push_back({"wall (process)", ms_since_process_start()});
  print_report(rep);
  write_report_files(c, rep);
  return rep.result.all_converged() && steps_converged ? 0 : 3;
}

}  // namespace

std::string default_matrix_path() {
  for (const std::string& p : {std::string(SPCG_SOURCE_DIR) + "/inputs/fv1.mtx", std::string("inputs/fv1.mtx")})
    if (std::filesystem::exists(p)) return p;
  return "inputs/fv1.mtx";
}

int run_solve(const std::vector<std::string>& args) {
  // Several GPUs: a rank (started by --gpus's launcher, mpirun or srun) picks its GPU before CUDA starts; the
  // launcher itself starts no CUDA context of its own and runs no solve.
  const std::optional<RankContext> rank = rank_context_from_environment();
  if (rank) {
    select_gpu_of_rank(*rank);
    nccl_start_defaults();  // setenv while this process still has one thread (CUDA's start reads the environment)
    set_thread_budget(std::max(1, hardware_threads() / std::max(1, rank->local_size)));  // the host's cores shared among its ranks
  } else if (const int gpus = std::max(1, raw_int_option(args, "--gpus", 1)); gpus > 1) {
    const std::optional<SolveCommand> parsed = parse_solve_command(args, true);  // usage errors once, here
    if (!parsed) return 0;
    check_rank_options(*parsed);
    check_outputs(*parsed);
    std::vector<std::string> argv = {"solve"};
    argv.insert(argv.end(), args.begin(), args.end());
    return launch_ranks(gpus, argv);
  } else {
    const int device = raw_int_option(args, "--device", -1);  // one GPU: CUDA initialises that one only
    select_device_before_cuda(std::max(device, 0), device >= 0);
  }
  // CUDA starts first, on a thread of its own: it takes about as long as reading a large file.
  CudaStart cuda;
  const std::optional<SolveCommand> parsed = parse_solve_command(args, rank.has_value());
  if (!parsed) return 0;
  const SolveCommand& c = *parsed;
  if (!rank) return solve(c, std::nullopt, cuda);
  try {
    return solve(c, rank, cuda);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "spcg solve: rank %d of %d: %s\n", rank->rank, rank->size, e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spcg solve: rank %d of %d: error: %s\n", rank->rank, rank->size, e.what());
    return 1;
  }
}

}  // namespace spcg
