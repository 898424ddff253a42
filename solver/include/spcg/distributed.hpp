#pragma once
// spcg on several GPUs (issue #25; ../shared/design.md, "Several GPUs"): one process per GPU, contiguous row
// blocks, NCCL for the halo exchange and the sums. No CUDA or NCCL headers here.
//
//   spcg::NcclId id = rank == 0 ? spcg::nccl_unique_id() : /* rank 0's, passed by MPI, a pipe, a file */;
//   auto comm = spcg::make_nccl_communicator(rank, ranks, id);      // one GPU per process: the current device
//   spcg::RowPartition p = spcg::partition_evenly(n, ranks);         // or partition_by_work(a, ranks)
//   spcg::CsrMatrix rows = spcg::generate_rows("poisson3d:300", p.begin(rank), p.end(rank));
//   spcg::RankSolver solver(spcg::rank_blocks_from_rows(rows, p, rank), n, *comm, options);
//   spcg::SolveResult r = solver.solve(spcg::RhsKind::ones, 1, 0, x_rows);   // every rank together
//
// A RankSolver holds this rank's rows of A (local block on the registry's auto kernel, halo block applied
// after the exchange, which overlaps the local product) and runs cg, multi-cg or block-cg with no
// preconditioner or Jacobi; the solvers sum their dot products over the ranks in rank order. Every rank
// calls every method together, with the same options.
//
// Determinism: each rank's block sums are fixed-order and the sums over ranks are taken in rank order, so a
// solve repeats bit for bit for the same rank count and partition (and one rank gives the one-GPU multi-cg's
// bits). Across rank counts the iterates agree to rounding: each rank's partial sums group the rows apart.
#include <memory>
#include <string>
#include <vector>

#include "spcg/communication_stats.hpp"
#include "spcg/partition.hpp"
#include "spcg/spcg.hpp"

namespace spcg {

class Communicator;  // kernels/communicator.hpp: sums and transfers of device buffers between the ranks

// NCCL's unique id (ncclUniqueId's bytes): rank 0 makes it, every other rank gets a copy before
// make_nccl_communicator.
struct NcclId {
  char bytes[128] = {};
};
NcclId nccl_unique_id();
// Owns a communicator whose type this header does not show.
struct CommunicatorDeleter {
  void operator()(Communicator* c) const;
};
using CommunicatorPtr = std::unique_ptr<Communicator, CommunicatorDeleter>;
// This process's rank of `size`, on the current CUDA device; NCCL is loaded on first use (CommunicationError
// when it cannot be).
CommunicatorPtr make_nccl_communicator(int rank, int size, const NcclId& id);
// What the communicator's calls cost so far (waits for timed calls).
CommunicationStats communication_stats(const Communicator& comm);
// values <- their sum over the ranks, in rank order (every rank calls it with as many values): how a caller
// gathers per-rank figures or a vector's rows on host memory (through the device, one sum).
void sum_over_ranks(Communicator& comm, std::vector<double>& values);

class RankSolver {
 public:
  // blocks: this rank's share (partition.hpp); global_rows: the whole system's. The options are the one-GPU
  // solver's; kernel must be auto, precond none or jacobi (UsageError otherwise). Checks this rank's rows
  // on the device (finite values; unless check_matrix is off, a symmetric diagonal block and a positive
  // diagonal) and throws InputError naming the global row: a caller ends the other ranks (the launcher of
  // spcg solve --gpus does).
  // The blocks are taken over (a rank's share of a large system is not copied).
  RankSolver(RankBlocks blocks, int32_t global_rows, Communicator& comm, const SolverOptions& options);
  ~RankSolver();
  RankSolver(RankSolver&&) noexcept;
  RankSolver& operator=(RankSolver&&) noexcept;

  int32_t rows() const;  // this rank's
  int32_t row_begin() const;
  int32_t global_rows() const;
  int64_t halo_entries() const;  // x entries this rank receives per column and apply
  int64_t send_entries() const;  // x entries it sends
  std::string kernel(int k) const;  // the local block's kernel at width k (auto's choice)
  const std::string& kernel_reason() const;
  const std::vector<Phase>& setup_phases() const;
  // GPU memory in use on this rank's device now (the whole process: context, NCCL's buffers, pool), bytes.
  int64_t device_memory_in_use() const;

  // b and x: this rank's rows (rows() x k). x holds the initial guess on entry and the solution on exit.
  SolveResult solve(const DenseBlock& b, DenseBlock& x);
  // B made on the device: all ones, or this rank's rows of the random block make_rhs gives for the whole
  // system (the same bits as one GPU's). x0: initial guess (null: zero).
  SolveResult solve(RhsKind kind, int k, uint64_t seed, DenseBlock& x, const DenseBlock* x0 = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spcg
