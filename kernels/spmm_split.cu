// spmm-split: dense-row splitting (hierarchical tiling in the spirit of Yang, Buluc, Owens, "Design principles
// for sparse matrix multiplication on the GPU", Euro-Par 2018). Rows longer than split_entries are cut into
// pieces of that many entries; every piece is a work item for a group of lanes (spmm-cwm's body). Pieces of a
// split row write raw partial sums to a workspace and a second pass adds them in piece order: no atomics, so
// the result is bitwise deterministic.
#include <algorithm>

#include "kernel_factories.hpp"
#include "spmm_common.cuh"

namespace spcg {
namespace {

struct SplitTuning {
  static constexpr int split_entries = 256;
  static constexpr int columns_per_lane = 2;
  static constexpr int max_passes = 2;
  static constexpr int combine_threads = 128;
};

// item: {row, begin, end, slot}; slot < 0: whole row, write Y; slot >= 0: write partial[slot * K + j].
template <int G>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_split_kernel(int items, int K, int ld, bool vec2, const int4* __restrict__ work, const int* __restrict__ col,
                      const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                      double* __restrict__ Y, double* __restrict__ partial) {
  const int item = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / G);
  if (item >= items) return;
  const int4 w = work[item];
  double acc[SplitTuning::max_passes * SplitTuning::columns_per_lane] = {};
  dev::spmm_accumulate<G, SplitTuning::columns_per_lane, SplitTuning::max_passes>(w.y, w.z, col, val, X, ld, K, vec2, acc);
  if (w.w < 0) {
    dev::spmm_store<G, SplitTuning::columns_per_lane, SplitTuning::max_passes>(Y + int64_t{w.x} * ld, K, alpha, beta, acc);
  } else {
    dev::spmm_store<G, SplitTuning::columns_per_lane, SplitTuning::max_passes>(partial + int64_t{w.w} * K, K, 1.0, 0.0,
                                                                               acc);
  }
}

// One thread per (split row, column): sums that row's pieces in order.
__global__ void spmm_split_combine(int split_rows, int K, int ld, const int3* __restrict__ split, const double* partial,
                                   double alpha, double beta, double* __restrict__ Y) {
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= int64_t{split_rows} * K) return;
  const int r = static_cast<int>(t / K), j = static_cast<int>(t % K);
  const int3 s = split[r];  // {row, first slot, pieces}
  double sum = 0;
  for (int q = 0; q < s.z; ++q) sum += partial[int64_t{s.y + q} * K + j];
  dev::store_y(Y + int64_t{s.x} * ld + j, alpha, sum, beta);
}

class SpmmSplit final : public SpmmOperator {
 public:
  SpmmSplit(const CsrMatrix& a) : SpmmOperator(a) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<int4> work;
    std::vector<int3> split;
    int slots = 0;
    for (int32_t i = 0; i < a.rows; ++i) {
      const int b = a.row_ptr[i], e = a.row_ptr[i + 1];
      if (e - b <= SplitTuning::split_entries) {
        work.push_back(make_int4(i, b, e, -1));
        continue;
      }
      const int pieces = (e - b + SplitTuning::split_entries - 1) / SplitTuning::split_entries;
      split.push_back(make_int3(i, slots, pieces));
      for (int q = 0; q < pieces; ++q)
        work.push_back(make_int4(i, b + q * SplitTuning::split_entries,
                                 std::min(e, b + (q + 1) * SplitTuning::split_entries), slots + q));
      slots += pieces;
    }
    info_.convert_ms = elapsed_ms(t0);
    info_.format = "csr+split";
    info_.reason = std::to_string(split.size()) + " rows split into " + std::to_string(slots) + " pieces";
    csr_ = upload_csr(a, info_);
    items_ = static_cast<int>(work.size());
    split_rows_ = static_cast<int>(split.size());
    slots_ = slots;
    work_ = DeviceArray<int4>(work, "split work items");
    split_ = DeviceArray<int3>(split, "split rows");
    partial_ = DeviceArray<double>(static_cast<size_t>(slots) * SpmmTuning::panel, "split partial sums");
    info_.device_bytes += static_cast<int64_t>(work_.bytes() + split_.bytes());
  }
  std::string name() const override { return "spmm-split"; }
  double bytes_per_apply(int k) const override {
    return SpmmOperator::bytes_per_apply(k) + 16.0 * items_ + 16.0 * double(slots_) * k;
  }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    const int g = spmm_group_width(K, SplitTuning::columns_per_lane);
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    double* partial = const_cast<double*>(partial_.data());
    dispatch_group_width(g, [&](auto gc) {
      constexpr int G = decltype(gc)::value;
      const int64_t blocks = (int64_t{items_} * G + SpmmTuning::threads - 1) / SpmmTuning::threads;
      spmm_split_kernel<G><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
          items_, K, ld, vec2, work_.data(), csr_.col_idx.data(), csr_.values.data(), x, alpha, beta, y, partial);
    });
    CHECK_LAUNCH("spmm-split");
    if (split_rows_ > 0) {
      const int64_t blocks = (int64_t{split_rows_} * K + SplitTuning::combine_threads - 1) / SplitTuning::combine_threads;
      spmm_split_combine<<<static_cast<unsigned>(blocks), SplitTuning::combine_threads, 0, s>>>(
          split_rows_, K, ld, split_.data(), partial, alpha, beta, y);
      CHECK_LAUNCH("spmm-split-combine");
    }
  }

 private:
  DeviceCsr csr_;
  DeviceArray<int4> work_;
  DeviceArray<int3> split_;
  DeviceArray<double> partial_;
  int items_ = 0, split_rows_ = 0, slots_ = 0;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_split(const CsrMatrix& a, const OperatorOptions&) {
  return std::make_unique<SpmmSplit>(a);
}

}  // namespace spcg
