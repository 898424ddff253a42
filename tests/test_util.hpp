#pragma once
#include <gtest/gtest.h>

#include <cstdlib>
#include <exception>
#include <functional>
#include <thread>
#include <vector>
#include <filesystem>
#include <string>

#include "cuda_check.hpp"

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
inline bool have_matrix_dir() { return std::filesystem::is_directory(matrix_dir() + "/spd"); }
inline std::string input(const std::string& name) { return source_dir() + "/inputs/" + name; }

inline bool gpu_available(std::string* why) { return cuda_device_available(why); }

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

#define SPCG_REQUIRE_MATRICES()                                                                       \
  do {                                                                                                \
    if (!::spcg::test::have_matrix_dir())                                                             \
      GTEST_SKIP() << "shared matrices not found at " << ::spcg::test::matrix_dir() << " (set SPCG_MATRIX_DIR)"; \
  } while (0)
