#include "kernels/kernel_timer.hpp"

#include "kernels/cuda_check.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/solver_ops/blas1.hpp"
#include "kernels/device_array.hpp"

namespace spcg {

KernelTimer::~KernelTimer() {
  for (auto& p : pending_) free_.push_back(p.a), free_.push_back(p.b);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t KernelTimer::take() {
  if (!free_.empty()) {
    cudaEvent_t e = free_.back();
    free_.pop_back();
    return e;
  }
  cudaEvent_t e;
  CHECK_CUDA(cudaEventCreate(&e));
  return e;
}

void KernelTimer::record(cudaEvent_t e) {
  CHECK_CUDA(cudaEventRecord(e, stream_));
  ++events_recorded_;
}

void KernelTimer::count(const char* name, double bytes, int64_t calls) {
  auto it = stats_.find(name);
  if (it == stats_.end()) {
    order_.push_back(name);
    it = stats_.emplace(name, KernelStat{name}).first;
  }
  it->second.calls += calls;
  it->second.total_bytes += bytes * calls;
}

void KernelTimer::add(const std::string& name, const KernelStat& stat) {
  auto it = stats_.find(name);
  if (it == stats_.end()) {
    order_.push_back(name);
    it = stats_.emplace(name, KernelStat{name}).first;
  }
  it->second.calls += stat.calls;
  it->second.total_ms += stat.total_ms;
  it->second.total_bytes += stat.total_bytes;
}

void KernelTimer::collect() {
  if (pending_.empty()) return;
  CHECK_CUDA(cudaEventSynchronize(pending_.back().b));
  for (auto& p : pending_) {
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, p.a, p.b));
    count(p.name.c_str(), p.bytes);
    stats_[p.name].total_ms += ms;
    free_.push_back(p.a), free_.push_back(p.b);
  }
  pending_.clear();
}

std::vector<KernelStat> KernelTimer::stats() const {
  std::vector<KernelStat> out;
  for (const auto& n : order_) {
    KernelStat k = stats_.at(n);
    k.bytes_per_call = k.calls ? k.total_bytes / k.calls : 0;
    out.push_back(k);
  }
  return out;
}

double event_overhead_ms() {
  static double overhead = [] {
    DeviceArray<double> buf(1024, "timer calibration");
    constexpr int kLaunches = 200;
    auto launches = [&](bool with_events) {
      std::vector<cudaEvent_t> ev;
      if (with_events) {
        ev.resize(2 * kLaunches);
        for (auto& e : ev) CHECK_CUDA(cudaEventCreate(&e));
      }
      const double ms = time_on_stream_ms(0, [&] {
        for (int i = 0; i < kLaunches; ++i) {
          if (with_events) CHECK_CUDA(cudaEventRecord(ev[2 * i], 0));
          launch_scale(0.5, buf.data(), buf.size(), 0);
          if (with_events) CHECK_CUDA(cudaEventRecord(ev[2 * i + 1], 0));
        }
      });
      for (auto& e : ev) cudaEventDestroy(e);
      return ms;
    };
    launches(true);  // warm-up
    const double plain = launches(false), timed = launches(true);
    return std::max(0.0, (timed - plain) / (2.0 * kLaunches));
  }();
  return overhead;
}

}  // namespace spcg
