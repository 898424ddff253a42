#include "kernels/communicator.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "kernels/solver_ops/vector_ops.hpp"

namespace spcg {

// ---- counting and timing, for every communicator ----

struct Communicator::Timing {
  struct Pair {
    cudaEvent_t start = nullptr, end = nullptr;
    bool sum = false;
  };
  std::vector<Pair> pending;
  ~Timing() {
    for (Pair& p : pending) cudaEventDestroy(p.start), cudaEventDestroy(p.end);
  }
  Pair record_start(bool sum, cudaStream_t s) {
    Pair p;
    p.sum = sum;
    CHECK_CUDA(cudaEventCreate(&p.start));
    CHECK_CUDA(cudaEventCreate(&p.end));
    pending.push_back(p);
    CHECK_CUDA(cudaEventRecord(p.start, s));
    return p;
  }
};

Communicator::Communicator() = default;
Communicator::~Communicator() = default;

void Communicator::allreduce_sum(double* values, size_t count, cudaStream_t s) {
  ++stats_.sums;
  stats_.sum_bytes += static_cast<int64_t>(count * sizeof(double));
  if (!timing_) return sum_impl(values, count, s);
  if (!timed_) timed_ = std::make_unique<Timing>();
  const Timing::Pair p = timed_->record_start(true, s);
  sum_impl(values, count, s);
  CHECK_CUDA(cudaEventRecord(p.end, s));
}

void Communicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) {
  ++stats_.exchanges;
  for (const Transfer& t : sends) stats_.exchange_bytes_sent += static_cast<int64_t>(t.count * sizeof(double));
  for (const Transfer& t : receives) stats_.exchange_bytes_received += static_cast<int64_t>(t.count * sizeof(double));
  if (!timing_) return exchange_impl(sends, receives, s);
  if (!timed_) timed_ = std::make_unique<Timing>();
  const Timing::Pair p = timed_->record_start(false, s);
  exchange_impl(sends, receives, s);
  CHECK_CUDA(cudaEventRecord(p.end, s));
}

void Communicator::wait(cudaStream_t s) { CHECK_CUDA(cudaStreamSynchronize(s)); }

void wait_for_stream(cudaStream_t s, Communicator* ranks) {
  if (ranks) ranks->wait(s);
  else CHECK_CUDA(cudaStreamSynchronize(s));
}

CommunicationStats Communicator::stats() const {
  if (timed_) {
    for (Timing::Pair& p : timed_->pending) {
      CHECK_CUDA(cudaEventSynchronize(p.end));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, p.start, p.end));
      (p.sum ? stats_.sum_ms : stats_.exchange_ms) += ms;
      cudaEventDestroy(p.start), cudaEventDestroy(p.end);
    }
    timed_->pending.clear();
  }
  return stats_;
}

void Communicator::count_replayed(const CommunicationStats& c) {
  stats_.sums += c.sums, stats_.sum_bytes += c.sum_bytes;
  stats_.exchanges += c.exchanges;
  stats_.exchange_bytes_sent += c.exchange_bytes_sent, stats_.exchange_bytes_received += c.exchange_bytes_received;
}

// ---- NCCL ----

// NCCL's defaults for what spcg sends, set before NCCL's first call reads them (a value already in the environment
// is kept; one in nccl.conf is not, since NCCL applies that file without overwriting the environment): the sums are
// a few values and the halo exchanges a few MB point to point, which 2 channels carry as fast as NCCL's default
// (poisson3d:300 on 4 H200s: solve 276 ms against 275), while connecting them takes 87 ms instead of 1058; cuMem's
// memory import (NCCL_CUMEM_ENABLE) added ~1 s to the first connections (scripts/nccl_start_probe.sh;
// docs/perf-notes.md, "Several GPUs: the fixed costs").
struct NcclStartDefaults {
  static constexpr const char* max_channels = "2";
  static constexpr const char* cumem = "0";
};
void nccl_start_defaults() {
  static const bool once = [] {
    setenv("NCCL_MAX_NCHANNELS", NcclStartDefaults::max_channels, 0);
    setenv("NCCL_CUMEM_ENABLE", NcclStartDefaults::cumem, 0);
    return true;
  }();
  (void)once;
}

ncclUniqueId NcclCommunicator::unique_id() {
  nccl_start_defaults();
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  return id;
}

NcclCommunicator::NcclCommunicator(int rank, int size, const ncclUniqueId& id) : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw UsageError("NCCL communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
  if (const char* t = std::getenv("SPCG_COMM_TIMEOUT_S")) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (*end != '\0' || !(v > 0)) throw UsageError(std::string("SPCG_COMM_TIMEOUT_S='") + t + "' is not a positive number of seconds");
    timeout_s_ = v;
  }
  nccl_start_defaults();
  CHECK_NCCL(ncclCommInitRank(&comm_, size, id, rank));
}

void NcclCommunicator::wait(cudaStream_t s) {
  const auto start = std::chrono::steady_clock::now();
  for (unsigned spin = 0;; ++spin) {
    const cudaError_t q = cudaStreamQuery(s);
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) CHECK_CUDA(q);
    if (spin % 256 != 255) continue;  // the clock and NCCL's state every few hundred polls
    ncclResult_t async = ncclSuccess;
    CHECK_NCCL(ncclCommGetAsyncError(comm_, &async));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if ((async != ncclSuccess && async != ncclInProgress) || waited > timeout_s_) {
      ncclCommAbort(comm_);  // ends this rank's pending collectives; the communicator is unusable after
      comm_ = nullptr;
      throw CommunicationError("rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " +
                               (async != ncclSuccess && async != ncclInProgress
                                    ? std::string("NCCL failed: ") + ncclGetErrorString(async)
                                    : "no progress from the other ranks in " + std::to_string(static_cast<int>(timeout_s_)) +
                                          " s (one failed or hangs; SPCG_COMM_TIMEOUT_S sets the limit)"));
    }
    if (waited > 0.01) std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

NcclCommunicator::~NcclCommunicator() {
  gathered_.reset();
  if (comm_) ncclCommDestroy(comm_);  // a failing destroy in a destructor cannot be reported
}

// The all-gather's buffer (size x the largest count so far, at least GatheredSums::min_capacity), grown on demand:
// every sum is one ncclAllGather, whose connection connect_sums and the first solve's sums share, then each rank
// adds the slices in rank order. (Smaller sums once went through a group of size sends and receives into the larger
// stride: another set of connections, and slower per sum.) No growth happens inside a solve's iteration (the
// connect's sum is at least as large as any step's), so a batch of iterations can be captured into a CUDA graph.
struct GatheredSums {
  static constexpr size_t min_capacity = 8;  // a CG step's sums are 1 to 3 values at k = 1
};
struct NcclCommunicator::Gathered {
  DeviceArray<double> values;
  size_t capacity = 0;  // counts
};

void NcclCommunicator::sum_impl(double* values, size_t count, cudaStream_t s) {
  if (count == 0) return;
  if (!gathered_) gathered_ = std::make_unique<Gathered>();
  Gathered& g = *gathered_;
  if (g.capacity < count) {
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    CHECK_CUDA(cudaStreamIsCapturing(s, &capturing));
    if (capturing != cudaStreamCaptureStatusNone)  // a solver's start must make its largest sum before a batch
      throw CudaError("NCCL sums: a sum of " + std::to_string(count) + " values would grow the buffer inside a CUDA graph capture");
    CHECK_CUDA(cudaStreamSynchronize(s));  // the old buffer may still be read by the stream
    g.capacity = std::max(count, GatheredSums::min_capacity);
    g.values = DeviceArray<double>(g.capacity * static_cast<size_t>(size_), "NCCL gathered sums");
  }
  CHECK_NCCL(ncclAllGather(values, g.values.data(), count, ncclDouble, comm_, s));
  launch_sum_gathered(g.values.data(), size_, count, values, s);
}

void NcclCommunicator::exchange_impl(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                                     cudaStream_t s) {
  CHECK_NCCL(ncclGroupStart());
  for (const Transfer& t : sends)
    if (t.count) CHECK_NCCL(ncclSend(t.data, t.count, ncclDouble, t.peer, comm_, s));
  for (const Transfer& t : receives)
    if (t.count) CHECK_NCCL(ncclRecv(t.data, t.count, ncclDouble, t.peer, comm_, s));
  CHECK_NCCL(ncclGroupEnd());
}

// ---- the in-process stand-in ----

struct InProcessGroup::Shared {
  int size;
  std::chrono::duration<double> timeout;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  long generation = 0;
  bool broken = false;
  std::vector<const double*> posted;                                  // allreduce: each rank's values
  std::map<std::pair<int, int>, std::pair<const double*, size_t>> outbox;  // (from, to) -> send buffer

  void fail() {
    std::lock_guard<std::mutex> lock(m);
    broken = true;
    cv.notify_all();
  }
  // Every rank waits here until all have arrived; throws if the group broke or the wait timed out.
  void barrier(int rank) {
    std::unique_lock<std::mutex> lock(m);
    if (broken) throw CommunicationError("in-process group: rank " + std::to_string(rank) + ": another rank failed");
    const long my_generation = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
      return;
    }
    const bool done = cv.wait_for(lock, timeout, [&] { return generation != my_generation || broken; });
    if (broken || !done) {
      broken = true;
      cv.notify_all();
      throw CommunicationError("in-process group: rank " + std::to_string(rank) +
                               (done ? ": another rank failed" : ": the other ranks did not arrive in time"));
    }
  }
};

namespace {

class InProcessCommunicator final : public Communicator {
 public:
  InProcessCommunicator(InProcessGroup::Shared& shared, int rank) : shared_(shared), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return shared_.size; }

 protected:
  // Every rank posts its buffer; each sums all of them in rank order into a scratch block, and only after
  // everyone has read does it overwrite its own values.
  void sum_impl(double* values, size_t count, cudaStream_t s) override {
    CHECK_CUDA(cudaStreamSynchronize(s));
    {
      std::lock_guard<std::mutex> lock(shared_.m);
      shared_.posted[static_cast<size_t>(rank_)] = values;
    }
    shared_.barrier(rank_);
    DeviceArray<double> sum(count, "in-process allreduce sum");
    {
      const DeviceArray<const double*> inputs(shared_.posted, "in-process allreduce inputs");
      launch_sum_over_ranks(inputs.data(), shared_.size, count, sum.data(), s);
      CHECK_CUDA(cudaStreamSynchronize(s));
    }
    shared_.barrier(rank_);
    if (count) CHECK_CUDA(cudaMemcpyAsync(values, sum.data(), count * sizeof(double), cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
  }

  void exchange_impl(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) override {
    CHECK_CUDA(cudaStreamSynchronize(s));
    {
      std::lock_guard<std::mutex> lock(shared_.m);
      for (const Transfer& t : sends) shared_.outbox[{rank_, t.peer}] = {t.data, t.count};
    }
    shared_.barrier(rank_);
    for (const Transfer& t : receives) {
      std::pair<const double*, size_t> sent{nullptr, 0};
      {
        std::lock_guard<std::mutex> lock(shared_.m);
        const auto it = shared_.outbox.find({t.peer, rank_});
        if (it != shared_.outbox.end()) sent = it->second;
      }
      if (sent.second != t.count) {
        shared_.fail();  // the others' waits end too
        throw CommunicationError("in-process group: rank " + std::to_string(rank_) + " expected " +
                                 std::to_string(t.count) + " values from rank " + std::to_string(t.peer) + ", got " +
                                 std::to_string(sent.second));
      }
      if (t.count) CHECK_CUDA(cudaMemcpyAsync(t.data, sent.first, t.count * sizeof(double), cudaMemcpyDeviceToDevice, s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    shared_.barrier(rank_);  // every receive done before any sender reuses its buffer
    std::lock_guard<std::mutex> lock(shared_.m);
    for (const Transfer& t : sends) shared_.outbox.erase({rank_, t.peer});
  }

 private:
  InProcessGroup::Shared& shared_;
  int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int size, double timeout_s) : shared_(std::make_unique<Shared>()) {
  if (size < 1) throw UsageError("in-process group: size must be >= 1");
  shared_->size = size;
  shared_->timeout = std::chrono::duration<double>(timeout_s);
  shared_->posted.assign(static_cast<size_t>(size), nullptr);
  for (int r = 0; r < size; ++r) members_.push_back(std::make_unique<InProcessCommunicator>(*shared_, r));
}

InProcessGroup::~InProcessGroup() = default;

Communicator& InProcessGroup::communicator(int rank) { return *members_.at(static_cast<size_t>(rank)); }

void InProcessGroup::abort() { shared_->fail(); }

}  // namespace spcg
