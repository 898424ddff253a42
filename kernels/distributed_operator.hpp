#pragma once
// One rank's share of y = A x on several GPUs (issue #25): y_local = A_local x_local + A_halo x_halo. The
// entries of x_local that the peers need are packed and exchanged on a stream of their own while A_local x_local
// runs; the halo product follows the exchange. The blocks and the plan come from sparse/partition.hpp; the
// local block's kernel is the registry's auto, the halo block's csr-vector (a few rows' worth of columns).
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "communicator.hpp"
#include "device_array.hpp"
#include "linear_operator.hpp"
#include "matrix_setup.hpp"
#include "partition.hpp"

namespace spcg {

class DistributedOperator {
 public:
  DistributedOperator(const RankBlocks& blocks, Communicator& comm, const OperatorOptions& options = {});
  ~DistributedOperator();
  DistributedOperator(const DistributedOperator&) = delete;
  DistributedOperator& operator=(const DistributedOperator&) = delete;

  int32_t local_rows() const { return local_.rows; }
  int64_t halo_entries() const { return static_cast<int64_t>(halo_x_.size()); }
  // y_local = A's rows of this rank times x (x_local: this rank's entries). Every rank calls it together.
  void apply(const double* x_local, double* y_local, cudaStream_t s) const;

 private:
  CsrMatrix local_, halo_;  // host copies the setups read
  std::unique_ptr<MatrixSetup> local_setup_, halo_setup_;
  std::unique_ptr<LinearOperator> local_op_, halo_op_;
  Communicator& comm_;
  DeviceArray<int32_t> send_rows_;  // every peer's rows, in the plan's order
  mutable DeviceArray<double> send_x_, halo_x_;
  std::vector<Transfer> sends_, receives_;
  cudaStream_t exchange_stream_ = nullptr;
  cudaEvent_t packed_ = nullptr, exchanged_ = nullptr;
};

}  // namespace spcg
