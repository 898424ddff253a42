#pragma once
// The vocabulary of a solve, shared by the public interface (spcg.hpp), the solvers and the CLI: every option
// typed once as an enum with its one list of names (option_names<E>: the CLI parses them, reports print them),
// the stopping rule, and what a solve returns. No CUDA here: a library user includes it without the toolkit.
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spcg/kernel_stat.hpp"

namespace spcg {

enum class SolverKind { cg, multi_cg, block_cg };
// M^-1 for CG (solver/preconditioner.hpp): none, the inverse diagonal, inverted diagonal blocks, a Chebyshev
// polynomial in D^-1 A, a smoothed-aggregation AMG V-cycle, or auto (chosen from the statistics, with a reason).
enum class Preconditioner { none, jacobi, block_jacobi, chebyshev, amg, automatic };
enum class AmgProlongator { smoothed, plain };  // one damped-Jacobi step on the tentative P, or P itself
enum class AmgSmoother { chebyshev, l1_jacobi };
enum class VectorOps { fused, thrust };  // fused kernels, or the Thrust reference path (cg only)
enum class Switch { automatic, on, off };  // CUDA graph batches; the one-launch persistent CG
enum class KernelTiming { automatic, kernels, phases };  // per-kernel events, or phases only
enum class Backend { automatic, gpu, host };  // host: Eigen's CG (no device needed)
// cg's recurrence (Jacobi or none, one right-hand side): classic Hestenes-Stiefel (two sums an iteration: p'Ap,
// then r'r and r'z) or Chronopoulos & Gear's (one sum of r'r, r'z and w'u after w = A u, with the true residual
// put back where the recurrence says converged); auto: one sum where the sums cross ranks (a sum there is a
// collective whose latency a one-GPU reduction does not have), classic on one GPU (the same launches, 8 bytes a
// row fewer).
enum class CgRecurrence { automatic, classic, one_reduction };
// Where cg's products read the matrix values: FP64, or mixed (the kernel's FP32-values variant inside the
// iteration; the vectors, the sums and the true residual stay FP64, and the true residual replaces the recursive
// one wherever the latter says converged, so every answer is judged in FP64); auto: mixed where the values are FP32
// numbers already (nothing is lost) and the kernel has an FP32 variant, else double, with the reason.
// With AMG the iteration stays FP64 and mixed is the hierarchy's: each level whose kernel has an FP32-values variant
// applies it in the smoother, the residual and the spectrum estimate (a preconditioner's values need not be exact:
// the FP64 iteration judges the answer); auto takes it wherever such a level exists. Where every value is an FP32
// number, cg's products read the finest level's FP32 copy too (on one GPU): its products are A's, bit for bit.
enum class Precision { automatic, double_precision, mixed };

template <class E>
struct OptionNames;
template <>
struct OptionNames<SolverKind> {
  static constexpr std::array<std::pair<SolverKind, const char*>, 3> list{
      {{SolverKind::cg, "cg"}, {SolverKind::multi_cg, "multi-cg"}, {SolverKind::block_cg, "block-cg"}}};
};
template <>
struct OptionNames<Preconditioner> {
  static constexpr std::array<std::pair<Preconditioner, const char*>, 6> list{
      {{Preconditioner::none, "none"}, {Preconditioner::jacobi, "jacobi"}, {Preconditioner::block_jacobi, "block-jacobi"},
       {Preconditioner::chebyshev, "chebyshev"}, {Preconditioner::amg, "amg"}, {Preconditioner::automatic, "auto"}}};
};
template <>
struct OptionNames<AmgProlongator> {
  static constexpr std::array<std::pair<AmgProlongator, const char*>, 2> list{
      {{AmgProlongator::smoothed, "smoothed"}, {AmgProlongator::plain, "plain"}}};
};
template <>
struct OptionNames<AmgSmoother> {
  static constexpr std::array<std::pair<AmgSmoother, const char*>, 2> list{
      {{AmgSmoother::chebyshev, "chebyshev"}, {AmgSmoother::l1_jacobi, "l1-jacobi"}}};
};
static_assert(OptionNames<Preconditioner>::list.size() == 6);  // the array's size is spelled out above; keep them in step
template <>
struct OptionNames<VectorOps> {
  static constexpr std::array<std::pair<VectorOps, const char*>, 2> list{
      {{VectorOps::fused, "fused"}, {VectorOps::thrust, "thrust"}}};
};
template <>
struct OptionNames<Switch> {
  static constexpr std::array<std::pair<Switch, const char*>, 3> list{
      {{Switch::automatic, "auto"}, {Switch::on, "on"}, {Switch::off, "off"}}};
};
template <>
struct OptionNames<KernelTiming> {
  static constexpr std::array<std::pair<KernelTiming, const char*>, 3> list{
      {{KernelTiming::automatic, "auto"}, {KernelTiming::kernels, "kernels"}, {KernelTiming::phases, "phases"}}};
};
template <>
struct OptionNames<Backend> {
  static constexpr std::array<std::pair<Backend, const char*>, 3> list{
      {{Backend::automatic, "auto"}, {Backend::gpu, "gpu"}, {Backend::host, "host"}}};
};

template <>
struct OptionNames<CgRecurrence> {
  static constexpr std::array<std::pair<CgRecurrence, const char*>, 3> list{
      {{CgRecurrence::automatic, "auto"}, {CgRecurrence::classic, "classic"}, {CgRecurrence::one_reduction, "one-reduction"}}};
};

template <>
struct OptionNames<Precision> {
  static constexpr std::array<std::pair<Precision, const char*>, 3> list{
      {{Precision::automatic, "auto"}, {Precision::double_precision, "double"}, {Precision::mixed, "mixed"}}};
};

// The name of a value ("multi-cg"), and the value of a name (nothing when it is not one).
template <class E>
const char* name_of(E value) {
  for (const auto& [v, n] : OptionNames<E>::list)
    if (v == value) return n;
  return "?";
}
template <class E>
std::optional<E> parse_option(std::string_view name) {
  for (const auto& [v, n] : OptionNames<E>::list)
    if (name == n) return v;
  return std::nullopt;
}
// "cg, multi-cg or block-cg": the names of E's values that `keep` accepts, in the list's order, for messages and
// help texts (option_names: all of them).
template <class E, class Keep>
std::string option_names_where(Keep keep) {
  std::vector<const char*> names;
  for (const auto& [v, n] : OptionNames<E>::list)
    if (keep(v)) names.push_back(n);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return s;
}
template <class E>
std::string option_names() {
  return option_names_where<E>([](E) { return true; });
}

// What runs on several GPUs, declared once: every solver; every preconditioner (Jacobi and block-Jacobi from the
// rank's rows, block-Jacobi's blocks cut at the rank's boundaries; Chebyshev through the distributed product, its
// interval from a Lanczos estimate over the ranks; AMG smoothing level 0 with the distributed product, its coarser
// levels each rank's own (solver/amg.cpp); auto choosing among these); the fused vector kernels (the Thrust
// reference keeps its scalars on one host). The CLI and a rank's Solver refuse the rest with
// several_gpus_refusal()'s words (spcg.hpp), and the CLI's help lists these.
constexpr bool runs_on_several_gpus(SolverKind) { return true; }
constexpr bool runs_on_several_gpus(Preconditioner) { return true; }
constexpr bool runs_on_several_gpus(VectorOps v) { return v == VectorOps::fused; }
// "none, jacobi, ... or auto": the values of E that run on several GPUs (the refusals' words, the CLI's help).
template <class E>
std::string several_gpus_names() {
  return option_names_where<E>([](E v) { return runs_on_several_gpus(v); });
}
// The one-reduction recurrence's refusal of a preconditioner (empty for none, Jacobi and auto, which is checked
// again once it has chosen): one set of words for the setup and the solve.
std::string one_reduction_refusal(Preconditioner p);
// The refusal for what does not run on several GPUs (empty: it does).
std::string several_gpus_refusal(Preconditioner p);
std::string several_gpus_refusal(VectorOps v);

// The kernel a solve runs: auto (chosen from the matrix's statistics and a timed trial, with a printed reason)
// or a registry kernel by name (spcg bench --list; checked at setup, UsageError listing the names).
class KernelChoice {
 public:
  KernelChoice() = default;  // auto
  KernelChoice(std::string name) : name_(std::move(name)) {}  // NOLINT: "dia" reads as a choice
  KernelChoice(const char* name) : name_(name) {}             // NOLINT
  bool is_auto() const { return name_ == "auto"; }
  const std::string& name() const { return name_; }  // "auto" (the registry's entry for auto) or a kernel's name
  bool operator==(const KernelChoice& o) const { return name_ == o.name_; }
  bool operator!=(const KernelChoice& o) const { return name_ != o.name_; }

 private:
  std::string name_ = "auto";
};

// Stop when ||r_j|| <= max(rtol ||b_j||, atol), or after max_iterations.
struct StopRule {
  double rtol = 1e-8;
  double atol = 0;
  int max_iterations = 10000;
};

// breakdown: p'Ap <= 0 (A not positive definite); precond_not_positive: r'M^-1 r <= 0 (M not positive definite);
// interrupted: SolveOptions::interrupted asked the solve to end (x holds the last iterate); stagnated: the true
// residual b - A x stopped falling above the tolerance (restarts from it made no progress: the tolerance lies below
// what this iteration reaches, the FP64 rounding of this system or, mixed, its FP32 copy's; x holds the last
// iterate, the residual is its true one).
enum class ColumnStatus { running, converged, deflated, max_iterations, breakdown, non_finite, precond_not_positive, interrupted,
                          stagnated };
const char* to_string(ColumnStatus s);

// A named span of wall time (the report's phase lines).
struct Phase {
  std::string name;
  double ms;
};
// The setup's last phase, its whole time (a Solver ends its setup_phases() with it).
inline constexpr std::string_view kSetupTotalPhase = "setup (total)";
// An update's last phase (Solver::update_values), its whole time: update_phases() ends with it.
inline constexpr std::string_view kUpdateTotalPhase = "update (total)";

// The preconditioners' own options (each defined here once; the CLI's --block-size, --cheb-degree, ... set them).
struct PreconditionerOptions {
  int block_size = 0;             // block-jacobi: b x b diagonal blocks (0: detected from the node structure, else 1..8)
  int chebyshev_degree = 3;       // chebyshev: the residual polynomial's degree (degree - 1 SpMVs per apply)
  double chebyshev_ratio = 30;    // the interval [lambda_max / ratio, lambda_max] the polynomial is fitted to
  double lambda_max_safety = 1.1; // lambda_max = safety x the Lanczos estimate (Ritz values lie below the truth)
  int eigen_steps = 10;           // Lanczos steps of the estimate (the largest Ritz value settles first)
  // amg
  // strong: |a_ij| >= theta sqrt(a_ii a_jj) (Vanek, Mandel & Brezina's epsilon). 0 (every nonzero strong, as
  // PyAMG's SA default): with 0.08 the 3D coarse levels, whose many small couplings all fall below it, barely
  // coarsened (poisson3d:128, level 1 -> 2: 188588 -> 92925 rows; docs/perf-notes.md)
  double strength_theta = 0;
  AmgProlongator prolongator = AmgProlongator::smoothed;
  // smoothed: damped-Jacobi steps on P0. 2 contracts more (2D Poisson V-cycle 0.23 against 0.33-0.47 in the SciPy
  // prototype, scripts/sa_prototype.py) for a denser coarse level
  int prolongator_smoothings = 1;
  // each smoothing step's damping: omega = prolongator_omega / lambda_max(D^-1 A), lambda_max the Lanczos
  // estimate. 4/3 (Vanek, Mandel & Brezina); 1.5 with two smoothings gave 2D Poisson's V-cycle 0.13 in the
  // SciPy prototype
  double prolongator_omega = 4.0 / 3.0;
  AmgSmoother smoother = AmgSmoother::chebyshev;
  // Chebyshev degree, or l1-Jacobi sweeps, before and after the coarse correction. 3: on the six SPD files
  // where Jacobi-CG needs >= 1000 iterations, 4366 iterations in all against degree 2's 5779 (H100)
  int smoother_degree = 3;
  // the smoother's steps after the first inside the level product's epilogue where its kernel offers it (DIA, one
  // column): the same bits as apart, 16 bytes a row less each step (docs/perf-notes.md); false runs them apart
  bool fuse_smoothing = true;
  double smoother_ratio = 20;     // the Chebyshev smoother's interval [lambda_max / ratio, lambda_max] (PETSc GAMG's)
  // stop coarsening at this many rows: a dense Cholesky (host, Eigen) solves the coarsest level; its inverse
  // costs n^3 flops (357 rows: 23 ms on the device machine's host), so the coarsest level stays small
  int coarse_rows = 250;
  // on several GPUs: a coarse level of at most this many rows (over all ranks) is gathered and held whole by every
  // rank, and every level below it is each rank's redundant copy (hypre's and AmgX's agglomeration); a larger one
  // stays split over the ranks, with its own halo plan. At 150000 rows a level's V-cycle work (~10 products of
  // ~30 entries a row) is ~0.5 ms on one GPU, against ~10 exchanges' latency when split: docs/perf-notes.md
  int64_t whole_level_rows = 150000;
  int max_levels = 12;
  uint64_t seed = 0;              // the aggregation's hashed priorities
};

// One level of an AMG hierarchy, for the report.
struct AmgLevelReport {
  int32_t rows = 0;
  int64_t nnz = 0;
  std::string kernel;  // the operator's kernel on this level (auto's choice, or its FP32 variant), or "dense" on the coarsest
  double smoother_lambda_max = 0;
  // several GPUs: the level's rows over all ranks, this rank's halo slots (split levels), and whether every rank
  // holds the level whole (the coarse levels below PreconditionerOptions::whole_level_rows)
  int64_t global_rows = 0;
  int64_t halo = 0;
  bool held_whole = false;
};

// What a preconditioner's setup did, for the report (table, JSON) and the library user.
struct PreconditionerReport {
  Preconditioner kind = Preconditioner::none;
  std::string reason;                  // auto: why this one
  std::string detail;                  // e.g. "degree 3 on [0.0667, 2.0]", "blocks 3 x 3 (detected)"
  std::vector<Phase> phases;           // setup phases in ms
  double setup_ms = 0;
  double lambda_min = 0, lambda_max = 0;  // chebyshev: the interval of D^-1 A the polynomial is fitted to
  int block_size = 0;                  // block-jacobi
  std::vector<AmgLevelReport> levels;  // amg only
  double operator_complexity = 0;      // amg: sum nnz / nnz of the fine level
  double grid_complexity = 0;          // amg: sum rows / rows of the fine level
  // Its own operators' values (amg: mixed when a level applies an FP32-values kernel) and which, or why not
  Precision precision = Precision::double_precision;
  std::string precision_reason;
};

// How the iteration runs (the solver's own options; SolverOptions in spcg.hpp adds the setup's).
struct SolveOptions {
  StopRule stop;
  VectorOps vector_ops = VectorOps::fused;
  int check_every = 8;                    // fused path: the most iterations between host reads of the residual (fewer near convergence)
  Switch graph = Switch::automatic;       // replay the fused iteration batch from a CUDA graph (auto: when not timing kernels)
  Switch persistent = Switch::automatic;  // small systems run CG in one cooperative launch
  CgRecurrence recurrence = CgRecurrence::automatic;  // cg's (Jacobi or none): classic, or one sum an iteration
  bool time_kernels = true;               // per-kernel events (off: phases only)
  bool deterministic = false;             // atomic-free kernels, fixed-order reductions
  int monitor_every = 0;                  // a progress line every N iterations (0: none), given to `progress`
  std::function<void(const std::string&)> progress;  // where progress lines go (empty: nowhere; the library never prints)
  bool keep_history = false;              // the residual norm of every checked iteration, per column
  // Asked at the residual checks (at most every 50 ms): true ends the solve, its running columns `interrupted`
  // (Python's Ctrl-C). One process only: on several GPUs every rank would have to answer alike.
  std::function<bool()> interrupted;
  // block-cg: the running columns go on as multi-cg when the largest relative residual among them has not
  // fallen below 0.9 x its best for this many iterations (0: never), when the block has lost rank or is near
  // the target (far from it, a full-rank block is in CG's usual rise and plateau)
  int stagnation_window = 200;
};

struct ColumnResult {
  ColumnStatus status = ColumnStatus::running;
  int iterations = 0;
  double b_norm = 0;
  double recursive_residual = 0;  // the solver's own ||r||
  double true_residual = 0;       // ||b - A x|| recomputed at the end
};

struct SolveResult {
  std::string solver;
  std::vector<ColumnResult> columns;
  std::vector<KernelStat> kernels;
  double solve_ms = 0;            // wall time of the iteration (device synchronised)
  double vectors_ms = 0;          // right-hand sides and initial guess put in place before the iteration
  double timing_overhead_ms = 0;  // estimated device time added by the per-kernel events
  int64_t operator_applies = 0;   // SpMV / SpMM calls
  int64_t operator_columns = 0;   // sum of the block widths of those calls
  bool used_graph = false;
  bool used_persistent = false;     // CG ran as one cooperative kernel (small system)
  bool used_one_reduction = false;  // cg ran Chronopoulos & Gear's recurrence (one sum an iteration)
  int residual_replacements = 0;    // ... and put the true residual back this often (its recurrence said converged early)
  // Columns finished another way, and why and how (when fallback_columns > 0): block-cg's by multi-cg (the block
  // recurrence broke down or stalled); mixed precision's with A's FP64 values (the FP32 copy stalled above the
  // tolerance)
  int fallback_columns = 0;
  std::string fallback_reason;
  std::vector<std::vector<std::pair<int, double>>> history;
  bool all_converged() const;
};

}  // namespace spcg
