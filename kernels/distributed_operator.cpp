#include "kernels/distributed_operator.hpp"

#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/halo_product.hpp"
#include "kernels/nvtx.hpp"
#include "kernels/precond/precond_ops.hpp"
#include "kernels/registry.hpp"
#include "kernels/solver_ops/vector_ops.hpp"

namespace spcg {

// The rank's product with the local block's FP32 copy: the same exchange and FP64 halo product around it.
class DistributedOperator::Fp32View final : public LinearOperator, public FusedDotProduct, public FusedSmoothing,
                                            public RankShare {
 public:
  Fp32View(const DistributedOperator& parent, std::unique_ptr<LinearOperator> local32)
      : LinearOperator(parent.rows(), parent.cols(), parent.nnz()), parent_(parent), local32_(std::move(local32)) {
    collective_ = true;
    info_ = local32_->setup_info();
  }
  std::string name() const override { return "distributed(" + local32_->name() + ")"; }
  std::string chosen(int k) const override { return local32_->chosen(k) + " + halo csr-vector"; }
  double bytes_per_apply(int k) const override {
    return parent_.bytes_per_apply(k) - parent_.local_operator().bytes_per_apply(k) + local32_->bytes_per_apply(k);
  }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    return parent_.apply_with_dot_local(*local32_, x, y, sink, s);
  }
  bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                      const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const override {
    if (res_in && res_in != res) return false;  // (the exchange's rows read res: not offered)
    return parent_.smoothing_step_local(*local32_, d_in, d_out, res, x, scale, c1, c2, s, rows_apart);
  }
  bool offers_smoothing_step() const override {
    return parent_.offers_smoothing_step() && ::spcg::offers_smoothing_step(*local32_);
  }
  Communicator& communicator() const override { return parent_.communicator(); }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    parent_.apply_with_local(*local32_, alpha, x, beta, y, k, s);
  }

 private:
  const DistributedOperator& parent_;
  std::unique_ptr<LinearOperator> local32_;
};

DistributedOperator::DistributedOperator(RankBlocks blocks, Communicator& comm, const OperatorOptions& options)
    : LinearOperator(blocks.local), blocks_(std::move(blocks)), comm_(comm) {
  local_setup_ = std::make_unique<MatrixSetup>(blocks_.local);
  set_up(options);
}

DistributedOperator::DistributedOperator(std::shared_ptr<const DeviceCsr> local, CompressedRows halo, HaloPlan plan,
                                         GlobalIndex row_begin, int rank, Communicator& comm, const OperatorOptions& options)
    : LinearOperator(local->rows, local->cols, local->nnz), comm_(comm) {
  if (halo.rows != static_cast<int32_t>(halo.ids.size()) || halo.row_ptr.size() != halo.ids.size() + 1)
    throw Error("distributed operator: the device halo rows are inconsistent");
  blocks_.rank = rank, blocks_.row_begin = row_begin, blocks_.row_end = row_begin + local->rows;
  blocks_.plan = std::move(plan);
  local_setup_ = std::make_unique<MatrixSetup>(std::move(local));
  set_up(options, &halo);
}

void DistributedOperator::set_up(const OperatorOptions& options, CompressedRows* halo) {
  collective_ = true;
  local_op_ = make_operator("auto", *local_setup_, options);
  info_ = local_op_->setup_info();
  if (halo) {
    nnz_ += static_cast<int64_t>(halo->cols.size());
    halo_row_ids_ = std::move(halo->ids), halo_row_ptr_ = std::move(halo->row_ptr);
    halo_cols_ = std::move(halo->cols), halo_values_ = std::move(halo->values);
  } else {  // the halo block without its empty rows
    nnz_ += blocks_.halo.nnz();
    const CsrMatrix& h = blocks_.halo;
    std::vector<int32_t> ids, ptr{0}, cols;
    std::vector<double> vals;
    for (int32_t i = 0; i < h.rows; ++i) {
      if (h.row_ptr[i] == h.row_ptr[i + 1]) continue;
      ids.push_back(i);
      cols.insert(cols.end(), h.col_idx.begin() + h.row_ptr[i], h.col_idx.begin() + h.row_ptr[i + 1]);
      vals.insert(vals.end(), h.values.begin() + h.row_ptr[i], h.values.begin() + h.row_ptr[i + 1]);
      ptr.push_back(static_cast<int32_t>(cols.size()));
    }
    halo_row_ids_ = DeviceArray<int32_t>(ids, "halo rows");
    halo_row_ptr_ = DeviceArray<int32_t>(ptr, "halo row pointers");
    halo_cols_ = DeviceArray<int32_t>(cols, "halo columns");
    halo_values_ = DeviceArray<double>(vals, "halo values");
  }
  std::vector<int32_t> rows;
  for (const HaloPlan::Send& t : blocks_.plan.send) {
    send_peers_.push_back({t.peer, rows.size(), t.rows.size()});
    rows.insert(rows.end(), t.rows.begin(), t.rows.end());
  }
  send_rows_ = DeviceArray<int32_t>(rows, "distributed send rows");
  for (const HaloPlan::Receive& t : blocks_.plan.receive) {
    receive_peers_.push_back({t.peer, halo_slots_, t.columns.size()});
    halo_slots_ += t.columns.size();
  }
  if (rows_ > 0 && ::spcg::offers_smoothing_step(*local_op_)) {  // the rows a fused smoothing step leaves apart
    halo_row_mask_ = DeviceArray<uint8_t>(static_cast<size_t>(rows_), "halo row mask");
    halo_row_mask_.zero();
    launch_mark_rows(halo_rows(), halo_row_mask_.data(), nullptr);
    CHECK_CUDA(cudaStreamSynchronize(nullptr));
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

void DistributedOperator::grow_buffers(int k, cudaStream_t s) const {
  if (k <= width_) return;
  // buffers for the widest block so far (the stream's earlier uses are done with the old ones)
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CHECK_CUDA(cudaStreamIsCapturing(s, &capturing));
  if (capturing != cudaStreamCaptureStatusNone)  // a solver's first product comes before its first batch
    throw CudaError("distributed product: width " + std::to_string(k) + " would grow its buffers inside a CUDA graph capture");
  CHECK_CUDA(cudaStreamSynchronize(s));
  CHECK_CUDA(cudaStreamSynchronize(exchange_stream_));
  send_x_ = DeviceArray<double>(send_rows_.size() * k, "distributed send buffer");
  halo_x_ = DeviceArray<double>(halo_slots_ * k, "distributed halo x");
  width_ = k;
}

const double* DistributedOperator::exchange_halo(const double* x, int k, cudaStream_t s) const {
  grow_buffers(k, s);
  std::vector<Transfer> sends, receives;
  for (const Peer& p : send_peers_) sends.push_back({p.rank, send_x_.data() + p.offset * k, p.count * k});
  for (const Peer& p : receive_peers_) receives.push_back({p.rank, halo_x_.data() + p.offset * k, p.count * k});
  launch_gather(send_rows_.data(), static_cast<int64_t>(send_rows_.size()), x, send_x_.data(), s, k);
  NvtxRange range("halo-exchange");
  comm_.exchange(sends, receives, s);
  return halo_x_.data();
}

void DistributedOperator::exchange_rows(const double* sent, double* received, int width, cudaStream_t s) const {
  std::vector<Transfer> sends, receives;
  for (const Peer& p : send_peers_) sends.push_back({p.rank, const_cast<double*>(sent) + p.offset * width, p.count * width});
  for (const Peer& p : receive_peers_) receives.push_back({p.rank, received + p.offset * width, p.count * width});
  comm_.exchange(sends, receives, s);
}

void DistributedOperator::apply_around(const double* x, double alpha, double* y, int k, const DotSink* sink,
                                       cudaStream_t s, const std::function<bool()>& local) const {
  grow_buffers(k, s);
  std::vector<Transfer> sends, receives;
  for (const Peer& p : send_peers_) sends.push_back({p.rank, send_x_.data() + p.offset * k, p.count * k});
  for (const Peer& p : receive_peers_) receives.push_back({p.rank, halo_x_.data() + p.offset * k, p.count * k});
  // pack what the peers need, then exchange on the second stream while the local product runs on s
  launch_gather(send_rows_.data(), static_cast<int64_t>(send_rows_.size()), x, send_x_.data(), s, k);
  CHECK_CUDA(cudaEventRecord(packed_, s));
  CHECK_CUDA(cudaStreamWaitEvent(exchange_stream_, packed_, 0));
  const bool add_dot = local();
  {
    NvtxRange range("halo-exchange");
    comm_.exchange(sends, receives, exchange_stream_);
  }
  CHECK_CUDA(cudaEventRecord(exchanged_, exchange_stream_));
  CHECK_CUDA(cudaStreamWaitEvent(s, exchanged_, 0));
  const HaloRows h{static_cast<int32_t>(halo_row_ids_.size()), halo_row_ids_.data(), halo_row_ptr_.data(),
                   halo_cols_.data(), halo_values_.data()};
  launch_halo_product(h, k, halo_x_.data(), alpha, y, x, add_dot ? sink : nullptr, s);  // y += alpha A_halo x_halo
}

void DistributedOperator::connect(int k) const {
  NvtxRange range("connect");
  const int width = std::max(1, k);
  DeviceArray<double> x(static_cast<size_t>(rows_) * width, "connect x"), y(x.size(), "connect y"),
      sums(2 * static_cast<size_t>(width), "connect sums");
  x.zero(), sums.zero();
  apply(1.0, x.data(), 0.0, y.data(), width, exchange_stream_);
  comm_.allreduce_sum(sums.data(), sums.size(), exchange_stream_);
  comm_.wait(exchange_stream_);
}

void DistributedOperator::apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const {
  apply_with_local(*local_op_, alpha, x, beta, y, k, s);
}

bool DistributedOperator::apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const {
  return apply_with_dot_local(*local_op_, x, y, sink, s);
}

void DistributedOperator::apply_with_local(const LinearOperator& local, double alpha, const double* x, double beta,
                                           double* y, int k, cudaStream_t s) const {
  apply_around(x, alpha, y, k, nullptr, s, [&] {
    local.apply(alpha, x, beta, y, k, s);  // no rows: no launch
    return false;
  });
}

bool DistributedOperator::apply_with_dot_local(const LinearOperator& local, const double* x, double* y,
                                               const DotSink& sink, cudaStream_t s) const {
  if (rows_ == 0) {  // no rows: this rank's part of the dot is zero (every rank calls the exchange)
    CHECK_CUDA(cudaMemsetAsync(sink.result, 0, sizeof(double), s));
    apply_around(x, 1.0, y, 1, &sink, s, [] { return true; });
    return true;
  }
  bool fused = false;
  apply_around(x, 1.0, y, 1, &sink, s, [&] {
    // y = A_local x, with p'(A_local p) in the epilogue where the local kernel has one
    fused = local.nnz() > 0 ? ::spcg::apply_with_dot(local, x, y, sink, s) : (local.apply(1.0, x, 0.0, y, 1, s), false);
    return fused;  // the halo product adds p'(A_halo p_halo)
  });
  return fused;
}

bool DistributedOperator::smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in,
                                         double* x, const double* scale, double c1, double c2, cudaStream_t s,
                                         const uint8_t* rows_apart) const {
  if (res_in && res_in != res) return false;  // (the exchange's rows read res: not offered)
  return smoothing_step_local(*local_op_, d_in, d_out, res, x, scale, c1, c2, s, rows_apart);
}

bool DistributedOperator::smoothing_step_local(const LinearOperator& local, const double* d_in, double* d_out,
                                               double* res, double* x, const double* scale, double c1, double c2,
                                               cudaStream_t s, const uint8_t* rows_apart) const {
  // (a caller's own rows apart on top of the halo rows: not offered, it runs the step apart)
  if (rows_apart || !offers_smoothing_step() || !::spcg::offers_smoothing_step(local)) return false;
  // res -= A_local d_in, the step on every row without halo entries; then res -= A_halo d_halo on those with
  bool fused = true;
  apply_around(d_in, -1.0, res, 1, nullptr, s, [&] {
    fused = ::spcg::smoothing_step(local, d_in, d_out, res, nullptr, x, scale, c1, c2, s, halo_row_mask_.data());
    if (!fused) local.apply(-1.0, d_in, 1.0, res, 1, s);
    return false;
  });
  if (!fused) throw Error("distributed smoothing step: the local kernel declined a step it offers");
  // their step, now that their res is whole
  launch_chebyshev_rows(static_cast<int32_t>(halo_row_ids_.size()), halo_row_ids_.data(), scale, res, d_in, d_out, x,
                        c1, c2, s);
  return true;
}

bool DistributedOperator::make_fp32_copy(const OperatorOptions& options, bool exact) {
  const KernelEntry* e = find_kernel(local_op_->chosen(1));
  if (!e || e->fp32_variant.empty()) return false;
  fp32_ = std::make_unique<Fp32View>(*this, make_operator(e->fp32_variant, *local_setup_, options));
  fp32_exact_ = exact;
  return true;
}

std::unique_ptr<LinearOperator> DistributedOperator::fp32_view(const OperatorOptions& options) const {
  const KernelEntry* e = find_kernel(local_op_->chosen(options.expected_k));
  if (!e || e->fp32_variant.empty()) return nullptr;
  return std::make_unique<Fp32View>(*this, make_operator(e->fp32_variant, *local_setup_, options));
}

const LinearOperator& DistributedOperator::iteration_copy() const {
  if (fp32_) return *fp32_;
  return *this;
}

}  // namespace spcg
