#include "communicator.hpp"

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "cuda_check.hpp"
#include "device_array.hpp"
#include "vector_ops.hpp"

namespace spcg {

// ---- NCCL ----

ncclUniqueId NcclCommunicator::unique_id() {
  ncclUniqueId id;
  CHECK_NCCL(ncclGetUniqueId(&id));
  return id;
}

NcclCommunicator::NcclCommunicator(int rank, int size, const ncclUniqueId& id) : rank_(rank), size_(size) {
  if (size < 1 || rank < 0 || rank >= size)
    throw UsageError("NCCL communicator: rank " + std::to_string(rank) + " of " + std::to_string(size));
  CHECK_NCCL(ncclCommInitRank(&comm_, size, id, rank));
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_) ncclCommDestroy(comm_);  // a failing destroy in a destructor cannot be reported
}

void NcclCommunicator::allreduce_sum(double* values, size_t count, cudaStream_t s) {
  if (count == 0) return;
  CHECK_NCCL(ncclAllReduce(values, values, count, ncclDouble, ncclSum, comm_, s));
}

void NcclCommunicator::exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
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

  // Every rank posts its buffer; each sums all of them in rank order into a scratch block, and only after
  // everyone has read does it overwrite its own values.
  void allreduce_sum(double* values, size_t count, cudaStream_t s) override {
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

  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) override {
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
