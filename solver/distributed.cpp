#include "spcg/distributed.hpp"

#include "kernels/communicator.hpp"
#include "kernels/distributed_operator.hpp"

#include <chrono>
#include <cmath>
#include <cstring>

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/nvtx.hpp"
#include "solver/preconditioner.hpp"
#include "solver/setup_rules.hpp"
#include "solver/solver.hpp"
#include "sparse/timing.hpp"

namespace spcg {
namespace {

// This rank's rows, checked on the device (the local block's statistics) and, for the few halo entries, on the
// host: finite values; unless check_matrix is off, a symmetric diagonal block (a principal block of a
// symmetric A is symmetric) and a positive diagonal (a_ii = e_i' A e_i > 0 for SPD A). Rows are named globally.
void check_rank_rows(const DistributedOperator& op, const SolverOptions& o) {
  const RankBlocks& b = op.blocks();
  const std::string rows = "rows " + std::to_string(b.row_begin + 1) + ".." + std::to_string(b.row_end);
  for (int32_t i = 0; i < b.halo.rows; ++i)
    for (int32_t q = b.halo.row_ptr[i]; q < b.halo.row_ptr[i + 1]; ++q)
      if (!std::isfinite(b.halo.values[q]))
        throw InputError(o.matrix_name, 0, "row " + std::to_string(b.row_begin + i + 1) + " holds a NaN or Inf entry");
  check_matrix(op.local_setup().stats(), o, b.row_begin, "the diagonal block of " + rows);
}

}  // namespace

struct RankSolver::Impl {
  SolverOptions options;
  Communicator& comm;
  int32_t rows, global_rows, row_begin;
  std::unique_ptr<DistributedOperator> op;
  std::unique_ptr<PreconditionerOp> jacobi;
  std::vector<Phase> phases;

  Impl(const RankBlocks& blocks, int32_t global, Communicator& c, const SolverOptions& o)
      : options(o), comm(c), rows(blocks.row_end - blocks.row_begin), global_rows(global), row_begin(blocks.row_begin) {}

  SolveResult solve_device(DeviceBlock& B, DeviceBlock& X) {
    NvtxRange range("solve");
    return spcg::solve(options.solver, *op, jacobi.get(), B, X, options.iteration);
  }
};

RankSolver::RankSolver(RankBlocks blocks, int32_t global_rows, Communicator& comm, const SolverOptions& options)
    : impl_(std::make_unique<Impl>(blocks, global_rows, comm, options)) {
  Impl& s = *impl_;
  if (const std::string why = several_gpus_refusal(options); !why.empty()) throw UsageError(why);
  const auto t0 = std::chrono::steady_clock::now();
  NvtxRange range("setup");
  const OperatorOptions oo = operator_options(options);
  s.op = std::make_unique<DistributedOperator>(std::move(blocks), comm, oo);  // uploads, statistics, kernel
  const double op_ms = ms_since(t0);
  check_rank_rows(*s.op, options);
  const auto t_pc = std::chrono::steady_clock::now();
  if (options.precond == Preconditioner::jacobi) {
    PreconditionerInputs in{s.op->local_setup(), s.op->local_operator(), oo, options.matrix_name, oo.expected_k,
                            options.iteration.stop.rtol};
    s.jacobi = make_preconditioner(Preconditioner::jacobi, options.precond_options, in);
  }
  const double pc_ms = ms_since(t_pc);
  const bool timed = times_each_kernel(options, global_rows);
  s.options.iteration.time_kernels = timed;
  comm.set_timing(timed);
  s.phases = {{"operator (local + halo)", op_ms}, {"preconditioner", pc_ms}, {std::string(kSetupTotalPhase), ms_since(t0)}};
}

RankSolver::~RankSolver() = default;
RankSolver::RankSolver(RankSolver&&) noexcept = default;
RankSolver& RankSolver::operator=(RankSolver&&) noexcept = default;

int32_t RankSolver::rows() const { return impl_->rows; }
int32_t RankSolver::row_begin() const { return impl_->row_begin; }
int32_t RankSolver::global_rows() const { return impl_->global_rows; }
int64_t RankSolver::halo_entries() const { return impl_->op->halo_entries(); }
int64_t RankSolver::send_entries() const { return impl_->op->send_entries(); }
std::string RankSolver::kernel(int k) const { return impl_->op->chosen(k); }
const std::string& RankSolver::kernel_reason() const { return impl_->op->local_operator().setup_info().reason; }
const std::vector<Phase>& RankSolver::setup_phases() const { return impl_->phases; }
int64_t RankSolver::device_memory_in_use() const {
  const DeviceMemoryInfo m = device_memory_info();
  return static_cast<int64_t>(m.total_bytes - m.free_bytes);
}

SolveResult RankSolver::solve(const DenseBlock& b, DenseBlock& x) {
  Impl& s = *impl_;
  if (b.rows != s.rows || x.rows != s.rows || b.cols != x.cols)
    throw UsageError("rank solve: b is " + std::to_string(b.rows) + " x " + std::to_string(b.cols) + ", x " +
                     std::to_string(x.rows) + " x " + std::to_string(x.cols) + "; this rank holds " +
                     std::to_string(s.rows) + " rows");
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock B(s.rows, b.cols, "rank B"), X(s.rows, b.cols, "rank X");
  B.values.upload(b.data);
  X.values.upload(x.data);
  const double vectors_ms = ms_since(t0);
  SolveResult r = s.solve_device(B, X);
  r.vectors_ms = vectors_ms;
  x.data = X.values.download<HostVector<double>>();
  return r;
}

SolveResult RankSolver::solve(RhsKind kind, int k, uint64_t seed, DenseBlock& x, const DenseBlock* x0) {
  Impl& s = *impl_;
  if (k < 1) throw UsageError("rank solve: k must be >= 1");
  const auto t0 = std::chrono::steady_clock::now();
  DeviceBlock B(s.rows, k, "rank B");
  if (kind == RhsKind::ones) launch_fill(1.0, B.data(), B.size(), 0);
  else launch_fill_splitmix_uniform(seed, B.data(), B.size(), 0, static_cast<uint64_t>(s.row_begin) * k);
  DeviceBlock X(s.rows, k, "rank X");
  if (x0) {
    if (x0->rows != s.rows || x0->cols != k) throw UsageError("rank solve: the initial guess is not rows() x k");
    X.values.upload(x0->data);
  } else {
    launch_fill(0.0, X.data(), X.size(), 0);
  }
  CHECK_CUDA(cudaStreamSynchronize(0));
  const double vectors_ms = ms_since(t0);
  SolveResult r = s.solve_device(B, X);
  r.vectors_ms = vectors_ms;
  x = DenseBlock(s.rows, k);
  x.data = X.values.download<HostVector<double>>();
  return r;
}

NcclId nccl_unique_id() {
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NcclId holds ncclUniqueId's bytes");
  const ncclUniqueId id = NcclCommunicator::unique_id();
  NcclId out;
  std::memcpy(out.bytes, &id, sizeof id);
  return out;
}

void CommunicatorDeleter::operator()(Communicator* c) const { delete c; }

CommunicatorPtr make_nccl_communicator(int rank, int size, const NcclId& id) {
  ncclUniqueId nid;
  std::memcpy(&nid, id.bytes, sizeof nid);
  return CommunicatorPtr(new NcclCommunicator(rank, size, nid));
}

CommunicationStats communication_stats(const Communicator& comm) { return comm.stats(); }

void sum_over_ranks(Communicator& comm, std::vector<double>& values) {
  DeviceArray<double> d(values, "values summed over ranks");
  comm.allreduce_sum(d.data(), values.size(), 0);
  comm.wait(0);
  values = d.download();
}

}  // namespace spcg
