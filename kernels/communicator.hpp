#pragma once
// The ranks' communication for the multi-GPU solvers (issue #25; ../shared/design.md: one process per GPU, row
// blocks, halo and reductions over NCCL): sums over the ranks and point-to-point transfers of device buffers,
// in stream order. NcclCommunicator is the product. An InProcessGroup's communicators (threads of one process
// on the one GPU) stand in for it in tests: NCCL refuses two ranks on one device, and the machines with
// several GPUs are not always lent.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <memory>
#include <vector>

namespace spcg {

// One transfer of `count` doubles with rank `peer`: sent from, or received into, `data` (device memory).
struct Transfer {
  int peer = 0;
  double* data = nullptr;
  size_t count = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // values[0..count) <- their sum over the ranks; every rank gets the same bits.
  virtual void allreduce_sum(double* values, size_t count, cudaStream_t s) = 0;
  // This rank's sends and receives as one group (no deadlock whatever the order of the lists).
  virtual void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) = 0;
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
  void allreduce_sum(double* values, size_t count, cudaStream_t s) override;  // NCCL's order: fixed per topology
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& receives, cudaStream_t s) override;

 private:
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
};

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
