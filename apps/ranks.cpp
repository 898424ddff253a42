#include "apps/ranks.hpp"

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
#include <filesystem>
#include <thread>

#include "spcg/cuda_start.hpp"
#include "spcg/error.hpp"
#include "spcg/distributed.hpp"

extern char** environ;

namespace spcg {
namespace {

// This process's start on the wall clock (static initialisation runs before main).
const WallTime process_start = std::chrono::system_clock::now();

// Ranks of one job start a little apart (mpirun / srun on several hosts: seconds), and a shared file system's
// clock may differ from this host's; a crashed job's leftover is minutes or hours old.
constexpr std::chrono::seconds kStaleMargin{60};

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v && *v ? v : nullptr;
}

// A non-negative number (a rank, a size, a descriptor) from `text`, or a UsageError naming where it came from.
int rank_number(const std::string& text, const std::string& what) {
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || x < 0 || x > 1 << 20)
    throw UsageError(what + "='" + text + "' is not a rank number");
  return static_cast<int>(x);
}

int env_int(const char* name, int fallback) {
  const char* v = env(name);
  return v ? rank_number(v, std::string("environment variable ") + name) : fallback;
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
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

std::chrono::steady_clock::time_point deadline_after(double seconds) {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
}

std::string rank_text(int rank) { return "rank " + std::to_string(rank); }

// Reads exactly n bytes from fd, waiting at most until `deadline`.
void read_exactly(int fd, void* out, size_t n, std::chrono::steady_clock::time_point deadline, int rank) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - std::chrono::steady_clock::now()).count();
    if (left_ms <= 0) throw CommunicationError(rank_text(rank) + ": rank 0 sent no NCCL id in time");
    pollfd pfd{fd, POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min(left_ms, 1000.0)) + 1) <= 0) continue;  // EINTR or nothing yet
    const ssize_t got = read(fd, p, n);
    if (got == 0) throw CommunicationError(rank_text(rank) + ": rank 0 ended before sending the NCCL id");
    if (got < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      throw CommunicationError(rank_text(rank) + ": reading the NCCL id: " + std::strerror(errno));
    }
    p += got, n -= static_cast<size_t>(got);
  }
}

void write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = write(fd, p, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) throw CommunicationError(std::string("writing the NCCL id: ") + std::strerror(put < 0 ? errno : EIO));
    p += put, n -= static_cast<size_t>(put);
  }
}

WallTime modified(const struct stat& st) {
  return WallTime(std::chrono::duration_cast<WallTime::duration>(std::chrono::seconds(st.st_mtim.tv_sec) +
                                                                  std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
}

// What is at a rendezvous path must be a regular file of this user's (lstat or fstat of it); else refused.
void require_own_file(const std::string& who, const std::string& path, const struct stat& st) {
  if (S_ISLNK(st.st_mode))
    throw CommunicationError(who + ": " + path + " is a symbolic link: refused (a rendezvous file is never a link; remove it)");
  if (!S_ISREG(st.st_mode)) throw CommunicationError(who + ": " + path + " is not a regular file: refused");
  if (st.st_uid != geteuid())
    throw CommunicationError(who + ": " + path + " belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
                             std::to_string(geteuid()) + "): refused");
}

// Rank 0's file until every rank has read it: removed at exit or on a terminating signal before then. A fixed
// buffer, so the signal handler needs no allocation.
char pending_removal[4096];

void remove_pending() {
  if (pending_removal[0] != '\0') unlink(pending_removal);
  pending_removal[0] = '\0';
}

extern "C" void remove_pending_on_signal(int sig) {
  if (pending_removal[0] != '\0') unlink(pending_removal);
  signal(sig, SIG_DFL);
  raise(sig);  // delivered once the handler returns: the process ends by the signal, as it would have
}

}  // namespace

std::optional<RankContext> rank_context_from_environment() {
  RankContext r;
  if (env("SPCG_RANK")) {
    r.rank = env_int("SPCG_RANK", 0), r.size = env_int("SPCG_RANKS", 1), r.local_rank = env_int("SPCG_LOCAL_RANK", r.rank);
    r.local_size = r.size;  // one host
    r.started_by = "spcg --gpus";
    r.id_fd = env_int("SPCG_ID_FD", -1);
    if (const char* fds = env("SPCG_ID_FDS"))
      for (const std::string& f : split(fds, ',')) r.id_fds.push_back(rank_number(f, "environment variable SPCG_ID_FDS item"));
  } else if (env("OMPI_COMM_WORLD_RANK")) {
    r.rank = env_int("OMPI_COMM_WORLD_RANK", 0), r.size = env_int("OMPI_COMM_WORLD_SIZE", 1);
    r.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", r.rank);
    r.local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE", r.size);
    r.started_by = "Open MPI (OMPI_COMM_WORLD_*)";
  } else if (env("PMI_RANK") && env("PMI_SIZE")) {
    r.rank = env_int("PMI_RANK", 0), r.size = env_int("PMI_SIZE", 1);
    r.local_rank = env_int("MPI_LOCALRANKID", env_int("PMI_LOCAL_RANK", r.rank));
    r.local_size = env_int("MPI_LOCALNRANKS", r.size);
    r.started_by = "MPICH / Intel MPI (PMI_*)";
  } else if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS")) {  // srun (a batch script alone sets no step tasks)
    r.rank = env_int("SLURM_PROCID", 0), r.size = env_int("SLURM_STEP_NUM_TASKS", 1);
    r.local_rank = env_int("SLURM_LOCALID", r.rank);
    r.local_size = r.size;  // (SLURM_STEP_TASKS_PER_NODE's "4(x2)" form is not read: every rank counted, as before)
    r.started_by = "Slurm srun (SLURM_PROCID)";
  } else {
    return std::nullopt;
  }
  if (r.size < 1 || r.rank >= r.size)
    throw UsageError("rank " + std::to_string(r.rank) + " of " + std::to_string(r.size) + " from " + r.started_by +
                     ": the rank must be below the number of ranks");
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

int gpus_visible_without_cuda() {
  std::error_code ec;
  int installed = -1;
  if (std::filesystem::is_directory("/proc/driver/nvidia/gpus", ec)) {
    installed = 0;
    for (auto it = std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
      ++installed;
  }
  // set but empty counts (getenv, not env()): "" and "-1" hide every GPU; CUDA stops at the first entry that
  // names no GPU
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const int listed = std::string(visible).empty() || std::string(visible) == "-1" ? 0 : static_cast<int>(split(visible, ',').size());
    return installed < 0 ? listed : std::min(listed, installed);
  }
  return installed;
}

void select_device_before_cuda(int device, bool asked) {
  if (device < 0) throw UsageError("--device must be >= 0, got " + std::to_string(device));
  const int visible = gpus_visible_without_cuda();
  // no GPU to choose from (none installed, or all hidden): left as it is, so that CUDA says so and a solve that
  // may run on the host does (an explicit --device past the count is still refused where the count is known)
  if (visible == 0 && !asked) return;
  if (visible >= 0 && device >= visible)
    throw UsageError("--device " + std::to_string(device) + ": this machine shows " + std::to_string(visible) + " GPU(s)");
  if (const char* listed = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::vector<std::string> list = split(listed, ',');
    if (static_cast<size_t>(device) < list.size()) setenv("CUDA_VISIBLE_DEVICES", list[static_cast<size_t>(device)].c_str(), 1);
    return;
  }
  // no driver files to count: the default leaves CUDA's view as it is; an asked-for device is set all the same
  // (CUDA then finds it, or says there is none)
  if (visible >= 0 || asked) setenv("CUDA_VISIBLE_DEVICES", std::to_string(device).c_str(), 1);
}

// ---- the rendezvous file ----

std::string private_rendezvous_dir() {
  return (std::filesystem::temp_directory_path() / ("spcg-" + std::to_string(geteuid()))).string();
}

std::string rendezvous_path(const std::string& given) {
  if (!given.empty()) return given;
  for (const char* v : {"OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "SLURM_JOB_ID"})
    if (const char* job = env(v)) {
      std::string name = job;
      if (const char* step = env("SLURM_STEP_ID"); step && std::strcmp(v, "SLURM_JOB_ID") == 0) name += std::string(".") + step;
      for (char& c : name)
        if (c == '/' || c == ' ') c = '_';
      return private_rendezvous_dir() + "/nccl-" + name + ".id";
    }
  throw UsageError("several ranks started by MPI, but no job id in the environment to name the rendezvous file: "
                   "give --rendezvous FILE (on a file system every rank sees)");
}

void make_private_dir(const std::string& dir) {
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    throw CommunicationError("cannot create the rendezvous folder " + dir + ": " + std::strerror(errno));
  struct stat st {};
  if (lstat(dir.c_str(), &st) != 0) throw CommunicationError("rendezvous folder " + dir + ": " + std::strerror(errno));
  if (S_ISLNK(st.st_mode)) throw CommunicationError("rendezvous folder " + dir + " is a symbolic link: refused (remove it)");
  if (!S_ISDIR(st.st_mode)) throw CommunicationError("rendezvous folder " + dir + " is not a folder: refused (remove it)");
  if (st.st_uid != geteuid())
    throw CommunicationError("rendezvous folder " + dir + " belongs to uid " + std::to_string(st.st_uid) +
                             ", not to this user (uid " + std::to_string(geteuid()) + "): refused");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    throw CommunicationError("rendezvous folder " + dir + " is open to other users (mode " + mode +
                             "): refused (chmod 700 it or remove it)");
  }
}

WallTime rendezvous_not_before() { return process_start - kStaleMargin; }

void write_rendezvous(const std::string& path, const NcclId& id, WallTime not_before) {
  for (int attempt = 0;; ++attempt) {
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      try {
        write_all(fd, &id, sizeof id);
      } catch (const CommunicationError& e) {
        close(fd), unlink(path.c_str());
        throw CommunicationError("rank 0: rendezvous file " + path + ": " + e.what());
      }
      if (close(fd) != 0) {
        const int err = errno;
        unlink(path.c_str());
        throw CommunicationError("rank 0: rendezvous file " + path + ": " + std::strerror(err));
      }
      return;
    }
    if (errno != EEXIST || attempt > 0)
      throw CommunicationError("rank 0: cannot create the rendezvous file " + path + ": " + std::strerror(errno));
    // Something is in its place: a file of ours older than this job (a crashed job's) is replaced; anything
    // else is refused.
    struct stat st {};
    if (lstat(path.c_str(), &st) != 0) continue;  // gone meanwhile
    require_own_file("rank 0", path, st);
    if (modified(st) >= not_before)
      throw CommunicationError("rank 0: the rendezvous file " + path +
                               " was written after this job started (another job with the same id?): refused; "
                               "give --rendezvous FILE");
    if (unlink(path.c_str()) != 0)
      throw CommunicationError("rank 0: cannot remove the stale rendezvous file " + path + ": " + std::strerror(errno));
  }
}

NcclId read_rendezvous(const std::string& path, int rank, double timeout_s, WallTime not_before) {
  const auto deadline = deadline_after(timeout_s);
  const std::string who = rank_text(rank);
  std::string seen = "no file";
  while (true) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      struct stat st {};
      const bool stated = fstat(fd, &st) == 0;
      NcclId id;
      ssize_t got = -1;
      if (stated && S_ISREG(st.st_mode) && st.st_uid == geteuid() && modified(st) >= not_before &&
          st.st_size == static_cast<off_t>(sizeof id))
        got = pread(fd, &id, sizeof id, 0);
      close(fd);
      if (!stated) throw CommunicationError(who + ": rendezvous file " + path + ": " + std::strerror(errno));
      require_own_file(who, path, st);
      if (got == static_cast<ssize_t>(sizeof id)) return id;
      if (modified(st) < not_before) seen = "only a file older than this job, left by an earlier one";
      else if (st.st_size > static_cast<off_t>(sizeof id))
        throw CommunicationError(who + ": " + path + " is not a rendezvous file (" + std::to_string(st.st_size) +
                                 " bytes, expected " + std::to_string(sizeof id) + "): refused");
      else seen = "an incomplete file";
    } else if (errno == ELOOP) {
      throw CommunicationError(who + ": " + path + " is a symbolic link: refused (a rendezvous file is never a link; remove it)");
    } else if (errno != ENOENT) {
      throw CommunicationError(who + ": cannot open the rendezvous file " + path + ": " + std::strerror(errno));
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw CommunicationError(who + ": no NCCL id from rank 0 in " + path + " after " + std::to_string(static_cast<int>(timeout_s)) +
                               " s (" + seen + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void remove_rendezvous(const std::string& path) {
  if (path == pending_removal) pending_removal[0] = '\0';
  unlink(path.c_str());
}

void remove_rendezvous_at_exit(const std::string& path) {
  static bool installed = false;
  if (path.size() >= sizeof pending_removal) return;  // no such path gets created on Linux (PATH_MAX)
  std::memcpy(pending_removal, path.c_str(), path.size() + 1);
  if (installed) return;
  installed = true;
  std::atexit(remove_pending);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;  // an ignored or handled signal stays so
    struct sigaction sa {};
    sa.sa_handler = remove_pending_on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

NcclId share_unique_id(const RankContext& r, const std::string& rendezvous, double timeout_s,
                       const std::function<NcclId()>& make_id) {
  if (r.started_by == "spcg --gpus") {  // the launcher's pipes
    NcclId id;
    if (r.rank == 0) {
      id = make_id();
      for (int fd : r.id_fds) {
        try {
          write_all(fd, &id, sizeof id);
        } catch (const CommunicationError& e) {
          throw CommunicationError(std::string("rank 0: handing out the NCCL id: ") + e.what());
        }
        close(fd);
      }
    } else {
      if (r.id_fd < 0) throw CommunicationError(rank_text(r.rank) + ": the launcher gave no pipe for the NCCL id");
      read_exactly(r.id_fd, &id, sizeof id, deadline_after(timeout_s), r.rank);
      close(r.id_fd);
    }
    return id;
  }
  const std::string path = rendezvous_path(rendezvous);
  if (rendezvous.empty()) make_private_dir(private_rendezvous_dir());
  if (r.rank != 0) return read_rendezvous(path, r.rank, timeout_s, rendezvous_not_before());
  const NcclId id = make_id();
  write_rendezvous(path, id, rendezvous_not_before());
  remove_rendezvous_at_exit(path);
  return id;
}

void end_rendezvous(const RankContext& r, const std::string& rendezvous) {
  if (r.rank == 0 && r.started_by != "spcg --gpus") remove_rendezvous(rendezvous_path(rendezvous));
}

// ---- the launcher ----

LaunchOutcome run_ranks(int ranks, const std::vector<std::string>& args, const RankLaunch& how) {
  if (ranks < 1) throw UsageError("the launcher needs at least one rank");
  // one pipe per rank above 0: rank 0 writes the NCCL id into each
  std::vector<std::array<int, 2>> pipes(static_cast<size_t>(ranks), std::array<int, 2>{-1, -1});
  auto close_pipes = [&] {
    for (auto& p : pipes)
      for (int& fd : p)
        if (fd >= 0) close(fd), fd = -1;
  };
  for (int r = 1; r < ranks; ++r)
    if (pipe(pipes[static_cast<size_t>(r)].data()) != 0) {
      const int err = errno;
      close_pipes();
      throw Error(std::string("launcher: pipe: ") + std::strerror(err));
    }
  // Everything a rank needs is made before the forks (a child of a threaded process only closes and execs).
  std::vector<std::string> argv_storage = {"spcg"};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> ours = {"SPCG_RANK=", "SPCG_RANKS=", "SPCG_LOCAL_RANK=", "SPCG_ID_FD=", "SPCG_ID_FDS="};
  if (!how.devices.empty()) ours.push_back("CUDA_VISIBLE_DEVICES=");
  std::vector<std::string> inherited;
  for (char** e = environ; e && *e; ++e) {
    bool replaced = false;
    for (const std::string& o : ours) replaced = replaced || std::strncmp(*e, o.c_str(), o.size()) == 0;
    if (!replaced) inherited.push_back(*e);
  }
  std::vector<std::vector<std::string>> env_storage(static_cast<size_t>(ranks), inherited);
  std::vector<std::vector<char*>> envp(static_cast<size_t>(ranks));
  std::vector<std::vector<int>> to_close(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    std::vector<std::string>& e = env_storage[static_cast<size_t>(r)];
    e.push_back("SPCG_RANK=" + std::to_string(r));
    e.push_back("SPCG_RANKS=" + std::to_string(ranks));
    e.push_back("SPCG_LOCAL_RANK=" + std::to_string(r));
    if (!how.devices.empty()) e.push_back("CUDA_VISIBLE_DEVICES=" + how.devices[static_cast<size_t>(r) % how.devices.size()]);
    std::string fds;
    for (int q = 1; q < ranks; ++q) {
      const auto& p = pipes[static_cast<size_t>(q)];
      if (r == 0) {
        to_close[0].push_back(p[0]);
        fds += (fds.empty() ? "" : ",") + std::to_string(p[1]);
      } else {
        to_close[static_cast<size_t>(r)].push_back(p[1]);
        if (q == r) e.push_back("SPCG_ID_FD=" + std::to_string(p[0]));
        else to_close[static_cast<size_t>(r)].push_back(p[0]);
      }
    }
    if (r == 0) e.push_back("SPCG_ID_FDS=" + fds);
    for (std::string& s : e) envp[static_cast<size_t>(r)].push_back(s.data());
    envp[static_cast<size_t>(r)].push_back(nullptr);
  }
  std::fflush(stdout), std::fflush(stderr);
  std::vector<pid_t> pids(static_cast<size_t>(ranks), -1);
  LaunchOutcome out;
  out.rank_status.assign(static_cast<size_t>(ranks), -1);
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {  // the ranks already started cannot run without this one
      const int err = errno;
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL), waitpid(p, nullptr, 0);
      close_pipes();
      throw Error(std::string("launcher: fork: ") + std::strerror(err));
    }
    if (pid == 0) {  // the rank: its pipe ends, then the program
      for (int fd : to_close[static_cast<size_t>(r)]) close(fd);
      execve(how.program.c_str(), argv.data(), envp[static_cast<size_t>(r)].data());
      const char* why = std::strerror(errno);
      dprintf(2, "spcg solve: launcher: cannot start rank %d (%s): %s\n", r, how.program.c_str(), why);
      _exit(127);
    }
    pids[static_cast<size_t>(r)] = pid;
  }
  close_pipes();
  // Wait for each rank; the first to fail ends the others (they may be waiting in a collective that never
  // completes). A rank that did not converge (3) ends no other: each finishes alike and rank 0 reports.
  int running = ranks;
  bool killed = false, not_converged = false;
  std::chrono::steady_clock::time_point failed_at;
  while (running > 0) {
    bool reaped = false;
    for (int r = 0; r < ranks; ++r) {
      pid_t& pid = pids[static_cast<size_t>(r)];
      if (pid <= 0) continue;
      int status = 0;
      const pid_t got = waitpid(pid, &status, WNOHANG);
      if (got == 0 || (got < 0 && errno == EINTR)) continue;
      pid = -1, --running, reaped = true;
      const int code = got < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      out.rank_status[static_cast<size_t>(r)] = code;
      if (code == 3) not_converged = true;
      if (code == 0 || code == 3 || out.first_failed >= 0) continue;
      out.first_failed = r, out.status = code;
      failed_at = std::chrono::steady_clock::now();
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
    }
    if (out.first_failed >= 0 && !killed && running > 0 && seconds_since(failed_at) > how.grace_s) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      killed = true;
    }
    if (!reaped && running > 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (out.first_failed >= 0) {
    std::fprintf(stderr, "spcg solve: rank %d of %d failed (exit status %d); the other ranks were ended\n", out.first_failed,
                 ranks, out.status);
    return out;
  }
  out.status = not_converged ? 3 : 0;
  return out;
}

int launch_ranks(int gpus, const std::vector<std::string>& args) {
  // counted without CUDA where the driver's files say it: the launcher starts no CUDA of its own (its ranks do)
  std::string why;
  const int counted = gpus_visible_without_cuda();
  const int available = counted >= 0 ? counted : cuda_device_count(&why);
  // SPCG_SHARE_GPUS=1 (tests): ranks share the GPUs round robin. NCCL refuses two ranks on one device, so a
  // one-GPU machine sees the launcher end a job whose ranks fail in NCCL's start.
  const bool share = env("SPCG_SHARE_GPUS") != nullptr && available > 0;
  if (gpus > available && !share)
    throw UsageError("--gpus " + std::to_string(gpus) + ": this machine shows " + std::to_string(available) + " GPU(s)" +
                     (why.empty() ? "" : " (" + why + ")"));
  RankLaunch how;
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) how.devices = split(visible, ',');  // "": none
  else
    for (int d = 0; d < available; ++d) how.devices.push_back(std::to_string(d));
  return run_ranks(gpus, args, how).status;
}

}  // namespace spcg
