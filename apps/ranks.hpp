#pragma once
// How the processes of a multi-GPU solve (issue #25: one process per GPU) start and find each other.
//   spcg solve --gpus N ...     the launcher: starts N copies of this program (fork + exec), one GPU each
//                               (CUDA_VISIBLE_DEVICES), hands rank 0's NCCL unique id to the others over pipes,
//                               and when one rank fails ends the others and exits with its status.
//   mpirun -n N spcg solve ...  each process finds its rank in the environment Open MPI, MPICH / Intel MPI or
//                               Slurm sets (no MPI library is linked); rank 0 writes the id to a rendezvous
//                               file the others wait for (--rendezvous, on a shared file system across hosts).
#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "spcg/distributed.hpp"

namespace spcg {

struct RankContext {
  int rank = 0, size = 1;
  int local_rank = 0;        // on this host: picks the GPU
  int local_size = 1;        // ranks on this host (the launcher's: all; MPI's where it says, else all of them):
                             // the host's threads are shared among them
  std::string started_by;    // "spcg --gpus" or the MPI / Slurm variables found
  int id_fd = -1;            // launcher: rank 0 writes the id to id_fds, the others read it from id_fd
  std::vector<int> id_fds;
};

// This process's rank when it is one of several (our launcher's variables, or mpirun's / srun's with a size
// above 1); nullopt for a plain process. A variable that is not a number, a size below 1 or a rank not below
// the size is a UsageError naming the variable or the launcher.
std::optional<RankContext> rank_context_from_environment();

// Before CUDA starts: a rank with no GPU chosen by its launcher sees only its local_rank-th GPU.
void select_gpu_of_rank(const RankContext& r);

// The GPUs this process may use, counted without starting CUDA (which initialises every visible GPU: ~0.8 s per
// GPU on a several-GPU host): the NVIDIA driver's /proc/driver/nvidia/gpus entries, or CUDA_VISIBLE_DEVICES's
// list where that is set. -1 when neither says (no driver files: the caller asks CUDA).
int gpus_visible_without_cuda();

// Before CUDA starts, a one-GPU process sees only GPU `device` (its index among the visible ones), so that CUDA
// initialises that one alone. UsageError when there is no such GPU (counted as above). asked: --device was given
// (the default, device 0, changes nothing where no GPU is visible: CUDA then says there is none).
void select_device_before_cuda(int device, bool asked);

// Every rank gets rank 0's unique id (rank 0 makes it with make_id: NCCL's, which needs a GPU; tests pass
// their own). rendezvous: the file MPI ranks meet at (empty: the default below). Throws CommunicationError
// after timeout_s.
NcclId share_unique_id(const RankContext& r, const std::string& rendezvous, double timeout_s,
                       const std::function<NcclId()>& make_id = nccl_unique_id);

// After the communicator exists (every rank has read the id): rank 0 of an MPI job removes the rendezvous file.
void end_rendezvous(const RankContext& r, const std::string& rendezvous);

// ---- the rendezvous file of MPI ranks (issue #33, item 9) ----
// Default: <TMPDIR or /tmp>/spcg-<uid>/nccl-<job id>.id, in a folder of this user's only (created 0700; one that
// is a link, another user's or open to others is refused). --rendezvous FILE: that file (a shared file system).
// Rank 0 creates the file exclusively (O_CREAT | O_EXCL | O_NOFOLLOW), owner-only (0600); it replaces a file of
// its own older than this job (a crashed job's with the same id) and refuses anything else in its place (a link,
// another user's file, a file of ours written after this job started). A reader takes only a regular file of
// ours written after this job started (mtime >= not_before), so a crashed job's file is never read as this
// job's id; it waits for the file up to the timeout. Rank 0 removes it once every rank has read it, and on
// every exit path before that (a normal exit, an exception, SIGTERM / SIGINT / SIGHUP).
using WallTime = std::chrono::system_clock::time_point;

// The rendezvous file: `given` when not empty, else the default named after the job's id in the environment
// (UsageError when there is none).
std::string rendezvous_path(const std::string& given);
// <TMPDIR or /tmp>/spcg-<uid>: the default's folder.
std::string private_rendezvous_dir();
// Creates `dir` (0700) or checks the one there: a folder, not a link, ours, closed to others (else
// CommunicationError saying which).
void make_private_dir(const std::string& dir);
// When this process started, less a margin for ranks started a little apart and file system clocks: a file
// older than this is an earlier job's.
WallTime rendezvous_not_before();
// Rank 0: writes id to `path` as above (CommunicationError when refused).
void write_rendezvous(const std::string& path, const NcclId& id, WallTime not_before);
// Another rank: waits up to timeout_s for rank 0's file at `path` and reads the id (CommunicationError on a
// refused file or the timeout; `rank` names this rank in the message).
NcclId read_rendezvous(const std::string& path, int rank, double timeout_s, WallTime not_before);
// Removes `path` (gone already is fine) and forgets it for the exit-time cleanup.
void remove_rendezvous(const std::string& path);
// Removes `path` when this process exits, or ends on SIGTERM / SIGINT / SIGHUP, before remove_rendezvous.
void remove_rendezvous_at_exit(const std::string& path);

// ---- the launcher ----
struct RankLaunch {
  std::string program = "/proc/self/exe";  // what each rank runs: this program (tests: a stand-in)
  std::vector<std::string> devices;        // rank r's CUDA_VISIBLE_DEVICES: devices[r % size] (empty: as it is)
  double grace_s = 5.0;                    // after a failure: SIGTERM to the others, SIGKILL this long after
};
struct LaunchOutcome {
  int status = 0;                 // the job's exit status
  int first_failed = -1;          // the rank whose failure ended the others (-1: none failed)
  std::vector<int> rank_status;   // each rank's: its exit code, or 128 + the signal that ended it
};
// Runs `program` as `ranks` processes (argv: "spcg" then args), each with SPCG_RANK, SPCG_RANKS,
// SPCG_LOCAL_RANK and the NCCL id's pipe (SPCG_ID_FDS for rank 0, SPCG_ID_FD for the others), and waits for
// them. The job's status: 0 when every rank exited 0; 3 when none failed but one did not converge (3 ends no
// other rank: each finishes, rank 0 prints the report); else the first failing rank's status (a signal:
// 128 + its number), after the others got SIGTERM and, grace_s later, SIGKILL, so none hangs in a collective.
LaunchOutcome run_ranks(int ranks, const std::vector<std::string>& args, const RankLaunch& how);

// spcg solve --gpus N: `args` (this program's own arguments) as `gpus` ranks of this program, one GPU each
// (UsageError when the machine shows fewer; SPCG_SHARE_GPUS=1 shares them round robin). Returns run_ranks's status.
int launch_ranks(int gpus, const std::vector<std::string>& args);

}  // namespace spcg
