#pragma once
// The ranks' communication for the multi-GPU solvers (issue #25; ../shared/design.md: one process per GPU, row
// blocks, halo and reductions over NCCL): sums over the ranks and point-to-point transfers of device buffers,
// in stream order. NcclCommunicator is the product. An InProcessGroup's communicators (threads of one process
// on the one GPU) stand in for it in tests: NCCL refuses two ranks on one device, and the machines with
// several GPUs are not always lent.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "spcg/communication_stats.hpp"

namespace spcg {

// One transfer of `count` doubles with rank `peer`: sent from, or received into, `data` (device memory).
struct Transfer {
  int peer = 0;
  double* data = nullptr;
  size_t count = 0;
};

class Communicator {
 public:
  Communicator();
  virtual ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // values[0..count) <- their sum over the ranks, taken in rank order: every rank gets the same bits, and the
  // same inputs give the same bits on any run.
  void allreduce_sum(double* values, size_t count, cudaStream_t s);
  // This rank's sends and receives as one group (no deadlock whatever the order of the lists).
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s);
  // Waits for the stream's work, sums and exchanges included. NCCL: ends with CommunicationError (the
  // communicator aborted) when NCCL reports an error or nothing completes within the timeout, so a rank whose
  // peer died or hangs does not wait forever.
  virtual void wait(cudaStream_t s);
  // Whether its sums and exchanges may be captured into a CUDA graph (NCCL's may; the in-process stand-in waits
  // on the host).
  virtual bool capturable() const { return false; }
  // Time every later call with events (costs two event records per call).
  void set_timing(bool on) { timing_ = on; }
  bool timing() const { return timing_; }
  // The counts so far; waits for the timed calls' events.
  CommunicationStats stats() const;
  // Calls a CUDA graph replays: counted once per replay (a capture counted them once, as they were enqueued).
  void count_replayed(const CommunicationStats& per_replay);

 protected:
  virtual void sum_impl(double* values, size_t count, cudaStream_t s) = 0;
  virtual void exchange_impl(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives,
                             cudaStream_t s) = 0;

 private:
  struct Timing;
  bool timing_ = false;
  mutable CommunicationStats stats_;
  std::unique_ptr<Timing> timed_;
};

// NCCL across processes, one GPU each (the current device). Rank 0 makes the id; every rank gets a copy of it
// (through the launcher's pipe, or MPI).
class NcclCommunicator final : public Communicator {
 public:
  static ncclUniqueId unique_id();
  NcclCommunicator(int rank, int size, const ncclUniqueId& id);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Polls the stream and NCCL's error state; the timeout is SPCG_COMM_TIMEOUT_S seconds (default 600).
  void wait(cudaStream_t s) override;
  bool capturable() const override { return true; }

 protected:
  // An all-gather, then each rank sums the ranks' values in rank order (the solvers' sums are a few values:
  // the gather costs what an all-reduce does, and the order is ours, not the topology's).
  void sum_impl(double* values, size_t count, cudaStream_t s) override;
  void exchange_impl(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) override;

 private:
  int rank_, size_;
  double timeout_s_ = 600;
  ncclComm_t comm_ = nullptr;
  struct Gathered;
  std::unique_ptr<Gathered> gathered_;
};

// Waits for s through `ranks` (its timeout and error checks) when there are ranks, else synchronises.
void wait_for_stream(cudaStream_t s, Communicator* ranks);

// `size` communicators for threads of one process on the current device: thread r uses communicator(r). Sums
// are taken in rank order. A rank that fails calls abort(): the others' next step throws CommunicationError
// instead of waiting; so does a step that waits longer than `timeout_s`.
class InProcessGroup {
 public:
  explicit InProcessGroup(int size, double timeout_s = 60);
  ~InProcessGroup();
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;
  Communicator& communicator(int rank);
  void abort();

  struct Shared;

 private:
  std::unique_ptr<Shared> shared_;
  std::vector<std::unique_ptr<Communicator>> members_;
};

}  // namespace spcg
