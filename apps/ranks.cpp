#include "ranks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include "cuda_start.hpp"
#include "error.hpp"
#include "spcg/distributed.hpp"

namespace spcg {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < 0 || x > 1 << 20) throw UsageError(std::string("environment variable ") + name + "='" + v + "' is not a rank number");
  return static_cast<int>(x);
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = s.find(c, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Reads exactly n bytes from fd, waiting at most until `deadline`.
void read_exactly(int fd, void* out, size_t n, std::chrono::steady_clock::time_point deadline, int rank) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
    if (left_ms <= 0) throw CommunicationError("rank " + std::to_string(rank) + ": rank 0 sent no NCCL id in time");
    pollfd pfd{fd, POLLIN, 0};
    const int ready = poll(&pfd, 1, static_cast<int>(std::min(left_ms, 1000.0)) + 1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    const ssize_t got = read(fd, p, n);
    if (got == 0) throw CommunicationError("rank " + std::to_string(rank) + ": rank 0 ended before sending the NCCL id");
    if (got < 0) {
      if (errno == EINTR) continue;
      throw CommunicationError("rank " + std::to_string(rank) + ": reading the NCCL id: " + std::strerror(errno));
    }
    p += got, n -= static_cast<size_t>(got);
  }
}

// The rendezvous file of an MPI job: --rendezvous, or /tmp named after the job's id.
std::string rendezvous_path(const std::string& given) {
  if (!given.empty()) return given;
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "SLURM_JOB_ID"})
    if (const char* job = env(v)) {
      std::string name = job;
      if (const char* step = env("SLURM_STEP_ID"); step && std::strcmp(v, "SLURM_JOB_ID") == 0) name += std::string(".") + step;
      for (char& c : name)
        if (c == '/' || c == ' ') c = '_';
      return "/tmp/spcg-nccl-" + name + ".id";
    }
  throw UsageError("several ranks started by MPI, but no job id in the environment to name the rendezvous file: "
                   "give --rendezvous FILE (on a file system every rank sees)");
}

}  // namespace

std::optional<RankContext> rank_context_from_environment() {
  RankContext r;
  if (env("SPCG_RANK")) {
    r.rank = env_int("SPCG_RANK", 0), r.size = env_int("SPCG_RANKS", 1), r.local_rank = env_int("SPCG_LOCAL_RANK", r.rank);
    r.started_by = "spcg --gpus";
    r.id_fd = env_int("SPCG_ID_FD", -1);
    if (const char* fds = env("SPCG_ID_FDS"))
      for (const std::string& f : split(fds, ',')) r.id_fds.push_back(std::atoi(f.c_str()));
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    r.rank = env_int("OMPI_COMM_WORLD_RANK", 0), r.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    r.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", r.rank);
    r.started_by = "Open MPI (OMPI_COMM_WORLD_*)";
  } else if (env("PMI_RANK") && env("PMI_SIZE")) {
    r.rank = env_int("PMI_RANK", 0), r.size = env_int("PMI_SIZE", 1);
    r.local_rank = env_int("MPI_LOCALRANKID", env_int("PMI_LOCAL_RANK", r.rank));
    r.started_by = "MPICH / Intel MPI (PMI_*)";
  } else if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS")) {  // srun (a batch script alone sets no step tasks)
    r.rank = env_int("SLURM_PROCID", 0), r.size = env_int("SLURM_STEP_NUM_TASKS", 1);
    r.local_rank = env_int("SLURM_LOCALID", r.rank);
    r.started_by = "Slurm srun (SLURM_PROCID)";
  } else {
    return std::nullopt;
  }
  if (r.size < 1 || r.rank >= r.size)
    throw UsageError("rank " + std::to_string(r.rank) + " of " + std::to_string(r.size) + " from " + r.started_by);
  if (r.size == 1 && r.started_by != "spcg --gpus") return std::nullopt;  // mpirun -n 1: a plain process
  return r;
}

void select_gpu_of_rank(const RankContext& r) {
  if (r.started_by == "spcg --gpus") return;  // the launcher set CUDA_VISIBLE_DEVICES
  if (const char* visible = env("CUDA_VISIBLE_DEVICES")) {
    const std::vector<std::string> list = split(visible, ',');
    if (list.size() <= 1) return;  // the job's launcher chose one GPU per rank already
    setenv("CUDA_VISIBLE_DEVICES", list[static_cast<size_t>(r.local_rank) % list.size()].c_str(), 1);
    return;
  }
  setenv("CUDA_VISIBLE_DEVICES", std::to_string(r.local_rank).c_str(), 1);
}

NcclId share_unique_id(const RankContext& r, const std::string& rendezvous, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                              std::chrono::duration<double>(timeout_s));
  NcclId id;
  if (r.started_by == "spcg --gpus") {
    if (r.rank == 0) {
      id = nccl_unique_id();
      for (int fd : r.id_fds) {
        const char* p = reinterpret_cast<const char*>(&id);
        size_t left = sizeof id;
        while (left > 0) {
          const ssize_t put = write(fd, p, left);
          if (put < 0 && errno == EINTR) continue;
          if (put <= 0) throw CommunicationError(std::string("rank 0: handing out the NCCL id: ") + std::strerror(errno));
          p += put, left -= static_cast<size_t>(put);
        }
        close(fd);
      }
    } else {
      if (r.id_fd < 0) throw CommunicationError("rank " + std::to_string(r.rank) + ": the launcher gave no pipe for the NCCL id");
      read_exactly(r.id_fd, &id, sizeof id, deadline, r.rank);
      close(r.id_fd);
    }
    return id;
  }
  const std::string path = rendezvous_path(rendezvous);
  if (r.rank == 0) {
    id = nccl_unique_id();
    const std::string tmp = path + ".tmp" + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(reinterpret_cast<const char*>(&id), sizeof id);
      if (!f) throw CommunicationError("rank 0: cannot write the rendezvous file " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0)
      throw CommunicationError("rank 0: cannot create the rendezvous file " + path + ": " + std::strerror(errno));
    return id;
  }
  while (true) {
    std::ifstream f(path, std::ios::binary);
    if (f && f.read(reinterpret_cast<char*>(&id), sizeof id) && f.gcount() == static_cast<std::streamsize>(sizeof id)) return id;
    if (std::chrono::steady_clock::now() > deadline)
      throw CommunicationError("rank " + std::to_string(r.rank) + ": no NCCL id from rank 0 in " + path + " after " +
                               std::to_string(static_cast<int>(timeout_s)) + " s");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void end_rendezvous(const RankContext& r, const std::string& rendezvous) {
  if (r.rank == 0 && r.started_by != "spcg --gpus") std::remove(rendezvous_path(rendezvous).c_str());
}

int launch_ranks(int gpus, const std::vector<std::string>& args) {
  std::string why;
  const int available = cuda_device_count(&why);
  // SPCG_SHARE_GPUS=1 (tests): ranks share the GPUs round robin. NCCL refuses two ranks on one device, so a
  // one-GPU machine sees the launcher end a job whose ranks fail in NCCL's start.
  const bool share = env("SPCG_SHARE_GPUS") != nullptr && available > 0;
  if (gpus > available && !share)
    throw UsageError("--gpus " + std::to_string(gpus) + ": this machine shows " + std::to_string(available) + " GPU(s)" +
                     (why.empty() ? "" : " (" + why + ")"));
  std::vector<std::string> devices;
  if (const char* visible = env("CUDA_VISIBLE_DEVICES")) devices = split(visible, ',');
  else
    for (int d = 0; d < available; ++d) devices.push_back(std::to_string(d));
  // one pipe per rank above 0: rank 0 writes the NCCL id into each
  std::vector<std::array<int, 2>> pipes(static_cast<size_t>(gpus), std::array<int, 2>{-1, -1});
  for (int r = 1; r < gpus; ++r)
    if (pipe(pipes[static_cast<size_t>(r)].data()) != 0) throw Error(std::string("launcher: pipe: ") + std::strerror(errno));
  std::vector<std::string> argv_storage = {"spcg"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(stdout), std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(gpus), -1);
  for (int r = 0; r < gpus; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw Error(std::string("launcher: fork: ") + std::strerror(errno));
    if (pid == 0) {  // the rank: its variables, its pipe ends, then this program again
      setenv("SPCG_RANK", std::to_string(r).c_str(), 1);
      setenv("SPCG_RANKS", std::to_string(gpus).c_str(), 1);
      setenv("SPCG_LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("CUDA_VISIBLE_DEVICES", devices[static_cast<size_t>(r) % devices.size()].c_str(), 1);
      std::string fds;
      for (int q = 1; q < gpus; ++q) {
        const auto& p = pipes[static_cast<size_t>(q)];
        if (r == 0) {
          close(p[0]);
          fds += (fds.empty() ? "" : ",") + std::to_string(p[1]);
        } else {
          close(p[1]);
          if (q == r) setenv("SPCG_ID_FD", std::to_string(p[0]).c_str(), 1);
          else close(p[0]);
        }
      }
      if (r == 0) setenv("SPCG_ID_FDS", fds.c_str(), 1);
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "spcg solve: launcher: cannot start rank %d: %s\n", r, std::strerror(errno));
      _exit(127);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  for (auto& p : pipes)
    for (int fd : p)
      if (fd >= 0) close(fd);
  // wait; the first rank to fail ends the others (they may be waiting in a collective that never completes)
  int first_failed = -1, failed_status = 0, running = gpus;
  std::chrono::steady_clock::time_point ended_at;
  bool killed = false, not_converged = false;
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pid == 0) {
      if (first_failed >= 0 && !killed && seconds_since(ended_at) > 5.0) {
        for (pid_t p : pids)
          if (p > 0) kill(p, SIGKILL);
        killed = true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    --running;
    int rank = -1;
    for (int r = 0; r < gpus; ++r)
      if (pids[static_cast<size_t>(r)] == pid) rank = r, pids[static_cast<size_t>(r)] = -1;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    if (code == 3) {  // did not converge: every rank ends so, alike, and rank 0 still prints the report
      not_converged = true;
      continue;
    }
    if (code != 0 && first_failed < 0) {
      first_failed = rank, failed_status = code;
      ended_at = std::chrono::steady_clock::now();
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
    }
  }
  if (first_failed >= 0) {
    std::fprintf(stderr, "spcg solve: rank %d of %d failed (exit status %d); the other ranks were ended\n", first_failed,
                 gpus, failed_status);
    return failed_status;
  }
  return not_converged ? 3 : 0;
}

}  // namespace spcg
