#pragma once
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <initializer_list>
#include <functional>
#include <thread>
#include <vector>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.hpp"

namespace spcg::test {

// The checkout (SPCG_SOURCE_DIR overrides the build-time path: the device machine runs a copy elsewhere).
inline std::string source_dir() {
  if (const char* e = std::getenv("SPCG_SOURCE_DIR")) return e;
  return SPCG_SOURCE_DIR;
}
inline std::string spcg_binary() {
  if (const char* e = std::getenv("SPCG_BINARY")) return e;
  return SPCG_BINARY;
}
// ../shared/matrices beside the checkout, or SPCG_MATRIX_DIR (the device run carries a copy).
inline std::string matrix_dir() {
  if (const char* e = std::getenv("SPCG_MATRIX_DIR")) return e;
  return source_dir() + "/../shared/matrices";
}
// Every subfolder a test reads must be there (a partial copy skips, it does not fail).
inline bool have_matrix_dirs(std::initializer_list<const char*> subdirs, std::string* missing = nullptr) {
  for (const char* d : subdirs)
    if (!std::filesystem::is_directory(matrix_dir() + "/" + d)) {
      if (missing) *missing = matrix_dir() + "/" + d;
      return false;
    }
  return true;
}
inline bool have_matrix_dir() { return have_matrix_dirs({"spd"}); }
inline std::string input(const std::string& name) { return source_dir() + "/inputs/" + name; }

inline bool gpu_available(std::string* why) { return cuda_device_available(why); }

// A folder of the test's own (unique per process and per instance, so concurrent runs in two clones never
// share a file), removed with everything in it when the test ends.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "spcg-test-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Ranks as threads (the in-process stand-in for several GPUs): body(rank) on one thread per rank. A rank that
// throws calls on_failure (a group's abort, so the others' waits end) and keeps its exception; returns each
// rank's (null: none).
inline std::vector<std::exception_ptr> on_threads(int size, const std::function<void(int)>& body,
                                                  const std::function<void()>& on_failure = {}) {
  std::vector<std::exception_ptr> failures(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        failures[static_cast<size_t>(r)] = std::current_exception();
        if (on_failure) on_failure();
      }
    });
  for (std::thread& t : threads) t.join();
  return failures;
}

inline void rethrow_first(const std::vector<std::exception_ptr>& failures) {
  for (const auto& f : failures)
    if (f) std::rethrow_exception(f);
}

}  // namespace spcg::test

// Skips the test (with the reason) on machines without a CUDA device, so CI passes there.
#define SPCG_REQUIRE_GPU()                                          \
  do {                                                              \
    std::string why_;                                               \
    if (!::spcg::test::gpu_available(&why_)) GTEST_SKIP() << why_;  \
  } while (0)

// Skips unless every named subfolder of the matrix set is there: SPCG_REQUIRE_MATRICES() needs spd/,
// SPCG_REQUIRE_MATRICES("spd", "nonspd") both.
#define SPCG_REQUIRE_MATRICES(...)                                                                         \
  do {                                                                                                     \
    std::string missing_;                                                                                  \
    if (!::spcg::test::have_matrix_dirs({"spd", ##__VA_ARGS__}, &missing_))                                \
      GTEST_SKIP() << "shared matrices not found: " << missing_ << " is missing (set SPCG_MATRIX_DIR)";     \
  } while (0)

namespace spcg::test {
// The GPU suites' fixture (one home): skips with the reason without a device; a sync in TearDown, so a fault
// of an asynchronous kernel is reported by the test that launched it.
class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override { SPCG_REQUIRE_GPU(); }
  void TearDown() override {
    std::string why;
    if (::spcg::test::gpu_available(&why)) ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
};
}  // namespace spcg::test
