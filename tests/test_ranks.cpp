// The host side of several ranks (apps/ranks.cpp), run in CI with no GPU: the launcher's exit policy (with
// tests/fake_rank.cpp standing in for a rank), the ranks' environment (spcg's launcher, Open MPI, MPICH / Intel
// MPI, Slurm), and the rendezvous file that hands NCCL's id to MPI ranks (issue #33 item 9: private folder,
// owner-only exclusive file, no link followed, another user's or an earlier job's file refused, removed on
// every exit path). No test asserts a duration; waits have generous hang guards.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "spcg/error.hpp"
#include "apps/ranks.hpp"
#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;
using spcg::CommunicationError;
using spcg::NcclId;
using spcg::UsageError;

// Every variable the ranks' code reads, cleared for the test and restored after it (a CI job under Slurm or
// mpirun must not change what a test sees).
class ScopedEnv {
 public:
  ScopedEnv() {
    for (const char* v : {"SPCG_RANK", "SPCG_RANKS", "SPCG_LOCAL_RANK", "SPCG_ID_FD", "SPCG_ID_FDS", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
                          "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
                          "PMI_LOCAL_RANK", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID", "OMPI_MCA_ess_base_jobid",
                          "OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE", "PMI_JOBID", "SLURM_JOB_ID", "SLURM_STEP_ID",
                          "CUDA_VISIBLE_DEVICES", "TMPDIR", "FAKE_RANK_DIR", "SPCG_SHARE_GPUS"})
      unset(v);
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_)
      if (value) setenv(name.c_str(), value->c_str(), 1);
      else unsetenv(name.c_str());
  }
  ScopedEnv& set(const std::string& name, const std::string& value) {
    save(name);
    setenv(name.c_str(), value.c_str(), 1);
    return *this;
  }
  ScopedEnv& unset(const std::string& name) {
    save(name);
    unsetenv(name.c_str());
    return *this;
  }

 private:
  void save(const std::string& name) {
    if (saved_.count(name)) return;
    const char* v = std::getenv(name.c_str());
    saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

NcclId id_of(char seed) {
  NcclId id;
  for (size_t i = 0; i < sizeof id.bytes; ++i) id.bytes[i] = static_cast<char>(seed + i);
  return id;
}

bool same(const NcclId& a, const NcclId& b) { return std::memcmp(a.bytes, b.bytes, sizeof a.bytes) == 0; }

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

void write_bytes(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// Sets a file's modification time `seconds_ago` before now.
void age(const std::string& path, int seconds_ago) {
  timespec times[2];
  clock_gettime(CLOCK_REALTIME, &times[0]);
  times[0].tv_sec -= seconds_ago;
  times[1] = times[0];
  ASSERT_EQ(utimensat(AT_FDCWD, path.c_str(), times, AT_SYMLINK_NOFOLLOW), 0) << std::strerror(errno);
}

// The message of the CommunicationError (or other spcg::Error) `f` throws; fails the test when it throws none.
template <class E = spcg::Error, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "no exception";
  return "";
}

spcg::WallTime minutes_ago(int m) { return std::chrono::system_clock::now() - std::chrono::minutes(m); }

constexpr uid_t kNobody = 65534;

// ---- the ranks' environment ----

TEST(RankEnvironment, PlainProcessHasNoRank) {
  ScopedEnv env;
  EXPECT_FALSE(spcg::rank_context_from_environment());
  env.set("SLURM_PROCID", "0");  // a batch script (no job step) is not a rank
  EXPECT_FALSE(spcg::rank_context_from_environment());
  env.set("PMI_RANK", "1");  // PMI without its size
  EXPECT_FALSE(spcg::rank_context_from_environment());
  env.set("SPCG_RANK", "");  // empty is unset
  EXPECT_FALSE(spcg::rank_context_from_environment());
}

TEST(RankEnvironment, OurLauncher) {
  ScopedEnv env;
  env.set("SPCG_RANK", "2").set("SPCG_RANKS", "3").set("SPCG_LOCAL_RANK", "1").set("SPCG_ID_FD", "7");
  env.set("OMPI_COMM_WORLD_RANK", "0").set("OMPI_COMM_WORLD_SIZE", "5");  // ours first
  auto r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->size, 3);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_size, 3) << "our launcher's ranks share one host";
  EXPECT_EQ(r->id_fd, 7);
  EXPECT_TRUE(r->id_fds.empty());
  EXPECT_EQ(r->started_by, "spcg --gpus");
  env.set("SPCG_RANK", "0").unset("SPCG_LOCAL_RANK").unset("SPCG_ID_FD").set("SPCG_ID_FDS", "4,5");
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->local_rank, 0);  // the rank, when not given
  EXPECT_EQ(r->id_fd, -1);
  EXPECT_EQ(r->id_fds, (std::vector<int>{4, 5}));
  // one rank started by our launcher is still a rank (it takes the id over pipes, reports per rank)
  env.set("SPCG_RANKS", "1").unset("SPCG_ID_FDS");
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->size, 1);
}

TEST(RankEnvironment, OpenMpi) {
  ScopedEnv env;
  env.set("OMPI_COMM_WORLD_RANK", "3").set("OMPI_COMM_WORLD_SIZE", "4").set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  auto r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->size, 4);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->started_by, "Open MPI (OMPI_COMM_WORLD_*)");
  EXPECT_EQ(r->local_size, 4) << "no local size given: every rank counted on this host (its threads shared by all)";
  env.set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  EXPECT_EQ(spcg::rank_context_from_environment()->local_size, 2);
  env.unset("OMPI_COMM_WORLD_LOCAL_RANK");
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->local_rank, 3);
  env.set("OMPI_COMM_WORLD_RANK", "0").set("OMPI_COMM_WORLD_SIZE", "1");  // mpirun -n 1: a plain process
  EXPECT_FALSE(spcg::rank_context_from_environment());
}

TEST(RankEnvironment, MpichAndIntelMpi) {
  ScopedEnv env;
  env.set("PMI_RANK", "1").set("PMI_SIZE", "2").set("PMI_LOCAL_RANK", "1");
  auto r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 1);
  EXPECT_EQ(r->size, 2);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->started_by, "MPICH / Intel MPI (PMI_*)");
  env.set("MPI_LOCALRANKID", "0");  // Intel MPI's name wins
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->local_rank, 0);
  env.unset("MPI_LOCALRANKID").unset("PMI_LOCAL_RANK");
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->local_rank, 1);
  env.set("PMI_RANK", "0").set("PMI_SIZE", "1");
  EXPECT_FALSE(spcg::rank_context_from_environment());
}

TEST(RankEnvironment, SlurmSrun) {
  ScopedEnv env;
  env.set("SLURM_PROCID", "5").set("SLURM_STEP_NUM_TASKS", "8").set("SLURM_LOCALID", "1");
  auto r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rank, 5);
  EXPECT_EQ(r->size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->started_by, "Slurm srun (SLURM_PROCID)");
  env.unset("SLURM_LOCALID");
  r = spcg::rank_context_from_environment();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->local_rank, 5);
  env.set("SLURM_PROCID", "0").set("SLURM_STEP_NUM_TASKS", "1");
  EXPECT_FALSE(spcg::rank_context_from_environment());
}

// A value that is not a number is a usage error naming the variable, never atoi's 0 (which would make every
// such process rank 0).
TEST(RankEnvironment, BadValuesAreUsageErrors) {
  for (const char* bad : {"abc", "1x", "-1", "99999999999", " ", "0x10"}) {
    ScopedEnv env;
    env.set("OMPI_COMM_WORLD_RANK", bad).set("OMPI_COMM_WORLD_SIZE", "4");
    EXPECT_NE(error_of<UsageError>([] { spcg::rank_context_from_environment(); })
                  .find(std::string("environment variable OMPI_COMM_WORLD_RANK='") + bad + "' is not a rank number"),
              std::string::npos)
        << bad;
  }
  struct Case {
    std::vector<std::pair<const char*, const char*>> vars;
    const char* message;
  };
  const std::vector<Case> cases = {
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "two"}}, "OMPI_COMM_WORLD_SIZE='two'"},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "x"}},
       "OMPI_COMM_WORLD_LOCAL_RANK='x'"},
      {{{"PMI_RANK", "one"}, {"PMI_SIZE", "2"}}, "PMI_RANK='one'"},
      {{{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"PMI_LOCAL_RANK", "?"}}, "PMI_LOCAL_RANK='?'"},
      {{{"SLURM_PROCID", "1"}, {"SLURM_STEP_NUM_TASKS", "2"}, {"SLURM_LOCALID", "1.5"}}, "SLURM_LOCALID='1.5'"},
      {{{"SLURM_PROCID", "a"}, {"SLURM_STEP_NUM_TASKS", "2"}}, "SLURM_PROCID='a'"},
      {{{"SPCG_RANK", "1"}, {"SPCG_RANKS", "2"}, {"SPCG_ID_FD", "fd"}}, "SPCG_ID_FD='fd'"},
      {{{"SPCG_RANK", "0"}, {"SPCG_RANKS", "3"}, {"SPCG_ID_FDS", "4,x"}}, "SPCG_ID_FDS item='x'"},
      {{{"SPCG_RANK", "0"}, {"SPCG_RANKS", "3"}, {"SPCG_ID_FDS", "4,,5"}}, "SPCG_ID_FDS item=''"},
      // a rank not below the size, or no ranks at all
      {{{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}}, "rank 4 of 4 from Open MPI (OMPI_COMM_WORLD_*): the rank must be below"},
      {{{"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "0"}}, "rank 0 of 0 from Slurm srun"},
      {{{"SPCG_RANK", "2"}, {"SPCG_RANKS", "2"}}, "rank 2 of 2 from spcg --gpus"},
      {{{"PMI_RANK", "3"}, {"PMI_SIZE", "1"}}, "rank 3 of 1 from MPICH"},
  };
  for (const Case& c : cases) {
    ScopedEnv env;
    for (const auto& [name, value] : c.vars) env.set(name, value);
    const std::string message = error_of<UsageError>([] { spcg::rank_context_from_environment(); });
    EXPECT_NE(message.find(c.message), std::string::npos) << c.message << "\n" << message;
  }
}

TEST(RankEnvironment, EachRankSeesItsGpu) {
  ScopedEnv env;
  spcg::RankContext ours;
  ours.started_by = "spcg --gpus", ours.local_rank = 1;
  env.set("CUDA_VISIBLE_DEVICES", "3");
  spcg::select_gpu_of_rank(ours);  // the launcher chose already
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "3");
  spcg::RankContext mpi;
  mpi.started_by = "Open MPI (OMPI_COMM_WORLD_*)", mpi.local_rank = 4;
  spcg::select_gpu_of_rank(mpi);  // one GPU visible: the job's launcher chose it
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "3");
  env.set("CUDA_VISIBLE_DEVICES", "4,5,6");
  spcg::select_gpu_of_rank(mpi);  // round robin over the visible list
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "5");
  env.unset("CUDA_VISIBLE_DEVICES");
  spcg::select_gpu_of_rank(mpi);
  EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "4");
}

// A one-GPU solve picks its GPU before CUDA starts: --device indexes the visible list (CUDA_VISIBLE_DEVICES, or
// the driver's GPUs), and a GPU past the count is refused naming it; the count never starts CUDA. Where no GPU is
// visible ("-1" or "" hide them all) the default changes nothing (CUDA says there is none, and a solve may run on
// the host), while an explicit --device is refused.
TEST(RankEnvironment, OneGpuProcessSeesOnlyItsDevice) {
  ScopedEnv env;
  const bool driver_files = std::filesystem::is_directory("/proc/driver/nvidia/gpus");
  env.set("CUDA_VISIBLE_DEVICES", "3,5");
  const int visible = spcg::gpus_visible_without_cuda();
  if (driver_files) EXPECT_LE(visible, 2);
  else EXPECT_EQ(visible, 2);
  if (visible == 2) {
    spcg::select_device_before_cuda(1, true);
    EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "5");
    env.set("CUDA_VISIBLE_DEVICES", "3,5");
    EXPECT_NE(error_of<UsageError>([] { spcg::select_device_before_cuda(2, true); }).find("--device 2: this machine shows 2 GPU(s)"),
              std::string::npos);
  }
  for (const char* hidden : {"-1", ""}) {
    env.set("CUDA_VISIBLE_DEVICES", hidden);
    EXPECT_EQ(spcg::gpus_visible_without_cuda(), 0) << "'" << hidden << "'";
    spcg::select_device_before_cuda(0, false);  // the default: nothing to choose from, nothing changed
    EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), hidden);
    EXPECT_NE(error_of<UsageError>([] { spcg::select_device_before_cuda(0, true); }).find("shows 0 GPU(s)"), std::string::npos);
  }
  EXPECT_NE(error_of<UsageError>([] { spcg::select_device_before_cuda(-1, true); }).find("--device must be >= 0"),
            std::string::npos);
  env.unset("CUDA_VISIBLE_DEVICES");
  if (!driver_files) {
    EXPECT_EQ(spcg::gpus_visible_without_cuda(), -1) << "no driver files: the count is CUDA's to give";
    spcg::select_device_before_cuda(0, false);
    EXPECT_EQ(std::getenv("CUDA_VISIBLE_DEVICES"), nullptr) << "the default with nothing to count: left as it is";
    spcg::select_device_before_cuda(1, true);
    EXPECT_STREQ(std::getenv("CUDA_VISIBLE_DEVICES"), "1") << "an asked-for device is set all the same";
  } else {
    const int installed = spcg::gpus_visible_without_cuda();
    ASSERT_GE(installed, 0);
    if (installed > 0) {
      spcg::select_device_before_cuda(installed - 1, true);
      EXPECT_EQ(std::string(std::getenv("CUDA_VISIBLE_DEVICES")), std::to_string(installed - 1));
    }
  }
}

// ---- the rendezvous file ----

TEST(Rendezvous, PathNamedAfterTheJobInAPrivateFolder) {
  spcg::test::TempDir tmp;
  ScopedEnv env;
  env.set("TMPDIR", tmp.path().string());
  const std::string dir = tmp.file("spcg-" + std::to_string(geteuid()));
  EXPECT_EQ(spcg::private_rendezvous_dir(), dir);
  EXPECT_EQ(spcg::rendezvous_path("/shared/job.id"), "/shared/job.id");
  EXPECT_NE(error_of<UsageError>([] { spcg::rendezvous_path(""); }).find("give --rendezvous FILE"), std::string::npos);
  env.set("SLURM_JOB_ID", "77").set("SLURM_STEP_ID", "2");
  EXPECT_EQ(spcg::rendezvous_path(""), dir + "/nccl-77.2.id");
  env.set("PMI_JOBID", "kvs_9");
  EXPECT_EQ(spcg::rendezvous_path(""), dir + "/nccl-kvs_9.id");  // the step is Slurm's only
  env.set("PMIX_NAMESPACE", "ns 1");
  EXPECT_EQ(spcg::rendezvous_path(""), dir + "/nccl-ns_1.id");
  env.set("OMPI_MCA_orte_ess_jobid", "123");
  EXPECT_EQ(spcg::rendezvous_path(""), dir + "/nccl-123.id");
  env.set("OMPI_MCA_ess_base_jobid", "12/3");
  EXPECT_EQ(spcg::rendezvous_path(""), dir + "/nccl-12_3.id");
  EXPECT_FALSE(fs::exists(dir));  // naming creates nothing
}

TEST(Rendezvous, PrivateFolderIsCreatedOwnerOnlyAndCheckedWhenThere) {
  spcg::test::TempDir tmp;
  const std::string dir = tmp.file("spcg-me");
  const mode_t old_mask = umask(0);  // the folder is 0700 whatever the umask
  spcg::make_private_dir(dir);
  umask(old_mask);
  struct stat st {};
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(st.st_uid, geteuid());
  spcg::make_private_dir(dir);  // there already, ours: fine

  const std::string open_dir = tmp.file("open");
  fs::create_directory(open_dir);
  chmod(open_dir.c_str(), 0755);
  EXPECT_NE(error_of([&] { spcg::make_private_dir(open_dir); }).find("is open to other users (mode 0755): refused"),
            std::string::npos);
  const std::string link = tmp.file("link");
  fs::create_directory_symlink(dir, link);
  EXPECT_NE(error_of([&] { spcg::make_private_dir(link); }).find("is a symbolic link: refused"), std::string::npos);
  const std::string file = tmp.file("file");
  write_bytes(file, "x");
  EXPECT_NE(error_of([&] { spcg::make_private_dir(file); }).find("is not a folder"), std::string::npos);
  EXPECT_NE(error_of([&] { spcg::make_private_dir(tmp.file("no/such/parent")); }).find("cannot create the rendezvous folder"),
            std::string::npos);
  if (geteuid() != 0) GTEST_SKIP() << "another user's folder: needs root to chown (the other cases passed)";
  const std::string theirs = tmp.file("theirs");
  fs::create_directory(theirs);
  chmod(theirs.c_str(), 0700);
  ASSERT_EQ(chown(theirs.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  EXPECT_NE(error_of([&] { spcg::make_private_dir(theirs); }).find("belongs to uid 65534, not to this user"), std::string::npos);
}

TEST(Rendezvous, WrittenOwnerOnlyAndReadBack) {
  spcg::test::TempDir tmp;
  const std::string path = tmp.file("job.id");
  const mode_t old_mask = umask(0);
  spcg::write_rendezvous(path, id_of(3), minutes_ago(1));
  umask(old_mask);
  struct stat st {};
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, static_cast<off_t>(sizeof(NcclId)));
  EXPECT_TRUE(same(spcg::read_rendezvous(path, 1, 30, minutes_ago(1)), id_of(3)));
  spcg::remove_rendezvous(path);
  EXPECT_FALSE(fs::exists(path));
  spcg::remove_rendezvous(path);  // gone already: fine
  EXPECT_NE(error_of([&] { spcg::write_rendezvous(tmp.file("no/such/dir/job.id"), id_of(3), minutes_ago(1)); })
                .find("rank 0: cannot create the rendezvous file"),
            std::string::npos);
}

TEST(Rendezvous, ReaderWaitsForTheFileThenTimesOut) {
  spcg::test::TempDir tmp;
  const std::string path = tmp.file("job.id");
  std::string message = error_of<CommunicationError>([&] { spcg::read_rendezvous(path, 2, 0.2, minutes_ago(1)); });
  EXPECT_NE(message.find("rank 2: no NCCL id from rank 0 in " + path + " after 0 s (no file)"), std::string::npos) << message;
  write_bytes(path, std::string(10, 'x'));  // rank 0 still writing
  message = error_of<CommunicationError>([&] { spcg::read_rendezvous(path, 2, 0.2, minutes_ago(1)); });
  EXPECT_NE(message.find("(an incomplete file)"), std::string::npos) << message;
  fs::remove(path);
  // the file comes while the reader waits
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    spcg::write_rendezvous(path, id_of(9), minutes_ago(1));
  });
  const NcclId got = spcg::read_rendezvous(path, 1, 60, minutes_ago(1));
  writer.join();
  EXPECT_TRUE(same(got, id_of(9)));
}

// A file left by a crashed job with the same id: never read as this job's; rank 0 replaces it.
TEST(Rendezvous, StaleFileIsNotReadAndIsReplaced) {
  spcg::test::TempDir tmp;
  const std::string path = tmp.file("job.id");
  spcg::write_rendezvous(path, id_of(1), minutes_ago(120));
  age(path, 3600);
  const std::string message = error_of<CommunicationError>([&] { spcg::read_rendezvous(path, 1, 0.2, minutes_ago(1)); });
  EXPECT_NE(message.find("only a file older than this job"), std::string::npos) << message;
  spcg::write_rendezvous(path, id_of(2), minutes_ago(1));
  EXPECT_TRUE(same(spcg::read_rendezvous(path, 1, 30, minutes_ago(1)), id_of(2)));
  // a fresh file of ours is another job's (same id): rank 0 refuses it rather than take it over
  EXPECT_NE(error_of([&] { spcg::write_rendezvous(path, id_of(3), minutes_ago(1)); }).find("was written after this job started"),
            std::string::npos);
  EXPECT_TRUE(same(spcg::read_rendezvous(path, 1, 30, minutes_ago(1)), id_of(2)));
}

// A link in place of the file is never followed, by rank 0 or a reader; what it points to is untouched.
TEST(Rendezvous, SymlinkInPlaceIsRefused) {
  spcg::test::TempDir tmp;
  const std::string path = tmp.file("job.id"), target = tmp.file("target");
  write_bytes(target, std::string(sizeof(NcclId), 'T'));
  fs::create_symlink(target, path);
  std::string message = error_of([&] { spcg::write_rendezvous(path, id_of(1), minutes_ago(1)); });
  EXPECT_NE(message.find("rank 0: " + path + " is a symbolic link: refused"), std::string::npos) << message;
  EXPECT_EQ(read_text(target), std::string(sizeof(NcclId), 'T'));
  message = error_of<CommunicationError>([&] { spcg::read_rendezvous(path, 1, 30, minutes_ago(1)); });  // at once
  EXPECT_NE(message.find("rank 1: " + path + " is a symbolic link: refused"), std::string::npos) << message;
  fs::remove(path);
  fs::create_symlink(tmp.file("dangling"), path);  // a link to nothing: O_EXCL sees it, nothing is created there
  EXPECT_NE(error_of([&] { spcg::write_rendezvous(path, id_of(1), minutes_ago(1)); }).find("symbolic link"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp.file("dangling")));
}

TEST(Rendezvous, OddFilesAreRefused) {
  spcg::test::TempDir tmp;
  const std::string fifo = tmp.file("fifo.id");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { spcg::read_rendezvous(fifo, 1, 30, minutes_ago(1)); }).find("is not a regular file"), std::string::npos);
  EXPECT_NE(error_of([&] { spcg::write_rendezvous(fifo, id_of(1), minutes_ago(1)); }).find("is not a regular file"),
            std::string::npos);
  const std::string big = tmp.file("big.id");
  write_bytes(big, std::string(sizeof(NcclId) + 1, 'x'));
  EXPECT_NE(error_of([&] { spcg::read_rendezvous(big, 1, 30, minutes_ago(1)); }).find("is not a rendezvous file (129 bytes"),
            std::string::npos);
  const std::string unreadable_dir = tmp.file("dir.id");
  fs::create_directory(unreadable_dir);
  EXPECT_NE(error_of([&] { spcg::read_rendezvous(unreadable_dir, 1, 30, minutes_ago(1)); }).find("is not a regular file"),
            std::string::npos);
}

TEST(Rendezvous, AnotherUsersFileIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user (chown to nobody)";
  spcg::test::TempDir tmp;
  const std::string path = tmp.file("job.id");
  write_bytes(path, std::string(sizeof(NcclId), 'N'));
  ASSERT_EQ(chown(path.c_str(), kNobody, kNobody), 0) << std::strerror(errno);
  std::string message = error_of<CommunicationError>([&] { spcg::read_rendezvous(path, 1, 30, minutes_ago(1)); });
  EXPECT_NE(message.find("rank 1: " + path + " belongs to uid 65534, not to this user"), std::string::npos) << message;
  age(path, 3600);  // old as well: still another user's, not ours to replace
  message = error_of([&] { spcg::write_rendezvous(path, id_of(1), minutes_ago(1)); });
  EXPECT_NE(message.find("belongs to uid 65534"), std::string::npos) << message;
  EXPECT_EQ(read_text(path), std::string(sizeof(NcclId), 'N'));
}

// share_unique_id as MPI ranks use it (ranks as threads), at --rendezvous FILE and at the default path; rank 0
// removes the file once every rank has read it (end_rendezvous), another rank never does.
TEST(Rendezvous, RanksShareTheIdThroughTheFile) {
  spcg::test::TempDir tmp;
  ScopedEnv env;
  env.set("TMPDIR", tmp.path().string()).set("OMPI_MCA_ess_base_jobid", "4242");
  for (const std::string given : {tmp.file("given.id"), std::string()}) {
    const std::string path = spcg::rendezvous_path(given);
    std::vector<NcclId> got(3);
    spcg::test::rethrow_first(spcg::test::on_threads(3, [&](int rank) {
      spcg::RankContext r;
      r.rank = rank, r.size = 3, r.started_by = "Open MPI (OMPI_COMM_WORLD_*)";
      got[static_cast<size_t>(rank)] = spcg::share_unique_id(r, given, 60, [] { return id_of(42); });
    }));
    for (const NcclId& id : got) EXPECT_TRUE(same(id, id_of(42)));
    ASSERT_TRUE(fs::exists(path)) << path;
    spcg::RankContext other;
    other.rank = 1, other.size = 3, other.started_by = "Open MPI (OMPI_COMM_WORLD_*)";
    spcg::end_rendezvous(other, given);
    EXPECT_TRUE(fs::exists(path));
    spcg::RankContext zero = other;
    zero.rank = 0;
    spcg::end_rendezvous(zero, given);
    EXPECT_FALSE(fs::exists(path));
  }
  struct stat st {};
  ASSERT_EQ(lstat(spcg::private_rendezvous_dir().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // no job id and no --rendezvous: a usage error
  env.unset("OMPI_MCA_ess_base_jobid");
  spcg::RankContext r;
  r.rank = 1, r.size = 2, r.started_by = "Open MPI (OMPI_COMM_WORLD_*)";
  EXPECT_NE(error_of<UsageError>([&] { spcg::share_unique_id(r, "", 1, [] { return id_of(1); }); }).find("--rendezvous FILE"),
            std::string::npos);
}

// Our launcher's ranks take the id over pipes: rank 0 writes it to each, the others read theirs.
TEST(Rendezvous, LauncherRanksShareTheIdOverPipes) {
  int p1[2], p2[2];
  ASSERT_EQ(pipe(p1), 0);
  ASSERT_EQ(pipe(p2), 0);
  std::vector<NcclId> got(3);
  spcg::test::rethrow_first(spcg::test::on_threads(3, [&](int rank) {
    spcg::RankContext r;
    r.rank = rank, r.size = 3, r.started_by = "spcg --gpus";
    if (rank == 0) r.id_fds = {p1[1], p2[1]};
    else r.id_fd = rank == 1 ? p1[0] : p2[0];
    got[static_cast<size_t>(rank)] = spcg::share_unique_id(r, "", 60, [] { return id_of(7); });
    spcg::end_rendezvous(r, "");  // nothing to remove
  }));
  for (const NcclId& id : got) EXPECT_TRUE(same(id, id_of(7)));

  spcg::RankContext r;
  r.rank = 1, r.size = 2, r.started_by = "spcg --gpus";
  EXPECT_NE(error_of([&] { spcg::share_unique_id(r, "", 1, [] { return id_of(1); }); }).find("rank 1: the launcher gave no pipe"),
            std::string::npos);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  r.id_fd = p[0];
  EXPECT_NE(error_of([&] { spcg::share_unique_id(r, "", 0.2, [] { return id_of(1); }); }).find("rank 0 sent no NCCL id in time"),
            std::string::npos);
  close(p[0]), close(p[1]);
  ASSERT_EQ(pipe(p), 0);
  close(p[1]);  // rank 0 ended first
  r.id_fd = p[0];
  EXPECT_NE(error_of([&] { spcg::share_unique_id(r, "", 30, [] { return id_of(1); }); }).find("rank 0 ended before sending"),
            std::string::npos);
  close(p[0]);
  r.id_fd = open(".", O_RDONLY | O_DIRECTORY);  // readable, but no pipe: the read fails
  ASSERT_GE(r.id_fd, 0);
  const int dir_fd = r.id_fd;
  EXPECT_NE(error_of([&] { spcg::share_unique_id(r, "", 30, [] { return id_of(1); }); }).find("rank 1: reading the NCCL id: "),
            std::string::npos);
  close(dir_fd);
  ASSERT_EQ(pipe(p), 0);
  close(p[0]);  // a rank that ended before reading: rank 0's write fails (SIGPIPE ignored for the test)
  spcg::RankContext zero;
  zero.started_by = "spcg --gpus", zero.size = 2, zero.id_fds = {p[1]};
  struct sigaction ignore {}, old {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &old);
  EXPECT_NE(error_of([&] { spcg::share_unique_id(zero, "", 1, [] { return id_of(1); }); }).find("rank 0: handing out the NCCL id"),
            std::string::npos);
  sigaction(SIGPIPE, &old, nullptr);
  close(p[1]);
}

// ---- the launcher (fake ranks) ----

// The stand-in rank: SPCG_FAKE_RANK, else beside this test (a copy of the build carried elsewhere), else the build's.
std::string fake_rank_binary() {
  if (const char* e = std::getenv("SPCG_FAKE_RANK")) return e;
  const fs::path beside = fs::read_symlink("/proc/self/exe").parent_path() / "fake_rank";
  return fs::exists(beside) ? beside.string() : SPCG_FAKE_RANK;
}

class Launcher : public ::testing::Test {
 protected:
  void SetUp() override { env_.set("FAKE_RANK_DIR", dir_.path().string()); }
  spcg::LaunchOutcome launch(int ranks, const std::vector<std::string>& args, double grace_s = 5.0,
                             std::vector<std::string> devices = {}) {
    spcg::RankLaunch how;
    how.program = fake_rank_binary();
    how.grace_s = grace_s;
    how.devices = std::move(devices);
    return spcg::run_ranks(ranks, args, how);
  }
  std::map<std::string, std::string> env_of(int rank) {
    std::map<std::string, std::string> out;
    std::ifstream f(dir_.file("env-" + std::to_string(rank)));
    for (std::string line; std::getline(f, line);) out[line.substr(0, line.find('='))] = line.substr(line.find('=') + 1);
    return out;
  }
  spcg::test::TempDir dir_;
  ScopedEnv env_;
};

TEST_F(Launcher, EveryRankGetsItsVariablesAndItsGpu) {
  env_.set("SPCG_ID_FD", "99");  // the launcher's own (it may be a rank itself) never reach its ranks
  const spcg::LaunchOutcome out = launch(3, {"*=env,id"}, 5.0, {"7", "9"});
  EXPECT_EQ(out.status, 0);
  EXPECT_EQ(out.first_failed, -1);
  EXPECT_EQ(out.rank_status, (std::vector<int>{0, 0, 0}));
  for (int r = 0; r < 3; ++r) {
    auto e = env_of(r);
    EXPECT_EQ(e["SPCG_RANK"], std::to_string(r));
    EXPECT_EQ(e["SPCG_RANKS"], "3");
    EXPECT_EQ(e["SPCG_LOCAL_RANK"], std::to_string(r));
    EXPECT_EQ(e["CUDA_VISIBLE_DEVICES"], r == 1 ? "9" : "7");  // round robin
    if (r == 0) {
      EXPECT_EQ(e.count("SPCG_ID_FD"), 0u);
      EXPECT_EQ(std::count(e["SPCG_ID_FDS"].begin(), e["SPCG_ID_FDS"].end(), ','), 1) << e["SPCG_ID_FDS"];
    } else {
      EXPECT_EQ(e.count("SPCG_ID_FDS"), 0u);
      EXPECT_FALSE(e["SPCG_ID_FD"].empty());
    }
  }
  // no devices given: CUDA_VISIBLE_DEVICES is left as it is
  env_.set("CUDA_VISIBLE_DEVICES", "5");
  EXPECT_EQ(launch(1, {"*=env"}).status, 0);
  EXPECT_EQ(env_of(0)["CUDA_VISIBLE_DEVICES"], "5");
}

// 3 (did not converge) ends no other rank: each finishes and the job's status is 3.
TEST_F(Launcher, NotConvergedEndsNoOtherRank) {
  const spcg::LaunchOutcome out = launch(3, {"0=ready,exit:3", "1=gone:0,sleep:0.3,exit:0", "2=gone:0,sleep:0.3,exit:3"});
  EXPECT_EQ(out.status, 3);
  EXPECT_EQ(out.first_failed, -1);
  EXPECT_EQ(out.rank_status, (std::vector<int>{3, 0, 3}));  // 143 here would mean a SIGTERM after rank 0's 3
}

// A failing rank: the others get SIGTERM; the job's status is the failing rank's; one line names it.
TEST_F(Launcher, FailureEndsTheOtherRanks) {
  testing::internal::CaptureStderr();
  const spcg::LaunchOutcome out = launch(3, {"1=wait:0,wait:2,exit:4", "*=ready,sleep:60"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.status, 4);
  EXPECT_EQ(out.first_failed, 1);
  EXPECT_EQ(out.rank_status, (std::vector<int>{128 + SIGTERM, 4, 128 + SIGTERM}));
  EXPECT_NE(err.find("spcg solve: rank 1 of 3 failed (exit status 4); the other ranks were ended"), std::string::npos) << err;
}

// A rank that ignores SIGTERM gets SIGKILL after the grace period.
TEST_F(Launcher, RankIgnoringSigtermIsKilled) {
  testing::internal::CaptureStderr();
  const spcg::LaunchOutcome out = launch(3, {"0=wait:1,wait:2,exit:1", "1=ignore-term,ready,sleep:60", "2=ready,sleep:60"}, 0.5);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.status, 1);
  EXPECT_EQ(out.first_failed, 0);
  EXPECT_EQ(out.rank_status, (std::vector<int>{1, 128 + SIGKILL, 128 + SIGTERM}));
}

// A rank ended by a signal fails with 128 + its number; a later failure does not replace the first.
TEST_F(Launcher, SignalBecomes128PlusItsNumber) {
  testing::internal::CaptureStderr();
  const spcg::LaunchOutcome out = launch(2, {"0=wait:1,signal:" + std::to_string(SIGUSR1), "1=ready,sleep:60"});
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.status, 128 + SIGUSR1);
  EXPECT_EQ(out.first_failed, 0);
  EXPECT_EQ(out.rank_status[1], 128 + SIGTERM);
  EXPECT_NE(err.find("rank 0 of 2 failed (exit status " + std::to_string(128 + SIGUSR1) + ")"), std::string::npos) << err;
}

TEST_F(Launcher, ProgramThatCannotStartFailsWith127) {
  testing::internal::CaptureStderr();
  spcg::RankLaunch how;
  how.program = dir_.file("no-such-program");
  const spcg::LaunchOutcome out = spcg::run_ranks(2, {}, how);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.status, 127);
  EXPECT_NE(err.find("launcher: cannot start rank"), std::string::npos) << err;
  EXPECT_THROW(spcg::run_ranks(0, {}, how), UsageError);
}

// Out of descriptors while making the id's pipes: an error, no rank started, no descriptor left open.
TEST_F(Launcher, PipeFailureLeavesNothingOpen) {
  auto open_fds = [] {
    std::vector<int> fds;
    for (const auto& e : fs::directory_iterator("/proc/self/fd")) fds.push_back(std::stoi(e.path().filename().string()));
    return fds;  // (the iterator's own descriptor included: the same in every call)
  };
  const std::vector<int> before = open_fds();
  const int highest = *std::max_element(before.begin(), before.end());
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  struct rlimit low = old;
  low.rlim_cur = static_cast<rlim_t>(highest) + 5;  // a few free numbers: fewer than the pipes need
  const int free_numbers = highest + 5 - static_cast<int>(before.size());
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const std::string message = error_of([&] { launch(free_numbers + 10, {"*=exit:0"}); });
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  EXPECT_NE(message.find("launcher: pipe: "), std::string::npos) << message;
  EXPECT_EQ(open_fds(), before);
}

TEST_F(Launcher, RefusesMoreGpusThanTheMachineShows) {
  std::string why;
  if (spcg::test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present";
  const std::string message = error_of<UsageError>([] { spcg::launch_ranks(2, {"solve"}); });
  EXPECT_NE(message.find("--gpus 2: this machine shows 0 GPU(s)"), std::string::npos) << message;
  env_.set("SPCG_SHARE_GPUS", "1");  // sharing needs at least one GPU
  EXPECT_THROW(spcg::launch_ranks(2, {"solve"}), UsageError);
}

// Rank 0's rendezvous file goes on every exit path before end_rendezvous: a normal exit, an error exit, SIGTERM.
TEST_F(Launcher, RendezvousFileIsRemovedOnEveryExitPath) {
  const std::string path = dir_.file("job.id");
  EXPECT_EQ(launch(1, {"0=rendezvous:" + path + ",ready,exit:0"}).status, 0);
  EXPECT_TRUE(fs::exists(dir_.file("ready-0")));  // it was written (ready comes after)
  EXPECT_FALSE(fs::exists(path));
  fs::remove(dir_.file("ready-0"));
  testing::internal::CaptureStderr();
  EXPECT_EQ(launch(1, {"0=rendezvous:" + path + ",ready,exit:1"}).status, 1);
  EXPECT_FALSE(fs::exists(path));
  fs::remove(dir_.file("ready-0"));
  // rank 0 ended by SIGTERM (the launcher's, after rank 1 failed) while the others would still read the file
  const spcg::LaunchOutcome out = launch(2, {"0=rendezvous:" + path + ",ready,sleep:60", "1=wait:0,exit:2"});
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(out.status, 2);
  EXPECT_EQ(out.rank_status[0], 128 + SIGTERM);
  EXPECT_FALSE(fs::exists(path));
  // a rank 0 that finds a live file of another job neither uses nor removes it
  write_bytes(path, std::string(sizeof(NcclId), 'L'));
  testing::internal::CaptureStderr();
  EXPECT_EQ(launch(1, {"0=rendezvous:" + path}).status, 1);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("was written after this job started"), std::string::npos) << err;
  EXPECT_EQ(read_text(path), std::string(sizeof(NcclId), 'L'));
}

}  // namespace
