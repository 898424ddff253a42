// spcg::Solver (include/spcg/spcg.hpp): the setup a solve needs, made once and kept, and solves on it, on one
// GPU or as one rank of several (one setup path: only the operator differs).
// GPU backend: the checks a matrix must pass, the operator (one GPU: MatrixSetup, one upload with statistics and
// layouts on the device, then a registry kernel or auto; a rank: the DistributedOperator over its share, whose
// exchanges and sums are connected before the first solve), the preconditioner; each solve puts B and X in place
// on the device and runs cg / multi-cg / block-cg, whose reductions the engine sums over the ranks.
// Host backend: the host statistics and Eigen's CG, its verdict through the same Monitor as the GPU's.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <future>
#include <string>

#include <cuda_profiler_api.h>

#include "kernels/solver_ops/blas1.hpp"
#include "solver/amg.hpp"
#include "kernels/solver_ops/cg_persistent.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/kernel_preload.hpp"
#include "kernels/distributed_operator.hpp"
#include "sparse/eigen_bridge.hpp"
#include "sparse/parallel.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/nvtx.hpp"
#include "kernels/registry.hpp"
#include "kernels/solver_ops/thrust_ops.hpp"
#include "kernels/setup_kernels.hpp"
#include "solver/solver.hpp"
#include "spcg/distributed.hpp"
#include "spcg/spcg.hpp"
#include "sparse/timing.hpp"

namespace spcg {
namespace {

struct SetupMemoryRule {
  // What the setup let go goes back to the driver from this size on (cudaMemPoolTrimTo); below it the pool keeps
  // it for the solves' vectors, whose first allocation would otherwise pay cudaMallocAsync's growth (0.08-0.31 ms
  // each, kernels/device_array.cpp).
  static constexpr size_t give_back_from_bytes = size_t{64} << 20;
};

struct KernelTimingRule {
  // timing auto: per-kernel CUDA events from this many rows (of the whole system) on. Below it an iteration is
  // tens of microseconds and the events' few microseconds each would distort what they measure; above it they
  // cost under 2 % and the kernel table is worth having.
  static constexpr int64_t per_kernel_events_from_rows = 200000;
};

OperatorOptions operator_options(const SolverOptions& o) {
  OperatorOptions oo;
  oo.deterministic = o.iteration.deterministic;
  oo.autotune = !oo.deterministic;  // a timed trial may pick another kernel (another sum order) on another run
  oo.expected_k = o.solver == SolverKind::cg ? 1 : std::max(1, o.expected_columns);
  return oo;
}

// What CG cannot solve is refused before a solve, naming the first offending row (MatrixRefusedError: an
// asymmetry or a non-positive diagonal may be overridden with check_matrix off; a non-square matrix or a NaN
// may not). `st` are the statistics of the whole matrix, or of one rank's diagonal block (a principal block of
// a symmetric A is symmetric, and e_i' A e_i > 0 for SPD A): then `first_row` is its first global row and
// `block` names it in the message ("the diagonal block of rows 101..200").
void check_matrix(const MatrixStats& st, const SolverOptions& o, int64_t first_row = 0, const std::string& block = "") {
  const std::string& name = o.matrix_name;
  const std::string of = block.empty() ? "" : " (" + block + ")";
  if (!st.square)
    throw MatrixRefusedError(name, "matrix is " + std::to_string(st.rows) + " x " + std::to_string(st.cols) +
                                       ", CG needs a square matrix", false);
  if (st.non_finite_values > 0)
    throw MatrixRefusedError(name, "matrix has " + std::to_string(st.non_finite_values) + " NaN or Inf entries" + of,
                             false);
  if (!st.numerically_symmetric && o.check_matrix)
    throw MatrixRefusedError(name, "matrix is not symmetric" + of + " (max relative asymmetry " +
                                       std::to_string(st.max_asymmetry) + "); CG needs an SPD matrix", true);
  // a_ii = e_i' A e_i > 0 for every SPD A, so a zero, negative or missing diagonal proves A indefinite (or
  // singular) before any iteration runs; the solver would only report a breakdown or a stall later.
  if (!st.diagonal_positive && o.check_matrix) {
    char diag[64];
    std::snprintf(diag, sizeof diag, st.first_nonpositive_value == 0 ? "0 (zero or missing)" : "%.6g",
                  st.first_nonpositive_value);
    throw MatrixRefusedError(name, "matrix is not positive definite: row " +
                                       std::to_string(first_row + st.first_nonpositive_row + 1) + " has diagonal " +
                                       diag + " (" + std::to_string(st.nonpositive_diagonal) +
                                       " such rows" + (block.empty() ? "" : " in " + block) +
                                       "), and an SPD matrix has a positive diagonal", true);
  }
}

// Per-kernel events on large systems (KernelTimingRule), or when asked.
bool times_each_kernel(const SolverOptions& o, int64_t global_rows) {
  return o.timing == KernelTiming::kernels ||
         (o.timing == KernelTiming::automatic && global_rows >= KernelTimingRule::per_kernel_events_from_rows);
}

// Refuses before allocating when the device cannot hold the system. Two peaks, the larger decides: the setup's,
// the CSR beside the layout made from it (DIA, SELL: at most the CSR's bytes again); and the solve's, the vectors
// beside the layout that stayed (the CSR itself for a CSR kernel; a smaller DIA, with the CSR let go, for a
// stencil). Their sum, the rule before, refused poisson3d:1400 on 4 H200s (146 GB against 142 free), whose
// setup peak is ~130 GB (measured on poisson3d:1291: 94.3 GiB at its size).
void check_device_memory(int32_t rows, int64_t nnz, int k, SolverKind solver) {
  const DeviceMemoryInfo memory = device_memory_info();
  const size_t free_b = memory.free_bytes, total_b = memory.total_bytes;
  const double vectors = (solver == SolverKind::block_cg ? 8.0 : 6.0) * rows * double(k) * 8;
  const double csr = 12.0 * double(nnz) + 8.0 * rows;
  const double needed = std::max(2.0 * csr, csr + vectors);
  if (needed > double(free_b))
    throw DeviceMemoryError("not enough GPU memory: this solve needs about " + std::to_string(needed / (1 << 20)) +
                            " MiB, " + std::to_string(double(free_b) / (1 << 20)) + " MiB free of " +
                            std::to_string(double(total_b) / (1 << 20)));
}

// A rank's rows: check_matrix on its diagonal block (the device's statistics), and the few halo entries finite.
void check_rank_rows(const DistributedOperator& op, const SolverOptions& o) {
  const RankBlocks& b = op.blocks();
  for (int32_t i = 0; i < b.halo.rows; ++i)
    for (int32_t q = b.halo.row_ptr[i]; q < b.halo.row_ptr[i + 1]; ++q)
      if (!std::isfinite(b.halo.values[q]))
        throw InputError(o.matrix_name, 0, "row " + std::to_string(b.row_begin + i + 1) + " holds a NaN or Inf entry");
  check_matrix(op.local_setup().stats(), o, b.row_begin,
               "the diagonal block of rows " + std::to_string(b.row_begin + 1) + ".." + std::to_string(b.row_end));
}

// The host backend (Eigen's CG) offers Jacobi only; auto resolves to it there.
bool host_jacobi(const SolverOptions& o, const CsrMatrix& a) {
  if (o.precond == Preconditioner::none) return false;
  if (o.precond != Preconditioner::jacobi && o.precond != Preconditioner::automatic)
    throw UsageError(std::string("the host backend offers --precond none or jacobi, not ") + name_of(o.precond));
  try {
    jacobi_inverse_diagonal(a);  // the check
  } catch (const InputError& e) {
    // auto takes none where the diagonal is not positive, as its rule on the GPU does; jacobi asked for is refused
    if (o.precond == Preconditioner::automatic) return false;
    throw InputError(o.matrix_name, 0, e.problem());
  }
  return true;
}

// The one-reduction recurrence is cg's, with the fused vector operations and Jacobi or none (auto's choice is
// checked when it is made: solver/cg.cpp). Refused at setup, on either backend.
void check_recurrence(const SolverOptions& o) {
  // (and a kernel that stores FP32 values is mixed precision's iteration operator, not a choice of its own: the
  // true residual would be judged on the rounded matrix)
  if (const KernelEntry* e = find_kernel(o.kernel.name()); e && e->fp32_values) {
    std::string base = "its FP64 kernel";
    for (const KernelEntry& f : kernel_registry())
      if (f.fp32_variant == e->name) base = f.name;
    throw UsageError("kernel " + e->name + " stores FP32 values (mixed precision's iteration operator): choose " + base +
                     " with --precision mixed");
  }
  if (o.iteration.recurrence != CgRecurrence::one_reduction) return;
  if (o.solver != SolverKind::cg || o.iteration.vector_ops == VectorOps::thrust)
    throw UsageError("the one-reduction recurrence is cg's with the fused vector operations (multi-cg and block-cg "
                     "keep their own)");
  if (const std::string why = one_reduction_refusal(o.precond); !why.empty()) throw UsageError(why);
}

// How a new matrix's pattern differs from the solver's, in words (the host's and the device's checks alike).
std::string size_difference(int64_t rows, int64_t cols, int64_t nnz, int64_t kept_rows, int64_t kept_cols, int64_t kept_nnz) {
  if (rows != kept_rows || cols != kept_cols)
    return "the new matrix is " + std::to_string(rows) + " x " + std::to_string(cols) + ", the solver's " +
           std::to_string(kept_rows) + " x " + std::to_string(kept_cols);
  if (nnz != kept_nnz)
    return "the new matrix has " + std::to_string(nnz) + " entries, the solver's pattern " + std::to_string(kept_nnz);
  return "";
}
std::string row_differs(int64_t row) { return "row " + std::to_string(row + 1) + "'s pattern differs: "; }
std::string extent_difference(int64_t row, int64_t begin, int64_t end, int64_t kept_begin, int64_t kept_end) {
  return row_differs(row) + "it holds " + std::to_string(end - begin) + " entries from position " + std::to_string(begin) +
         ", the solver's " + std::to_string(kept_end - kept_begin) + " from " + std::to_string(kept_begin);
}
std::string column_difference(int64_t row, int64_t entry, int64_t column, int64_t kept_column) {
  return row_differs(row) + "its entry " + std::to_string(entry + 1) + " is in column " + std::to_string(column + 1) +
         ", the solver's in column " + std::to_string(kept_column + 1);
}

// The first difference between the solver's pattern and a's, in words; empty when they are the same.
std::string pattern_difference(const CsrMatrix& kept, const CsrMatrix& a) {
  if (std::string why = size_difference(a.rows, a.cols, a.nnz(), kept.rows, kept.cols, kept.nnz()); !why.empty())
    return why;
  if (a.row_ptr.size() != kept.row_ptr.size() || a.values.size() != kept.values.size())
    return "the new matrix's CSR arrays are malformed (" + std::to_string(a.row_ptr.size()) + " row pointers, " +
           std::to_string(a.values.size()) + " values for " + std::to_string(a.nnz()) + " entries)";
  // row i's difference in words, or empty
  auto row_difference = [&](int32_t i) -> std::string {
    const RowOffset begin = a.row_ptr[i], end = a.row_ptr[i + 1];
    if (begin != kept.row_ptr[i] || end != kept.row_ptr[i + 1])
      return extent_difference(i, begin, end, kept.row_ptr[i], kept.row_ptr[i + 1]);
    for (RowOffset q = begin; q < end; ++q)
      if (a.col_idx[q] != kept.col_idx[q]) return column_difference(i, q - begin, a.col_idx[q], kept.col_idx[q]);
    return "";
  };
  // rows in parts on every core (poisson3d:200's 8M rows: 24 ms on one core), each part's first differing row;
  // the first of those is the matrix's
  const int64_t parts = kept.rows >= (int32_t{1} << 16) ? 4 * int64_t{hardware_threads()} : 1;
  std::vector<int32_t> first(static_cast<size_t>(parts), -1);
  parallel_for(parts, hardware_threads(), [&](int64_t p) {
    const int32_t end = static_cast<int32_t>(even_split(kept.rows, parts, p + 1));
    for (int32_t i = static_cast<int32_t>(even_split(kept.rows, parts, p)); i < end; ++i) {
      const RowOffset begin = a.row_ptr[i], stop = a.row_ptr[i + 1];
      bool same = begin == kept.row_ptr[i] && stop == kept.row_ptr[i + 1];
      for (RowOffset q = begin; same && q < stop; ++q) same = a.col_idx[q] == kept.col_idx[q];
      if (!same) {
        first[static_cast<size_t>(p)] = i;
        return;
      }
    }
  });
  for (const int32_t row : first)
    if (row >= 0) return row_difference(row);
  return "";
}

void refuse_pattern(const std::string& why, const std::string& matrix_name) {
  if (!why.empty())
    throw InputError(matrix_name, 0, "update_values: " + why + " (new values must keep the sparsity pattern; a new "
                                                               "pattern needs a new Solver)");
}

template <class T>
T device_value(const T* at) {
  T h{};
  CHECK_CUDA(cudaMemcpy(&h, at, sizeof(T), cudaMemcpyDeviceToHost));
  return h;
}

// The same on the device, for a device CSR against the solver's: one pass over each array; only a difference
// brings the few entries its message names (and the row pointers, to find an entry's row) to the host.
std::string device_pattern_difference(const DeviceCsr& kept, const DeviceCsrRef& a) {
  if (std::string why = size_difference(a.rows, a.cols, a.nnz, kept.rows, kept.cols, kept.nnz); !why.empty()) return why;
  if (const int64_t i = first_difference(a.row_ptr, kept.row_ptr.data(), int64_t{a.rows} + 1); i >= 0) {
    if (i == 0) return "the new matrix's row pointers do not start at 0";
    return extent_difference(i - 1, device_value(a.row_ptr + i - 1), device_value(a.row_ptr + i),
                             device_value(kept.row_ptr.data() + i - 1), device_value(kept.row_ptr.data() + i));
  }
  if (const int64_t q = first_difference(a.col_idx, kept.col_idx.data(), a.nnz); q >= 0) {
    const std::vector<int32_t> rp = kept.row_ptr.download<std::vector<int32_t>>();
    const int64_t row = std::upper_bound(rp.begin(), rp.end(), static_cast<int32_t>(q)) - rp.begin() - 1;
    return column_difference(row, q - rp[static_cast<size_t>(row)], device_value(a.col_idx + q),
                             device_value(kept.col_idx.data() + q));
  }
  return "";
}

// The operator's share of a setup or an update, by phase: what MatrixSetup spent (upload, statistics, shared
// layouts), the kernel's own conversion, and the rest of making the operator (auto's trial, a kernel's analysis).
std::vector<Phase> operator_phases(const MatrixSetup& matrix, const LinearOperator& local, double operator_ms) {
  const SetupInfo& si = local.setup_info();
  const SetupTimes& shared = matrix.times();
  const double converted_ms = shared.conversion_ms + si.convert_ms;
  return {{"upload", shared.upload_ms},
          {"statistics", shared.statistics_ms},
          {"conversion", converted_ms},
          {"analysis", std::max(0.0, operator_ms - shared.upload_ms - shared.statistics_ms - converted_ms - si.upload_ms)}};
}

// The modules whose kernels a setup with preconditioner p and its solves launch, loaded on a thread of their own
// while the setup uploads the matrix (kernels/kernel_preload.hpp). auto may choose AMG: its modules too.
std::vector<const void*> modules_to_preload(Preconditioner p) {
  const bool amg = p == Preconditioner::amg || p == Preconditioner::automatic;
  // in the order of their first launch: the statistics, the operator, the preconditioner's setup, its levels'
  // kernels and its apply, the solve's vector steps
  std::vector<const void*> m = {setup_kernels_module(), dia_module()};
  if (amg) m.push_back(amg_kernels_module());
  if (amg || p == Preconditioner::chebyshev) m.push_back(lanczos_ops_module());
  if (amg)
    for (const void* level : {sell_module(), csr_stream_module(), csr_vector_module()}) m.push_back(level);
  if (p != Preconditioner::none) m.push_back(precond_ops_module());
  for (const void* solve : {cg_ops_module(), vector_ops_module()}) m.push_back(solve);
  return m;
}

void require_shape(const char* what, int32_t rows, int32_t cols, int32_t want_rows, int want_cols) {
  if (rows != want_rows || cols != want_cols)
    throw UsageError(std::string(what) + " is " + std::to_string(rows) + " x " + std::to_string(cols) + ", expected " +
                     std::to_string(want_rows) + " x " + std::to_string(want_cols));
}

}  // namespace

struct Solver::Impl {
  SolverOptions options;
  Backend backend = Backend::gpu;
  std::unique_ptr<CsrMatrix> host;  // host input (moved in), or nothing for a device input or a rank's share
  std::unique_ptr<MatrixSetup> setup;  // one GPU: the whole matrix on the device
  MatrixStats host_stats;              // host backend
  Communicator* comm = nullptr;        // a rank of several: the ranks
  GlobalIndex row_begin = 0, global_rows = 0;
  std::unique_ptr<LinearOperator> op;
  DistributedOperator* rank_op = nullptr;  // op, as a rank's share
  std::unique_ptr<PreconditionerOp> precond;  // after op: it may hold a reference to it
  std::unique_ptr<LinearOperator> op32;       // mixed precision: the kernel's FP32-values variant
  const LinearOperator* iteration32 = nullptr;  // what cg's products read: op32, or the preconditioner's copy
  bool op32_exact = false;                    // ... whose values are A's (every value an FP32 number)
  Precision precision = Precision::double_precision;  // as resolved
  bool fp32_iteration = false;  // mixed in the iteration's own products (not AMG's hierarchy alone)
  std::string precision_reason;
  bool host_jacobi = false;                   // host backend
  std::vector<Phase> phases;
  std::vector<Phase> update_phases;  // the last update's
  int updates = 0;
  // The device CSR an update copies its pattern from: the setup's (uploaded again by the first update if the
  // setup let it go), then each update's own, held so that the next update finds it.
  std::shared_ptr<const DeviceCsr> update_pattern;
  // Keeps the last update's host values (a CSR held in `host`) locked while `host` holds them (PinnedUploader says
  // why): let go before `host` changes, and declared after it, so destroyed (unlocking them) before it.
  std::unique_ptr<PinnedUploader> values_upload;
  // Started by the setup; not joined there (on a small matrix it can outlast the setup), but by the destructor.
  // The solves' graph captures are thread-local, so its loads on its own thread do not disturb them.
  std::unique_ptr<KernelPreload> preload;

  // The GPU setup after `setup` exists (one GPU) or from this rank's share: checks, the operator, the
  // connections to the other ranks, the preconditioner; the same phases either way.
  void set_up_on_device(RankBlocks* share) {
    const auto t_setup = std::chrono::steady_clock::now();
    NvtxRange range("setup");
    preload = std::make_unique<KernelPreload>(modules_to_preload(options.precond));
    const OperatorOptions oo = operator_options(options);
    const int k = std::max(1, options.expected_columns);
    const auto t_op = std::chrono::steady_clock::now();
    if (!share) {
      check_matrix(setup->stats(), options);  // uploads the CSR, then one pass on the device
      check_device_memory(setup->rows(), setup->nnz(), k, options.solver);
      op = make_operator(options.kernel.name(), *setup, oo);
    } else {
      check_device_memory(share->rows(), share->local.nnz() + share->halo.nnz(), k, options.solver);
      auto d = std::make_unique<DistributedOperator>(std::move(*share), *comm, oo);  // uploads, statistics, kernel
      agree_over_ranks(comm, [&] { check_rank_rows(*d, options); });  // before connect's collectives
      rank_op = d.get(), op = std::move(d);
    }
    const double operator_ms = ms_since(t_op);
    if (options.iteration.deterministic && !op->deterministic())
      throw UsageError("deterministic solves: kernel '" + op->name() + "' is not deterministic (choose one of ours)");
    const MatrixSetup& matrix = rank_op ? rank_op->local_setup() : *setup;
    const LinearOperator& local = rank_op ? rank_op->local_operator() : *op;
    const auto t_connect = std::chrono::steady_clock::now();
    if (rank_op) rank_op->connect(oo.expected_k);  // NCCL's channels, made now rather than in the first solve
    const double connect_ms = ms_since(t_connect);
    // (read before the preconditioner: what it converts of the matrix, e.g. AMG's FP32 level 0, is its own)
    std::vector<Phase> operator_share = operator_phases(matrix, local, operator_ms);
    const auto t_precond = std::chrono::steady_clock::now();
    {
      NvtxRange precond_range("preconditioner");
      // this GPU's rows (a rank's diagonal block) and the product the solver applies (a rank's: the distributed one)
      PreconditionerInputs in{matrix, *op, oo, options.matrix_name, k, options.iteration.stop.rtol, row_begin,
                              options.precision};
      // a rank's refusal (a block that is not SPD, a non-positive diagonal) reaches every rank before the solve's sums
      agree_over_ranks(comm, [&] { precond = make_preconditioner(options.precond, options.precond_options, in); });
    }
    const double precond_ms = ms_since(t_precond);
    if (options.iteration.recurrence == CgRecurrence::one_reduction && precond)  // auto's choice, now made
      if (const std::string why = one_reduction_refusal(precond->report().kind); !why.empty())
        throw UsageError(why + " (auto's choice)");
    const auto t_precision = std::chrono::steady_clock::now();
    resolve_precision(oo);
    phases = std::move(operator_share);
    phases[2].ms += fp32_iteration ? ms_since(t_precision) : 0.0;  // "conversion": the FP32 stripes
    if (rank_op) phases.push_back({"connect", connect_ms});
    phases.push_back({"preconditioner", precond_ms});
    // A solve keeps only what it reads: the device CSR and the layouts no operator or preconditioner holds go,
    // back to the driver when they are a large share (a GPU's bytes per row decide the largest job it can take)
    if (matrix.release_unheld() >= SetupMemoryRule::give_back_from_bytes) release_idle_device_memory();
    phases.push_back({std::string(kSetupTotalPhase), ms_since(t_setup)});
    if (comm) comm->set_timing(times_each_kernel(options, global_rows));
  }

  // Mixed precision where it runs (cg with Jacobi or none, a kernel with an FP32 variant: one GPU's, or each
  // rank's local block's) and is asked for, or auto where the values are FP32 numbers already; the reason either
  // way. On several GPUs every rank takes the same choice (a rank without it would leave the others' restarts
  // unmatched): auto only where every rank can, and an asked-for mixed refused on every rank if one cannot. Before
  // the setup lets the device CSR go (auto reads its values).
  // The choice, made without touching the solver (an update commits it only once everything else succeeded).
  struct PrecisionChoice {
    Precision precision = Precision::double_precision;
    std::string reason;
    std::unique_ptr<LinearOperator> op32;  // one GPU's FP32 copy (a rank's is made by commit_precision)
    const LinearOperator* held32 = nullptr;  // ... or the preconditioner's own (AMG's finest level), not owned
    bool exact = false;                    // every value an FP32 number: the copy's products are A's
    const KernelEntry* kernel = nullptr;
    bool hierarchy_only = false;  // AMG's levels chose it; the iteration stays FP64 (no FP32 copy of A)
  };
  PrecisionChoice choose_precision(const LinearOperator& op_now, const PreconditionerOp* precond_now,
                                   const MatrixSetup& matrix, const OperatorOptions& oo) const {
    PrecisionChoice c;
    if (options.precision == Precision::double_precision) {
      c.reason = "asked";
      return c;
    }
    const Preconditioner pc = precond_now ? precond_now->report().kind : Preconditioner::none;
    if (pc == Preconditioner::amg) {  // the hierarchy chose its levels' precision
      const PreconditionerReport& amg = precond_now->report();
      c.precision = amg.precision;
      c.hierarchy_only = true;
      c.reason = "the iteration in FP64 with an AMG hierarchy " + amg.precision_reason;
      // cg's products on the finest level's FP32 copy where it loses nothing: every value an FP32 number, so its
      // products are A's bit for bit (the dot fused into them may sum in another order) at half the value bytes;
      // on one GPU, where the hierarchy holds that copy (no second one is made)
      const auto* holder = dynamic_cast<const HoldsFp32Copy*>(precond_now);
      const LinearOperator* copy = holder ? holder->fp32_copy_of_product() : nullptr;
      if (copy && !rank_op && options.solver == SolverKind::cg && options.iteration.vector_ops != VectorOps::thrust) {
        const DeviceCsr& csr = *matrix.device_csr();
        if (thrust_count_not_fp32(csr.values.data(), csr.nnz, 0) == 0) {
          c.held32 = copy, c.exact = true, c.hierarchy_only = false;
          c.reason = "the iteration on the AMG hierarchy's finest level (" + copy->chosen(1) +
                     ": every value an FP32 number, nothing lost) with the hierarchy " + amg.precision_reason;
        }
      }
      return c;
    }
    const LinearOperator& local = rank_op ? rank_op->local_operator() : op_now;
    c.kernel = find_kernel(local.chosen(1));
    std::string why_not;
    if (options.solver != SolverKind::cg) why_not = "mixed precision is cg's, not " + std::string(name_of(options.solver)) + "'s";
    else if (pc != Preconditioner::none && pc != Preconditioner::jacobi)
      why_not = "mixed precision runs with Jacobi, AMG or no preconditioner, not " + std::string(name_of(pc));
    else if (options.iteration.vector_ops == VectorOps::thrust) why_not = "the Thrust reference path is FP64";
    else if (persistent_cg_layout(op_now) &&
             (options.iteration.persistent == Switch::on ||
              (options.iteration.persistent == Switch::automatic && options.precision == Precision::automatic)))
      why_not = "the one-launch persistent CG runs this system (at most " + std::to_string(PersistentCgLimits::max_rows) +
                " rows), in FP64";
    else if (!c.kernel || c.kernel->fp32_variant.empty())
      why_not = "kernel " + local.chosen(1) + " has no FP32-values variant (those with one: " + kernels_with_fp32_variant() + ")";
    // whether FP32 copies of these values lose anything (a rank that fails to count fails every rank)
    int64_t changed = 0, nnz = 0;
    agree_over_ranks(comm, [&] {
      if (options.precision == Precision::mixed && !why_not.empty())
        throw UsageError("--precision mixed: " + why_not + (comm ? " (rank " + std::to_string(comm->rank()) + ")" : ""));
      if (!why_not.empty()) return;
      const DeviceCsr& csr = *matrix.device_csr();
      changed = thrust_count_not_fp32(csr.values.data(), csr.nnz, 0), nnz = csr.nnz;
    });
    if (why_not.empty() && changed > 0 && options.precision == Precision::automatic)
      why_not = std::to_string(changed) + " of the " + std::to_string(nnz) +
                " values are not FP32 numbers (--precision mixed iterates on their FP32 roundings, the FP64 residual "
                "putting the answer right)";
    if (comm) {  // every rank, or none (a rank's restart is a collective); exact only if exact on every rank
      std::vector<double> tally{why_not.empty() ? 0.0 : 1.0, changed > 0 ? 1.0 : 0.0};
      sum_over_ranks(*comm, tally);
      if (tally[0] > 0 && why_not.empty())
        why_not = std::to_string(static_cast<int>(tally[0])) + " other rank(s) keep FP64 values (their reasons differ)";
      changed = static_cast<int64_t>(tally[1]);
    }
    if (!why_not.empty()) {
      c.reason = why_not;
      return c;
    }
    if (!rank_op) c.op32 = make_operator(c.kernel->fp32_variant, matrix, oo);
    c.precision = Precision::mixed;
    c.exact = changed == 0;
    const std::string& copy = c.kernel->fp32_variant;
    c.reason = options.precision == Precision::mixed
                   ? "asked: " + copy + " in the iteration" +
                         (c.exact ? " (every value an FP32 number: nothing lost)" : ", the FP64 residual judging it")
                   : "every value is an FP32 number: " + copy + " loses nothing and reads half the value bytes";
    return c;
  }
  void commit_precision(PrecisionChoice c, const OperatorOptions& oo) {
    if (rank_op && c.precision == Precision::mixed && !c.hierarchy_only) rank_op->make_fp32_copy(oo, c.exact);
    op32 = std::move(c.op32);
    iteration32 = op32 ? op32.get() : c.held32;
    fp32_iteration = c.precision == Precision::mixed && !c.hierarchy_only;
    precision = c.precision;
    precision_reason = std::move(c.reason);
    op32_exact = c.exact;
  }
  void resolve_precision(const OperatorOptions& oo) {
    const MatrixSetup& matrix = rank_op ? rank_op->local_setup() : *setup;
    commit_precision(choose_precision(*op, precond.get(), matrix, oo), oo);
  }

  // ---- update_values: new values on the kept pattern ----

  void refuse_update_on_ranks() const {
    if (comm)
      throw UsageError("update_values: a rank's Solver (several GPUs) does not take new values yet; set up a new one");
  }

  // The solver's pattern on the host (a device input's: downloaded once, on the first call).
  const CsrMatrix& pattern() const { return host ? *host : setup->host(); }

  // The pattern on the device an update checks and copies (update_pattern, made on the first call).
  const DeviceCsr& device_pattern() {
    if (!update_pattern) update_pattern = setup->device_csr();
    return *update_pattern;
  }

  // A device CSR of the solver's pattern with new values (nnz doubles in the CSR order): the pattern copied on the
  // device, the values copied on the device or uploaded alone, locked in chunks: kept locked by *locks where given
  // (for values the solver will hold), else unlocked before the return (memory the caller may free at once).
  std::shared_ptr<const DeviceCsr> pattern_with_values(const double* values, bool values_on_device,
                                                       std::unique_ptr<PinnedUploader>* locks = nullptr) {
    const DeviceCsr& p = device_pattern();
    auto d = std::make_shared<DeviceCsr>();
    d->rows = p.rows, d->cols = p.cols, d->nnz = p.nnz;
    auto copy_on_device = [](auto& to, const auto& from, const char* what) {
      using T = std::remove_reference_t<decltype(*from.data())>;
      to = DeviceArray<std::remove_const_t<T>>(from.size(), what);
      if (from.bytes())
        CHECK_CUDA(cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    };
    copy_on_device(d->row_ptr, p.row_ptr, "CSR row pointers");
    copy_on_device(d->wide_row_ptr, p.wide_row_ptr, "CSR row pointers");
    copy_on_device(d->col_idx, p.col_idx, "CSR column indices");
    d->values = DeviceArray<double>(static_cast<size_t>(p.nnz), "CSR values");
    if (p.nnz > 0 && values_on_device) {
      CHECK_CUDA(cudaMemcpyAsync(d->values.data(), values, d->values.bytes(), cudaMemcpyDeviceToDevice, cudaStreamLegacy));
    } else if (p.nnz > 0) {
      auto upload = std::make_unique<PinnedUploader>();  // (an error here unlocks what it locked)
      upload->copy(d->values.data(), values, d->values.bytes());
      upload->finish();
      if (locks) *locks = std::move(upload);
    }
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));  // the device copies may still run on return
    return d;
  }

  // new_host (its CSR, or null for values on the device) and the setup over it: the checks on the new values,
  // the operator remade with its choice kept, the preconditioner updated (its pattern-made parts kept). The old
  // setup is let go only once all of the new one is made, so that a refusal leaves the solver as it was.
  // t_call: when the update began (its total covers the whole call); check_ms and copy_ms: what it spent before
  // the setup, on the pattern's check (past the upload it overlapped) and on the values' copy ("upload").
  // new_host is taken only once the update succeeds (a failed one leaves it with the caller); host_locks keep its
  // values locked (pattern_with_values) while the solver holds it.
  void update_on_device(std::unique_ptr<CsrMatrix>&& new_host, std::unique_ptr<MatrixSetup> new_setup,
                        std::chrono::steady_clock::time_point t_call, double check_ms, double copy_ms,
                        std::unique_ptr<PinnedUploader> host_locks = nullptr) {
    NvtxRange range("update");
    const OperatorOptions oo = operator_options(options);
    const int k = std::max(1, options.expected_columns);
    const auto t_op = std::chrono::steady_clock::now();
    check_matrix(new_setup->stats(), options);
    std::unique_ptr<LinearOperator> new_op = remake_operator(*op, *new_setup, oo);
    const double operator_ms = ms_since(t_op);
    // (read before the preconditioner: what it converts of the new matrix, e.g. AMG's FP32 level 0, is its own)
    std::vector<Phase> ph = operator_phases(*new_setup, *new_op, operator_ms);
    const auto t_precond = std::chrono::steady_clock::now();
    std::unique_ptr<PreconditionerOp> new_precond;
    if (precond) {
      NvtxRange precond_range("preconditioner");
      PreconditionerInputs in{*new_setup, *new_op, oo, options.matrix_name, k, options.iteration.stop.rtol, row_begin,
                              options.precision};
      new_precond = update_preconditioner(*precond, options.precond_options, in);
    }
    const double precond_ms = ms_since(t_precond);
    ph.front().ms += copy_ms;
    if (check_ms > 0) ph.insert(ph.begin(), {"pattern check", check_ms});
    ph.push_back({"preconditioner", precond_ms});
    // the FP32 copy of the new values (auto: are they FP32 numbers?), made before anything is swapped; the FP32
    // stripes counted with the conversion, as in the setup
    const auto t_precision = std::chrono::steady_clock::now();
    PrecisionChoice new_precision = choose_precision(*new_op, new_precond.get(), *new_setup, oo);
    if (new_precision.precision == Precision::mixed && !new_precision.hierarchy_only)
      for (Phase& phase : ph)
        if (phase.name == "conversion") phase.ms += ms_since(t_precision);
    const auto t_release = std::chrono::steady_clock::now();
    iteration32 = nullptr;
    precond.reset();  // it may hold a reference to the old operator
    op32.reset();
    op = std::move(new_op);
    precond = std::move(new_precond);
    values_upload.reset();  // (the old host values' locks, before those values go)
    setup = std::move(new_setup);  // before the host CSR it holds by reference
    host = std::move(new_host);
    values_upload = std::move(host_locks);
    update_pattern = setup->device_csr();  // (made with the setup: held now, for the next update)
    commit_precision(std::move(new_precision), oo);
    // The CSR and layouts no one holds go, as after the setup; what the old setup let go stays in the pool,
    // where the next update's allocations of the same sizes find it (a new pool allocation costs 0.08-0.31 ms)
    setup->release_unheld();
    // what letting the old values go took: their page locks (an unlock of 448 MB takes ~10 ms) and the memory the
    // new setup does not hold
    ph.push_back({"release", ms_since(t_release)});
    ph.push_back({std::string(kUpdateTotalPhase), ms_since(t_call)});
    update_phases = std::move(ph);
    ++updates;
  }

  // The host backend: the new matrix (its pattern checked already, check_ms from t_call), its statistics and checks;
  // Jacobi stays as the setup chose it.
  void update_on_host(std::unique_ptr<CsrMatrix> new_host, std::chrono::steady_clock::time_point t_call, double check_ms) {
    const auto t0 = std::chrono::steady_clock::now();
    MatrixStats st = compute_stats(*new_host, options.duplicates_summed);
    const double statistics_ms = ms_since(t0);
    check_matrix(st, options);
    if (host_jacobi) {
      try {
        jacobi_inverse_diagonal(*new_host);  // the check
      } catch (const InputError& e) {
        throw InputError(options.matrix_name, 0, e.problem());
      }
    }
    host = std::move(new_host);
    host_stats = std::move(st);
    update_phases = {{"statistics", statistics_ms}, {std::string(kUpdateTotalPhase), ms_since(t_call)}};
    if (check_ms > 0) update_phases.insert(update_phases.begin(), {"pattern check", check_ms});
    ++updates;
  }


  void set_up_on_host() {
    if (options.precision == Precision::mixed) throw UsageError("--precision mixed needs the GPU backend (Eigen's CG is FP64)");
    precision_reason = "the host backend (Eigen's CG) is FP64";
    const auto t0 = std::chrono::steady_clock::now();
    host_stats = compute_stats(*host, options.duplicates_summed);
    phases = {{"statistics", ms_since(t0)}};
    check_matrix(host_stats, options);
    host_jacobi = ::spcg::host_jacobi(options, *host);
  }

  SolveOptions iteration_options() const {
    SolveOptions o = options.iteration;
    o.time_kernels = times_each_kernel(options, global_rows);
    return o;
  }

  // The iteration on device blocks already in place; `vectors_ms` is what putting them there took.
  SolveResult run_on_device(const DeviceBlock& B, DeviceBlock& X, double vectors_ms) {
    if (options.iteration.vector_ops == VectorOps::thrust && options.solver != SolverKind::cg)
      throw UsageError("the Thrust vector operations are the reference path of cg only");
    SolveResult r;
    if (options.profile_solves) CHECK_CUDA(cudaProfilerStart());
    {
      NvtxRange range("solve");
      // auto may have chosen none: its report stays, the solvers get no preconditioner
      const PreconditionerOp* m = precond && precond->report().kind != Preconditioner::none ? precond.get() : nullptr;
      if (iteration32) {  // the iteration's products on the FP32 copy, the true residual on op
        const MixedPrecisionOperator mixed(*op, *iteration32, op32_exact);
        r = ::spcg::solve(options.solver, mixed, m, B, X, iteration_options());
        if (!op32_exact) finish_stalled_columns_in_fp64(m, B, X, r);
      } else {
        r = ::spcg::solve(options.solver, *op, m, B, X, iteration_options());
      }
    }
    if (options.profile_solves) CHECK_CUDA(cudaProfilerStop());
    r.vectors_ms = vectors_ms;
    return r;
  }

  // Mixed precision's fallback: FP32 values (rounded: not A's own) that stalled above the tolerance -- a column
  // stagnated or broke down, restarts from its true residual making no progress (the rounded copy's smallest
  // eigenvalues too far from A's: kappa x 2^-24 near 1 or more) -- go on from where they stopped with A's FP64
  // values, those columns alone, within what is left of the iteration limit (none left: they stay as they ended);
  // the result says so (fallback_columns, fallback_reason) and counts both parts' iterations, time and kernels.
  // (A breakdown of A's own meets A again, and stays one.)
  void finish_stalled_columns_in_fp64(const PreconditionerOp* m, const DeviceBlock& B, DeviceBlock& X, SolveResult& r) {
    std::vector<int> stalled;
    int most_used = 0;
    double worst = 0;
    for (size_t j = 0; j < r.columns.size(); ++j) {
      const ColumnResult& c = r.columns[j];
      if (c.status != ColumnStatus::stagnated && c.status != ColumnStatus::breakdown) continue;
      stalled.push_back(static_cast<int>(j));
      most_used = std::max(most_used, c.iterations);
      worst = std::max(worst, c.b_norm > 0 ? c.true_residual / c.b_norm : c.true_residual);
    }
    SolveOptions o = iteration_options();
    o.stop.max_iterations -= most_used;
    if (stalled.empty() || o.stop.max_iterations < 1) return;
    // the stalled columns gathered (a stalled iterate farther from x than 0 is -- a restart that multiplied its
    // error -- starts from 0 instead), solved, and put back
    const int n = X.rows, k = X.cols, s_cols = static_cast<int>(stalled.size());
    DeviceBlock Bs(n, s_cols, "fp64 fallback B"), Xs(n, s_cols, "fp64 fallback X");
    auto column_copy = [n](double* to, int to_cols, int to_col, const double* from, int from_cols, int from_col) {
      if (n > 0)
        CHECK_CUDA(cudaMemcpy2DAsync(to + to_col, sizeof(double) * to_cols, from + from_col, sizeof(double) * from_cols,
                                     sizeof(double), static_cast<size_t>(n), cudaMemcpyDeviceToDevice, 0));
    };
    for (int c = 0; c < s_cols; ++c) {
      const ColumnResult& was = r.columns[static_cast<size_t>(stalled[c])];
      column_copy(Bs.data(), s_cols, c, B.data(), k, stalled[c]);
      if (was.true_residual < was.b_norm) column_copy(Xs.data(), s_cols, c, X.data(), k, stalled[c]);
      else if (n > 0) CHECK_CUDA(cudaMemset2DAsync(Xs.data() + c, sizeof(double) * s_cols, 0, sizeof(double), n, 0));
    }
    CHECK_CUDA(cudaStreamSynchronize(0));  // (before the solver's own stream reads them)
    const SolveResult fp64 = ::spcg::solve(options.solver, *op, m, Bs, Xs, o);
    for (int c = 0; c < s_cols; ++c) column_copy(X.data(), k, stalled[c], Xs.data(), s_cols, c);
    CHECK_CUDA(cudaStreamSynchronize(0));
    for (int c = 0; c < s_cols; ++c) {
      ColumnResult& was = r.columns[static_cast<size_t>(stalled[c])];
      const int before = was.iterations;
      was = fp64.columns[static_cast<size_t>(c)];
      was.iterations += before;
    }
    char why[200];
    std::snprintf(why, sizeof why,
                  "the FP32 copy of A stalled at ||b-Ax||/||b|| = %.3g, above the tolerance %.3g; finished with A's "
                  "FP64 values", worst, o.stop.rtol);
    r.fallback_reason = r.fallback_columns > 0 ? r.fallback_reason + "; then " + why : std::string(why);
    r.fallback_columns += s_cols;
    r.solve_ms += fp64.solve_ms, r.timing_overhead_ms += fp64.timing_overhead_ms;
    r.operator_applies += fp64.operator_applies, r.operator_columns += fp64.operator_columns;
    r.residual_replacements += fp64.residual_replacements;
    for (const KernelStat& add : fp64.kernels) {  // (by name: the same kernels' calls and time together)
      auto same = std::find_if(r.kernels.begin(), r.kernels.end(), [&](const KernelStat& k) { return k.name == add.name; });
      if (same == r.kernels.end()) {
        r.kernels.push_back(add);
        continue;
      }
      same->calls += add.calls, same->total_ms += add.total_ms, same->total_bytes += add.total_bytes;
      same->bytes_per_call = same->calls > 0 ? same->total_bytes / same->calls : 0;
    }
  }

  // Eigen's CG on the host, each column's verdict by the Monitor's rule on Eigen's own residual.
  SolveResult run_on_host(const DenseBlock& b, DenseBlock& x, const DenseBlock* x0) {
    const StopRule& rule = options.iteration.stop;
    const auto t0 = std::chrono::steady_clock::now();
    HostSolveResult h = eigen_cg(*host, b, rule.rtol, rule.max_iterations, host_jacobi, x0, rule.atol);
    SolveResult r;
    r.solver = "eigen-cg";
    r.solve_ms = ms_since(t0);
    std::vector<double> b_norms(static_cast<size_t>(b.cols), 0.0);
    for (int j = 0; j < b.cols; ++j) {
      long double s = 0;
      for (int32_t i = 0; i < b.rows; ++i) s += static_cast<long double>(b.at(i, j)) * b.at(i, j);
      b_norms[j] = static_cast<double>(std::sqrt(s));
    }
    Monitor mon(rule, b_norms);
    const std::vector<double> rel = relative_residuals(*host, h.x, b);
    for (int j = 0; j < b.cols; ++j) {
      const double scale = b_norms[j] > 0 ? b_norms[j] : 1.0;
      const double recursive = h.relative_error[j] * scale;
      if (!mon.observe(j, h.iterations[j], recursive)) mon.finish(j, ColumnStatus::max_iterations, h.iterations[j]);
      r.columns.push_back({mon.status(j), mon.iterations(j), b_norms[j], recursive, rel[j] * scale});
    }
    x = std::move(h.x);
    return r;
  }
};

Solver::Solver(CsrMatrix a, const SolverOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  check_recurrence(options);
  s.options = options;
  s.host = std::make_unique<CsrMatrix>(std::move(a));
  s.global_rows = s.host->rows;
  std::string why;
  const bool gpu = options.backend == Backend::gpu ||
                   (options.backend == Backend::automatic && cuda_device_available(&why));
  if (options.backend == Backend::gpu && !cuda_device_available(&why)) throw CudaError("GPU backend: " + why);
  s.backend = gpu ? Backend::gpu : Backend::host;
  if (gpu) {
    s.setup = std::make_unique<MatrixSetup>(*s.host, options.duplicates_summed);
    s.set_up_on_device(nullptr);
  } else {
    s.set_up_on_host();
  }
}

Solver::Solver(const DeviceCsrRef& a, const SolverOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  check_recurrence(options);
  s.options = options;
  if (options.backend == Backend::host) throw UsageError("a matrix on the device needs the GPU backend");
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("a matrix on the device needs a GPU: " + why);
  if (a.rows < 0 || a.cols < 0 || a.nnz < 0 || (a.rows > 0 && !a.row_ptr) || (a.nnz > 0 && (!a.col_idx || !a.values)))
    throw UsageError("DeviceCsrRef: negative sizes or missing arrays");
  s.backend = Backend::gpu;
  s.global_rows = a.rows;
  const auto t0 = std::chrono::steady_clock::now();
  auto d = std::make_shared<DeviceCsr>();
  d->rows = a.rows, d->cols = a.cols, d->nnz = a.nnz;
  d->row_ptr = DeviceArray<int32_t>(static_cast<size_t>(a.rows) + 1, "CSR row pointers");
  d->col_idx = DeviceArray<int32_t>(static_cast<size_t>(a.nnz), "CSR column indices");
  d->values = DeviceArray<double>(static_cast<size_t>(a.nnz), "CSR values");
  if (a.row_ptr) CHECK_CUDA(cudaMemcpy(d->row_ptr.data(), a.row_ptr, d->row_ptr.bytes(), cudaMemcpyDeviceToDevice));
  else d->row_ptr.zero();
  if (a.nnz > 0) {
    CHECK_CUDA(cudaMemcpy(d->col_idx.data(), a.col_idx, d->col_idx.bytes(), cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(d->values.data(), a.values, d->values.bytes(), cudaMemcpyDeviceToDevice));
  }
  CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));  // device copies may still run on return (DeviceArray::upload)
  const double copy_ms = ms_since(t0);
  s.setup = std::make_unique<MatrixSetup>(std::shared_ptr<const DeviceCsr>(std::move(d)), options.duplicates_summed);
  s.set_up_on_device(nullptr);
  s.phases.front().ms += copy_ms;  // "upload": the device-to-device copy
}

Solver::Solver(RankBlocks share, GlobalIndex global_rows, Communicator& comm, const SolverOptions& options)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  check_recurrence(options);
  if (const std::string why = several_gpus_refusal(options); !why.empty()) throw UsageError(why);
  if (share.row_begin < 0 || share.row_end < share.row_begin || share.row_end > global_rows)
    throw UsageError("rank " + std::to_string(comm.rank()) + "'s rows " + std::to_string(share.row_begin) + ".." +
                     std::to_string(share.row_end) + " do not lie in the system's " + std::to_string(global_rows));
  // A rank without rows is refused before any collective: a 3-rank solve with an empty middle rank (in-process
  // ranks on an H100, 2026-11-26) waited until the group's timeout instead of solving; not yet diagnosed
  if (share.row_end == share.row_begin)
    throw UsageError("rank " + std::to_string(comm.rank()) + " holds none of the system's " + std::to_string(global_rows) +
                     " rows (more ranks than the partition gives rows to): run on fewer GPUs");
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("a rank needs a GPU: " + why);
  s.options = options;
  s.backend = Backend::gpu;
  s.comm = &comm;
  s.row_begin = share.row_begin, s.global_rows = global_rows;
  s.set_up_on_device(&share);
}

Solver::~Solver() {
  if (!impl_) return;  // moved from
  impl_.reset();
  release_idle_device_memory();  // the setup's memory back to the driver, not kept in our pool for nobody
}
Solver::Solver(Solver&&) noexcept = default;
Solver& Solver::operator=(Solver&&) noexcept = default;

int32_t Solver::rows() const {
  const Impl& s = *impl_;
  return s.rank_op ? s.rank_op->local_rows() : s.setup ? s.setup->rows() : s.host->rows;
}
GlobalIndex Solver::row_begin() const { return impl_->row_begin; }
GlobalIndex Solver::global_rows() const { return impl_->global_rows; }
int Solver::ranks() const { return impl_->comm ? impl_->comm->size() : 1; }
int64_t Solver::halo_entries() const { return impl_->rank_op ? impl_->rank_op->halo_entries() : 0; }
int64_t Solver::send_entries() const { return impl_->rank_op ? impl_->rank_op->send_entries() : 0; }
int64_t Solver::device_memory_in_use() const {
  if (impl_->backend != Backend::gpu) return 0;
  const DeviceMemoryInfo m = device_memory_info();
  return static_cast<int64_t>(m.total_bytes - m.free_bytes);
}
Backend Solver::backend() const { return impl_->backend; }
const SolverOptions& Solver::options() const { return impl_->options; }

void Solver::set_stop_rule(const StopRule& rule) {
  if (!(rule.rtol >= 0 && std::isfinite(rule.rtol)) || !(rule.atol >= 0 && std::isfinite(rule.atol)))
    throw UsageError("the stop rule's rtol and atol must be finite and >= 0");
  if (rule.max_iterations < 0) throw UsageError("the stop rule's iteration limit must be >= 0");
  impl_->options.iteration.stop = rule;
}
const MatrixStats& Solver::stats() const {
  const Impl& s = *impl_;
  return s.rank_op ? s.rank_op->local_setup().stats() : s.setup ? s.setup->stats() : s.host_stats;
}
std::string Solver::kernel(int k) const {
  if (!impl_->op) return "eigen";
  const std::string chosen = impl_->op->chosen(k);
  return impl_->op->name() == "auto" ? "auto -> " + chosen : chosen;
}
Precision Solver::precision() const { return impl_->precision; }
const std::string& Solver::precision_reason() const { return impl_->precision_reason; }
const std::string& Solver::kernel_reason() const {
  static const std::string none;
  return impl_->op ? impl_->op->setup_info().reason : none;
}
const std::vector<Phase>& Solver::setup_phases() const { return impl_->phases; }
const PreconditionerReport* Solver::preconditioner() const {
  return impl_->precond ? &impl_->precond->report() : nullptr;
}
const CsrMatrix& Solver::matrix() const {
  if (impl_->rank_op) throw UsageError("a rank's Solver holds its share of the matrix only");
  return impl_->host ? *impl_->host : impl_->setup->host();
}

void Solver::update_values(CsrMatrix a) {
  Impl& s = *impl_;
  s.refuse_update_on_ranks();
  const auto t0 = std::chrono::steady_clock::now();
  const CsrMatrix& kept = s.pattern();
  if (s.backend == Backend::host) {
    refuse_pattern(pattern_difference(kept, a), s.options.matrix_name);
    return s.update_on_host(std::make_unique<CsrMatrix>(std::move(a)), t0, ms_since(t0));
  }
  // The pattern is checked on the host's cores while the values go up (poisson3d:200: 7 ms and 13 ms): the
  // upload changes nothing the solver holds, and a refusal lets it go. The sizes first: the upload reads them.
  refuse_pattern(size_difference(a.rows, a.cols, a.nnz(), kept.rows, kept.cols, kept.nnz()), s.options.matrix_name);
  if (a.values.size() != kept.values.size()) refuse_pattern(pattern_difference(kept, a), s.options.matrix_name);
  auto host = std::make_unique<CsrMatrix>(std::move(a));  // (its arrays move, not copied; outlives the locks below)
  std::future<std::string> difference = std::async(std::launch::async, [&] { return pattern_difference(kept, *host); });
  std::unique_ptr<PinnedUploader> locks;
  std::shared_ptr<const DeviceCsr> d = s.pattern_with_values(host->values.data(), false, &locks);
  const double copy_ms = ms_since(t0);
  refuse_pattern(difference.get(), s.options.matrix_name);
  const double check_ms = ms_since(t0) - copy_ms;  // what the check took past the upload
  auto new_setup = std::make_unique<MatrixSetup>(*host, std::move(d), s.options.duplicates_summed);
  s.update_on_device(std::move(host), std::move(new_setup), t0, check_ms, copy_ms, std::move(locks));
}

void Solver::update_values(const double* values, int64_t nnz) {
  Impl& s = *impl_;
  s.refuse_update_on_ranks();
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t kept_nnz = s.backend == Backend::host ? s.host->nnz() : s.device_pattern().nnz;
  if (nnz != kept_nnz)
    throw InputError(s.options.matrix_name, 0, "update_values: " + std::to_string(nnz) + " values, the solver's pattern has " +
                                                   std::to_string(kept_nnz) + " entries");
  if (nnz > 0 && !values) throw UsageError("update_values: missing values");
  if (s.backend == Backend::host) {
    auto a = std::make_unique<CsrMatrix>();
    const CsrMatrix& kept = *s.host;
    a->rows = kept.rows, a->cols = kept.cols;
    a->row_ptr = kept.row_ptr, a->col_idx = kept.col_idx;
    a->values.assign(values, values + nnz);
    return s.update_on_host(std::move(a), t0, 0);
  }
  // the values alone go up, beside the kept pattern; the caller's array is unlocked before the return
  std::shared_ptr<const DeviceCsr> d = s.pattern_with_values(values, false);
  const double copy_ms = ms_since(t0);
  auto new_setup = std::make_unique<MatrixSetup>(std::move(d), s.options.duplicates_summed);
  s.update_on_device(nullptr, std::move(new_setup), t0, 0, copy_ms);  // (the host copy goes with the old setup)
}

void Solver::update_values(const DeviceValuesRef& v) {
  Impl& s = *impl_;
  if (s.backend == Backend::host) throw UsageError("update_values: values on the device need the GPU backend");
  s.refuse_update_on_ranks();
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t kept_nnz = s.device_pattern().nnz;
  if (v.nnz != kept_nnz)
    throw InputError(s.options.matrix_name, 0, "update_values: " + std::to_string(v.nnz) +
                                                   " values, the solver's pattern has " + std::to_string(kept_nnz) + " entries");
  if (v.nnz > 0 && !v.values) throw UsageError("DeviceValuesRef: missing values");
  std::shared_ptr<const DeviceCsr> d = s.pattern_with_values(v.values, true);
  const double copy_ms = ms_since(t0);
  auto new_setup = std::make_unique<MatrixSetup>(std::move(d), s.options.duplicates_summed);
  s.update_on_device(nullptr, std::move(new_setup), t0, 0, copy_ms);  // the host copy of old values goes with the old setup
}

void Solver::update_values(const DeviceCsrRef& a) {
  Impl& s = *impl_;
  if (s.backend == Backend::host) throw UsageError("update_values: a matrix on the device needs the GPU backend");
  s.refuse_update_on_ranks();
  if (a.rows < 0 || a.cols < 0 || a.nnz < 0 || (a.rows > 0 && !a.row_ptr) || (a.nnz > 0 && (!a.col_idx || !a.values)))
    throw UsageError("DeviceCsrRef: negative sizes or missing arrays");
  const auto t0 = std::chrono::steady_clock::now();
  refuse_pattern(device_pattern_difference(s.device_pattern(), a), s.options.matrix_name);
  const double check_ms = ms_since(t0);
  std::shared_ptr<const DeviceCsr> d = s.pattern_with_values(a.values, true);
  const double copy_ms = ms_since(t0) - check_ms;
  auto new_setup = std::make_unique<MatrixSetup>(std::move(d), s.options.duplicates_summed);
  s.update_on_device(nullptr, std::move(new_setup), t0, check_ms, copy_ms);
}

const std::vector<Phase>& Solver::update_phases() const { return impl_->update_phases; }
int Solver::updates() const { return impl_->updates; }

SolveResult Solver::solve(const DenseBlock& b, DenseBlock& x) {
  Impl& s = *impl_;
  const int32_t n = rows();
  require_shape("B", b.rows, b.cols, n, b.cols);
  require_shape("X", x.rows, x.cols, n, b.cols);
  if (s.backend == Backend::host) {
    const DenseBlock x0 = x;
    return s.run_on_host(b, x, &x0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock B(n, b.cols, "right-hand sides"), X(n, b.cols, "solution");
  B.values.upload(b.data);
  X.values.upload(x.data);
  SolveResult r = s.run_on_device(B, X, ms_since(t0));
  x.data = X.values.download<HostVector<double>>();
  return r;
}

SolveResult Solver::solve(const DeviceBlockRef& b, const DeviceBlockRef& x) {
  Impl& s = *impl_;
  if (s.backend == Backend::host) throw UsageError("blocks on the device need the GPU backend");
  const int32_t n = rows();
  require_shape("B", b.rows, b.cols, n, b.cols);
  require_shape("X", x.rows, x.cols, n, b.cols);
  if (int64_t{n} * b.cols > 0 && (!b.data || !x.data)) throw UsageError("DeviceBlockRef: missing data");
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock B(n, b.cols, "right-hand sides"), X(n, b.cols, "solution");
  const size_t bytes = B.values.bytes();
  if (bytes) {
    CHECK_CUDA(cudaMemcpy(B.data(), b.data, bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaMemcpy(X.data(), x.data, bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));  // complete before the solver's own stream reads them
  }
  SolveResult r = s.run_on_device(B, X, ms_since(t0));
  if (bytes) {
    CHECK_CUDA(cudaMemcpy(x.data, X.data(), bytes, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));  // x is the caller's when solve returns
  }
  return r;
}

SolveResult Solver::solve(RhsKind kind, int k, uint64_t seed, DenseBlock& x, const DenseBlock* x0) {
  Impl& s = *impl_;
  const int32_t n = rows();
  if (k < 1) throw UsageError("the number of right-hand sides must be >= 1, got " + std::to_string(k));
  if (x0) require_shape("the initial guess", x0->rows, x0->cols, n, k);
  if (s.backend == Backend::host) {
    const DenseBlock b = kind == RhsKind::ones ? DenseBlock(n, k, 1.0) : random_block(n, k, seed);
    return s.run_on_host(b, x, x0);
  }
  // Made on the device: ones, or the host's random draws of these rows bit for bit.
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock B(n, k, "right-hand sides"), X(n, k, "solution");
  if (kind == RhsKind::ones) launch_fill(1.0, B.data(), B.size(), 0);
  else launch_fill_splitmix_uniform(seed, B.data(), B.size(), 0, static_cast<uint64_t>(s.row_begin) * k);
  if (x0) X.values.upload(x0->data);
  else if (X.size()) CHECK_CUDA(cudaMemsetAsync(X.data(), 0, X.values.bytes(), 0));  // +0.0 is all zero bits
  CHECK_CUDA(cudaDeviceSynchronize());
  SolveResult r = s.run_on_device(B, X, ms_since(t0));
  x = DenseBlock(n, k);
  x.data = X.values.download<HostVector<double>>();
  return r;
}

int32_t persistent_cg_max_rows() { return PersistentCgLimits::max_rows; }

ScopedRange::ScopedRange(const char* name) {
#ifdef SPCG_NVTX
  nvtxRangePushA(name);
#else
  (void)name;
#endif
}
ScopedRange::~ScopedRange() {
#ifdef SPCG_NVTX
  nvtxRangePop();
#endif
}

}  // namespace spcg
