#pragma once
// Runs a batch of solver iterations either as plain launches (per-kernel events possible) or captured once into
// a CUDA graph and replayed, which removes launch overhead for small matrices. Kernel call counts of a replayed
// graph are credited to the timer per replay.
#include <cuda_runtime.h>

#include <functional>

#include "cuda_check.hpp"
#include "kernel_timer.hpp"

namespace spcg {

class CudaStream {
 public:
  CudaStream() { CHECK_CUDA(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(s_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  operator cudaStream_t() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

class IterationRunner {
 public:
  IterationRunner(cudaStream_t s, bool use_graph, KernelTimer& timer) : s_(s), graph_(use_graph), timer_(timer) {}
  ~IterationRunner() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (g_) cudaGraphDestroy(g_);
  }
  IterationRunner(const IterationRunner&) = delete;
  IterationRunner& operator=(const IterationRunner&) = delete;

  // enqueue(timer) launches one batch of iterations through the given timer.
  void run(const std::function<void(KernelTimer&)>& enqueue) {
    if (!graph_) {
      enqueue(timer_);
      return;
    }
    if (!exec_) {
      KernelTimer capture_counts(false, s_);
      CHECK_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(capture_counts);
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s_, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      CHECK_CUDA(cudaStreamEndCapture(s_, &g_));
      CHECK_CUDA(cudaGraphInstantiate(&exec_, g_, 0));
      per_batch_ = capture_counts.stats();
    }
    CHECK_CUDA(cudaGraphLaunch(exec_, s_));
    for (const auto& k : per_batch_) timer_.count(k.name.c_str(), k.bytes_per_call, k.calls);
  }
  bool uses_graph() const { return graph_; }

 private:
  cudaStream_t s_;
  bool graph_;
  KernelTimer& timer_;
  cudaGraph_t g_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  std::vector<KernelStat> per_batch_;
};

}  // namespace spcg
