#pragma once
// Per-kernel accounting with CUDA events and NVTX ranges of the same names. With timing off it only emits the
// NVTX range, so a summary run times whole phases at no per-kernel cost.
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <vector>

#include "spcg/kernel_stat.hpp"
#include "kernels/nvtx.hpp"

namespace spcg {

class KernelTimer {
 public:
  KernelTimer(bool enabled, cudaStream_t stream) : enabled_(enabled), stream_(stream) {}
  KernelTimer(const KernelTimer&) = delete;
  KernelTimer& operator=(const KernelTimer&) = delete;
  ~KernelTimer();

  template <class F>
  void run(const char* name, double bytes, F&& launch) {
    NvtxRange range(name);
    if (!enabled_) {
      launch();
      count(name, bytes);
      return;
    }
    cudaEvent_t a = take(), b = take();
    record(a);
    launch();
    record(b);
    pending_.push_back({name, bytes, a, b});
  }
  // Counts a call that ran without events (inside a CUDA graph, or timing off).
  void count(const char* name, double bytes, int64_t calls = 1);
  // Folds in a finished stat under `name` (e.g. the kernels of a nested solve).
  void add(const std::string& name, const KernelStat& stat);
  void collect();  // synchronises, folds pending event pairs into the stats, recycles events
  std::vector<KernelStat> stats() const;
  bool enabled() const { return enabled_; }
  int64_t events_recorded() const { return events_recorded_; }

 private:
  struct Pending {
    std::string name;
    double bytes;
    cudaEvent_t a, b;
  };
  cudaEvent_t take();
  void record(cudaEvent_t e);
  bool enabled_;
  cudaStream_t stream_;
  std::vector<cudaEvent_t> free_;
  std::vector<Pending> pending_;
  std::map<std::string, KernelStat> stats_;
  std::vector<std::string> order_;
  int64_t events_recorded_ = 0;
};

// Device time one event record adds between two back-to-back kernels, in ms (measured once per process).
double event_overhead_ms();

}  // namespace spcg
