#pragma once
// How the processes of a multi-GPU solve (issue #25: one process per GPU) start and find each other.
//   spcg solve --gpus N ...     the launcher: starts N copies of this program (fork + exec), one GPU each
//                               (CUDA_VISIBLE_DEVICES), hands rank 0's NCCL unique id to the others over pipes,
//                               and when one rank fails ends the others and exits with its status.
//   mpirun -n N spcg solve ...  each process finds its rank in the environment Open MPI, MPICH / Intel MPI or
//                               Slurm sets (no MPI library is linked); rank 0 writes the id to a rendezvous
//                               file the others wait for (--rendezvous, on a shared file system across hosts).
#include <optional>
#include <string>
#include <vector>

#include "spcg/distributed.hpp"

namespace spcg {

struct RankContext {
  int rank = 0, size = 1;
  int local_rank = 0;        // on this host: picks the GPU
  std::string started_by;    // "spcg --gpus" or the MPI / Slurm variables found
  int id_fd = -1;            // launcher: rank 0 writes the id to id_fds, the others read it from id_fd
  std::vector<int> id_fds;
};

// This process's rank when it is one of several (our launcher's variables, or mpirun's / srun's with a size
// above 1); nullopt for a plain process.
std::optional<RankContext> rank_context_from_environment();

// Before CUDA starts: a rank with no GPU chosen by its launcher sees only its local_rank-th GPU.
void select_gpu_of_rank(const RankContext& r);

// Every rank gets rank 0's unique id (rank 0 makes it). rendezvous: the file MPI ranks meet at (empty: one in
// /tmp named after the job). Throws CommunicationError after timeout_s.
NcclId share_unique_id(const RankContext& r, const std::string& rendezvous, double timeout_s);

// After the communicator exists (every rank has read the id): rank 0 of an MPI job removes the rendezvous file.
void end_rendezvous(const RankContext& r, const std::string& rendezvous);

// The launcher: runs `argv` (this program's own arguments) as `gpus` ranks and waits for them. Returns the
// exit status for the whole job: 0 when every rank exited 0; else the first failing rank's status, after the
// others were ended (SIGTERM, then SIGKILL after a grace period) so none hangs in a collective.
int launch_ranks(int gpus, const std::vector<std::string>& argv);

}  // namespace spcg
