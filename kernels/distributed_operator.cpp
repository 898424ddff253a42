#include "distributed_operator.hpp"

#include "cuda_check.hpp"
#include "registry.hpp"
#include "vector_ops.hpp"

namespace spcg {

DistributedOperator::DistributedOperator(const RankBlocks& blocks, Communicator& comm, const OperatorOptions& options)
    : local_(blocks.local), halo_(blocks.halo), comm_(comm) {
  local_setup_ = std::make_unique<MatrixSetup>(local_);
  local_op_ = make_operator("auto", *local_setup_, options);
  halo_setup_ = std::make_unique<MatrixSetup>(halo_);
  halo_op_ = make_operator("csr-vector", *halo_setup_, options);
  std::vector<int32_t> rows;
  size_t offset = 0;
  for (const HaloPlan::Transfer& t : blocks.plan.send) rows.insert(rows.end(), t.rows.begin(), t.rows.end());
  send_rows_ = DeviceArray<int32_t>(rows, "distributed send rows");
  send_x_ = DeviceArray<double>(rows.size(), "distributed send buffer");
  halo_x_ = DeviceArray<double>(blocks.plan.halo_columns.size(), "distributed halo x");
  for (const HaloPlan::Transfer& t : blocks.plan.send) {
    sends_.push_back({t.peer, send_x_.data() + offset, t.rows.size()});
    offset += t.rows.size();
  }
  offset = 0;
  for (const HaloPlan::Transfer& t : blocks.plan.receive) {
    receives_.push_back({t.peer, halo_x_.data() + offset, t.rows.size()});
    offset += t.rows.size();
  }
  CHECK_CUDA(cudaStreamCreateWithFlags(&exchange_stream_, cudaStreamNonBlocking));
  CHECK_CUDA(cudaEventCreateWithFlags(&packed_, cudaEventDisableTiming));
  CHECK_CUDA(cudaEventCreateWithFlags(&exchanged_, cudaEventDisableTiming));
}

DistributedOperator::~DistributedOperator() {
  if (exchanged_) cudaEventDestroy(exchanged_);
  if (packed_) cudaEventDestroy(packed_);
  if (exchange_stream_) cudaStreamDestroy(exchange_stream_);
}

void DistributedOperator::apply(const double* x_local, double* y_local, cudaStream_t s) const {
  // pack what the peers need, then exchange on the second stream while the local product runs on s
  launch_gather(send_rows_.data(), static_cast<int64_t>(send_rows_.size()), x_local, send_x_.data(), s);
  CHECK_CUDA(cudaEventRecord(packed_, s));
  CHECK_CUDA(cudaStreamWaitEvent(exchange_stream_, packed_, 0));
  local_op_->apply(1.0, x_local, 0.0, y_local, 1, s);  // y = A_local x_local
  comm_.exchange(sends_, receives_, exchange_stream_);
  CHECK_CUDA(cudaEventRecord(exchanged_, exchange_stream_));
  CHECK_CUDA(cudaStreamWaitEvent(s, exchanged_, 0));
  halo_op_->apply(1.0, halo_x_.data(), 1.0, y_local, 1, s);  // y += A_halo x_halo
}

}  // namespace spcg
