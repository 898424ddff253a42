#pragma once
// spcg on several GPUs (issue #25; ../shared/design.md, "Several GPUs"): one process per GPU, contiguous row
// blocks, NCCL for the halo exchange and the sums. No CUDA or NCCL headers here.
//
//   spcg::NcclId id = rank == 0 ? spcg::nccl_unique_id() : /* rank 0's, passed by MPI, a pipe, a file */;
//   auto comm = spcg::make_nccl_communicator(rank, ranks, id);      // one GPU per process: the current device
//   spcg::RankBlocks share = spcg::generated_share("poisson3d:300", ranks, rank);  // or rank_share(a, ranks, rank)
//   spcg::Solver solver(std::move(share), n, *comm, options);
//   spcg::SolveResult r = solver.solve(spcg::RhsKind::ones, 1, 0, x_rows);   // every rank together
//
// A rank's Solver (spcg.hpp) holds this rank's rows of A (local block on the registry's auto kernel, halo block
// applied after the exchange, which overlaps the local product) and runs cg, multi-cg or block-cg with what
// runs on several GPUs (solve_types.hpp's capabilities); the iteration engine sums the dot products over the
// ranks in rank order. Every rank calls every method together, with the same options.
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
// Sets NCCL's start defaults for spcg's traffic in the environment (2 channels, no cuMem import; a value already
// set is kept): the connections take ~90 ms instead of ~1 s on 4 GPUs. nccl_unique_id and make_nccl_communicator
// call it on first use; setenv is not thread-safe, so a program that starts threads first (CUDA's start on a
// thread of its own) calls it before them.
void nccl_start_defaults();
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
// One sum over the ranks of a step's largest count of values, on zeros: NCCL connects a collective's channels on
// its first call, so a rank with time to spare (still reading or generating) connects them here rather than in
// its setup or first solve. Every rank calls it. (The halo's connections need the partition: a rank's Solver
// makes them in its setup's connect phase.)
void connect_sums(Communicator& comm);
// values <- their sum over the ranks, in rank order (every rank calls it with as many values): how a caller
// gathers per-rank figures or a vector's rows on host memory (through the device, one sum).
void sum_over_ranks(Communicator& comm, std::vector<double>& values);

// A Matrix Market file parsed once across the ranks, not once per rank: each rank reads one byte share of its
// data lines, cut at line ends (read_matrix_market with ReadOptions::part = {rank, ranks}: no communication, so it
// overlaps NCCL's start), then every rank calls file_share together, which checks the entry count over the parts
// (exactly one rank names a wrong one, as the whole read names it; the others end with CommunicationError),
// partitions as partition_by_work does the whole matrix, sends each rank its rows and merges each row's entries
// in file order (duplicates summed), and builds the halo plan (a rank sends what its peers receive, for any
// pattern). The share is the one rank_share cuts from the whole file, but for duplicates split between parts,
// which are summed in another grouping.
struct FileShare {
  RankBlocks share;
  GlobalIndex global_rows = 0;
  MatrixMarketInfo info;     // the header's, with the whole file's duplicates and explicit zeros
  double exchange_ms = 0;    // the counts, the partition and the rows' exchange, from the parts read
  std::vector<Phase> steps;  // exchange_ms by step
};
FileShare file_share(MatrixFile part, const std::string& path, const ReadOptions& options, Communicator& comm);

// Today's name of a rank's Solver (spcg.hpp): Solver(share, global_rows, comm, options).
using RankSolver = Solver;

}  // namespace spcg
