// A stand-in for one rank of `spcg solve --gpus N` (tests/test_ranks.cpp runs it through the launcher,
// spcg::run_ranks). Its arguments say what each rank does: "R=STEP,STEP,..." for rank R (from SPCG_RANK) or
// "*=..." for any rank without its own; the steps run in order, and a rank that runs out of steps exits 0.
//   exit:N           exit with status N (std::exit: exit-time handlers run)
//   signal:N         end by signal N (its default action)
//   sleep:S          sleep S seconds (a hang guard for the tests: a rank nobody ends still finishes)
//   ignore-term      ignore SIGTERM from here on
//   ready            create $FAKE_RANK_DIR/ready-R holding this process's id
//   wait:Q           wait (60 s at most, then exit 98) until $FAKE_RANK_DIR/ready-Q exists
//   gone:Q           wait (60 s at most, then exit 98) until rank Q (the pid in ready-Q) is reaped by the launcher
//   env              write $FAKE_RANK_DIR/env-R: the launcher's variables of this rank, one NAME=VALUE a line
//   id               take the NCCL id as a rank does (spcg::share_unique_id over the launcher's pipes; rank 0
//                    makes a known pattern): exit 5 when the bytes read differ from it
//   rendezvous:PATH  write a rendezvous file at PATH as rank 0 of an MPI job does, and leave it to the
//                    exit-time cleanup (spcg::remove_rendezvous_at_exit)
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "apps/ranks.hpp"

namespace {

std::string dir() {
  const char* d = std::getenv("FAKE_RANK_DIR");
  return d ? d : ".";
}

spcg::NcclId pattern() {
  spcg::NcclId id;
  for (size_t i = 0; i < sizeof id.bytes; ++i) id.bytes[i] = static_cast<char>(i * 7 + 1);
  return id;
}

bool wait_for(const std::function<bool()>& done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

std::vector<std::string> split(const std::string& s, char c) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t end = s.find(c, start);
    out.push_back(s.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

int run_step(const std::string& step, const std::string& rank) {
  const size_t colon = step.find(':');
  const std::string what = step.substr(0, colon), arg = colon == std::string::npos ? "" : step.substr(colon + 1);
  if (what == "exit") std::exit(std::atoi(arg.c_str()));
  if (what == "signal") {
    const int sig = std::atoi(arg.c_str());
    signal(sig, SIG_DFL);
    raise(sig);
    return 97;  // not ended by it
  }
  if (what == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg.c_str())));
    return -1;
  }
  if (what == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    return -1;
  }
  if (what == "ready") {
    const std::string tmp = dir() + "/.ready-" + rank;
    std::ofstream(tmp) << getpid() << "\n";
    std::rename(tmp.c_str(), (dir() + "/ready-" + rank).c_str());  // whole, or not there
    return -1;
  }
  if (what == "wait") {
    const std::string f = dir() + "/ready-" + arg;
    return wait_for([&] { return access(f.c_str(), F_OK) == 0; }) ? -1 : 98;
  }
  if (what == "gone") {
    const std::string f = dir() + "/ready-" + arg;
    if (!wait_for([&] { return access(f.c_str(), F_OK) == 0; })) return 98;
    pid_t pid = 0;
    std::ifstream(f) >> pid;
    return wait_for([&] { return pid > 0 && kill(pid, 0) != 0; }) ? -1 : 98;
  }
  if (what == "env") {
    std::ofstream out(dir() + "/env-" + rank);
    for (const char* v : {"SPCG_RANK", "SPCG_RANKS", "SPCG_LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "SPCG_ID_FD", "SPCG_ID_FDS"})
      if (const char* x = std::getenv(v)) out << v << "=" << x << "\n";
    return -1;
  }
  if (what == "id") {
    const std::optional<spcg::RankContext> ctx = spcg::rank_context_from_environment();
    if (!ctx) return 4;
    const spcg::NcclId id = spcg::share_unique_id(*ctx, "", 30, pattern);
    return std::memcmp(id.bytes, pattern().bytes, sizeof id.bytes) == 0 ? -1 : 5;
  }
  if (what == "rendezvous") {
    spcg::write_rendezvous(arg, pattern(), spcg::rendezvous_not_before());
    spcg::remove_rendezvous_at_exit(arg);
    return -1;
  }
  std::fprintf(stderr, "fake_rank: unknown step '%s'\n", step.c_str());
  return 96;
}

}  // namespace

int main(int argc, char** argv) {
  const char* r = std::getenv("SPCG_RANK");
  const std::string rank = r ? r : "0";
  std::string steps;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind(rank + "=", 0) == 0) steps = a.substr(rank.size() + 1);
    else if (a.rfind("*=", 0) == 0 && steps.empty()) steps = a.substr(2);
  }
  try {
    for (const std::string& step : split(steps, ','))
      if (!step.empty())
        if (const int code = run_step(step, rank); code >= 0) return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fake_rank %s: %s\n", rank.c_str(), e.what());
    return 1;
  }
  return 0;
}
