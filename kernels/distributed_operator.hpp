#pragma once
// One rank's share of y = alpha A x + beta y on several GPUs (issue #25), as a LinearOperator whose rows are
// this rank's rows: y_local = alpha (A_local x_local + A_halo x_halo) + beta y_local, on n_local x k blocks.
// The rows of x_local that the peers need are packed and exchanged on a stream of their own while
// A_local x_local runs; the halo product follows the exchange. The blocks and the plan come from
// spcg/partition.hpp; the local block's kernel is the registry's auto, the halo block's the compressed-row
// product of kernels/halo_product.cu (only the rows with halo entries). apply_with_dot fuses p'q as one GPU's
// CG does: the local kernel's epilogue sums p'(A_local p), the halo product adds p'(A_halo p_halo). As a RankShare
// (ranks_of) it gives the engine the communicator its sums go over; its applies are collective.
#include <cuda_runtime.h>

#include <functional>
#include <memory>
#include <vector>

#include "kernels/communicator.hpp"
#include "kernels/device_array.hpp"
#include "kernels/halo_product.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/matrix_setup.hpp"
#include "spcg/partition.hpp"

namespace spcg {

class DistributedOperator final : public LinearOperator, public FusedDotProduct, public FusedSmoothing, public RankShare,
                                  public IterationCopy {
 public:
  // Takes the blocks over (the setups read them: a rank's share of a large system is not copied).
  DistributedOperator(RankBlocks blocks, Communicator& comm, const OperatorOptions& options = {});
  // The same with both blocks already on the device (AMG's coarse levels, split there): the local block, the halo
  // block's rows that hold entries, and the plan (spcg/partition.hpp's halo_plan); the rank's rows start at
  // row_begin. blocks() then holds the row range and the plan, its local and halo blocks empty.
  DistributedOperator(std::shared_ptr<const DeviceCsr> local, CompressedRows halo, HaloPlan plan, GlobalIndex row_begin,
                      int rank, Communicator& comm, const OperatorOptions& options = {});
  ~DistributedOperator() override;
  DistributedOperator(const DistributedOperator&) = delete;
  DistributedOperator& operator=(const DistributedOperator&) = delete;

  int32_t local_rows() const { return rows_; }
  int64_t halo_entries() const { return static_cast<int64_t>(halo_slots_); }
  int64_t send_entries() const { return static_cast<int64_t>(send_rows_.size()); }
  // The form of one rank's y = A x for the one-vector callers (the tests' first form).
  void apply(const double* x_local, double* y_local, cudaStream_t s) const {
    LinearOperator::apply(1.0, x_local, 0.0, y_local, 1, s);
  }
  using LinearOperator::apply;

  Communicator& communicator() const override { return comm_; }
  std::string name() const override { return "distributed(" + local_op_->name() + ")"; }
  std::string chosen(int k) const override { return local_op_->chosen(k) + " + halo csr-vector"; }
  double bytes_per_apply(int k) const override {
    return local_op_->bytes_per_apply(k) + 12.0 * double(halo_cols_.size()) + 4.0 * double(halo_row_ids_.size()) +
           (16.0 * double(halo_row_ids_.size()) + 8.0 * double(halo_slots_) + 16.0 * double(send_entries())) * k;
  }
  // y = A x and *sink.result = x'y (this rank's rows), with the exchange; false when the local kernel has no
  // fused epilogue (y is then made, and the caller runs its dot).
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override;
  // A smoothing step (kernels/linear_operator.hpp) with the exchange around it: the local kernel's fused step on
  // every row but those with halo entries, which it leaves at res - A_local d_in; then the halo product on them and
  // their step apart. Each row's arithmetic is that of the product and the step run apart, so the same bits.
  bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                      const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const override;
  bool offers_smoothing_step() const override { return halo_row_mask_.size() > 0; }  // (where the local kernel does)
  // One exchange at width k and one sum of 2k values (a step's largest), on zeros: NCCL connects a peer's channels
  // on its first send/receive and a collective's on its first call, which would otherwise land in the first solve
  // (measured on 4 GPUs: docs/perf-notes.md). Collective: every rank calls it. Buffers for width k stay.
  void connect(int k) const;
  const LinearOperator& local_operator() const { return *local_op_; }
  // Mixed precision: the local block's FP32-values kernel (the registry's variant of its choice) for the
  // recurrences' products, the exchange and the halo product as they are; false (nothing made) where the local
  // kernel has none. Before the setup lets the local CSR go.
  bool make_fp32_copy(const OperatorOptions& options, bool exact);
  const LinearOperator& iteration_copy() const override;  // that copy, or this operator
  // A product of its own with the local block's FP32-values kernel (AMG's finest level on ranks: its smoothing),
  // the exchange and the halo product this operator's; null where the local kernel has no variant. Needs the local
  // block's device CSR (before the setup lets it go).
  std::unique_ptr<LinearOperator> fp32_view(const OperatorOptions& options) const;
  bool copy_is_exact() const override { return fp32_exact_; }  // exact: every value (on every rank) an FP32 number
  const MatrixSetup& local_setup() const { return *local_setup_; }  // its device CSR and statistics
  const RankBlocks& blocks() const { return blocks_; }  // (local and halo empty when made from device blocks)

  // The exchange alone, for what travels with this operator's halo plan (AMG's transfers and its setup):
  // x's halo (halo_slots x k, row-major, the plan's slot order) in a buffer of this operator's that stays valid
  // until its next apply or exchange; s waits for it. Collective.
  const double* exchange_halo(const double* x, int k, cudaStream_t s) const;
  // Rows in the plan's order: `sent` holds send_entries() rows of `width` doubles (the rows send_rows() lists,
  // in that order), `received` gets halo_slots() rows of `width` doubles. Collective.
  void exchange_rows(const double* sent, double* received, int width, cudaStream_t s) const;
  const int32_t* send_rows() const { return send_rows_.data(); }
  // The halo block on the device, its rows that hold entries (kernels/halo_product.hpp).
  HaloRows halo_rows() const {
    return {static_cast<int32_t>(halo_row_ids_.size()), halo_row_ids_.data(), halo_row_ptr_.data(), halo_cols_.data(),
            halo_values_.data()};
  }
  // The exchange's buffers for blocks of k columns, made now (a CUDA graph capture may not grow them).
  void reserve(int k) const { grow_buffers(k, exchange_stream_); }
  int32_t halo_slots() const { return static_cast<int32_t>(halo_slots_); }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override;

 private:
  // The exchange around `local` (the local product on s): pack, exchange on the second stream while local
  // runs, then the halo product (with the dot's second part into sink when local returns true).
  void apply_around(const double* x, double alpha, double* y, int k, const DotSink* sink, cudaStream_t s,
                    const std::function<bool()>& local) const;
  void grow_buffers(int k, cudaStream_t s) const;  // the send and halo buffers for width k
  // after local_setup_: the kernel, the halo rows (given, or compressed from blocks_.halo), the plan
  void set_up(const OperatorOptions& options, CompressedRows* halo = nullptr);
  // y = alpha (local x_local + A_halo x_halo) + beta y, with `local` the rank's block kernel (FP64 or its copy)
  void apply_with_local(const LinearOperator& local, double alpha, const double* x, double beta, double* y, int k,
                        cudaStream_t s) const;
  bool apply_with_dot_local(const LinearOperator& local, const double* x, double* y, const DotSink& sink,
                            cudaStream_t s) const;
  bool smoothing_step_local(const LinearOperator& local, const double* d_in, double* d_out, double* res, double* x,
                            const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const;
  class Fp32View;
  std::unique_ptr<Fp32View> fp32_;
  bool fp32_exact_ = false;

 private:
  RankBlocks blocks_;  // the host blocks the setups read
  std::unique_ptr<MatrixSetup> local_setup_;
  std::unique_ptr<LinearOperator> local_op_;
  DeviceArray<int32_t> halo_row_ids_, halo_row_ptr_, halo_cols_;  // the halo block's non-empty rows
  DeviceArray<double> halo_values_;
  DeviceArray<uint8_t> halo_row_mask_;  // 1 on the halo rows, where the local kernel fuses smoothing steps
  Communicator& comm_;
  DeviceArray<int32_t> send_rows_;  // every peer's rows, in the plan's order
  size_t halo_slots_ = 0;
  struct Peer {
    int rank;
    size_t offset, count;  // in rows
  };
  std::vector<Peer> send_peers_, receive_peers_;
  mutable DeviceArray<double> send_x_, halo_x_;  // send_rows x k, halo_slots x k; grown for the widest k
  mutable int width_ = 0;
  cudaStream_t exchange_stream_ = nullptr;
  cudaEvent_t packed_ = nullptr, exchanged_ = nullptr;
};

}  // namespace spcg
