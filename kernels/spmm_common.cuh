#pragma once
// Shared pieces of the SpMM kernels (row-major X and Y, leading dimension ld; a launch covers a panel of
// K <= 128 columns). A group of G lanes owns one row (or row piece): lanes load G (column, value) pairs of
// the row with one coalesced load each and pass them round with shuffles (GE-SpMM's coalesced row caching),
// and each lane accumulates CW adjacent columns per pass (GE-SpMM's coarse-grained warp merging), so one
// sparse entry feeds CW multiply-adds and X is read in 8*CW-byte pieces.
#include <algorithm>

#include "device_formats.hpp"
#include "device_utils.cuh"

namespace spcg {

struct SpmmTuning {
  static constexpr int threads = 256;
  static constexpr int panel = 128;  // columns per launch
};

// Lanes per row for a panel of K columns when each lane takes CW adjacent columns per pass.
inline int spmm_group_width(int K, int CW) {
  int g = 1;
  while (g < 32 && g * CW < K) g *= 2;
  return g;
}

namespace dev {

template <int G>
__device__ __forceinline__ unsigned group_mask() {
  if constexpr (G == 32) {
    return 0xffffffffu;
  } else {
    return ((1u << G) - 1u) << ((threadIdx.x & 31) & ~(G - 1));
  }
}

// acc[t * CW + c] += sum over entries p in [begin, end) of val[p] * X[col[p], (lane + G t) CW + c].
template <int G, int CW, int MAXT>
__device__ __forceinline__ void spmm_accumulate(int begin, int end, const int* __restrict__ col,
                                                const double* __restrict__ val, const double* __restrict__ X, int ld,
                                                int K, bool vec2, double (&acc)[MAXT * CW]) {
  const int lane = threadIdx.x & (G - 1);
  const unsigned mask = group_mask<G>();
  for (int base = begin; base < end; base += G) {
    const int p = base + lane;
    int c = 0;
    double v = 0;
    if (p < end) c = load_stream(col + p), v = load_stream(val + p);
    const int n = min(G, end - base);
    for (int e = 0; e < n; ++e) {
      const int ce = __shfl_sync(mask, c, e, G);
      const double ve = __shfl_sync(mask, v, e, G);
      const double* xr = X + static_cast<int64_t>(ce) * ld;
#pragma unroll
      for (int t = 0; t < MAXT; ++t) {
        const int j = (lane + G * t) * CW;
        if (CW == 2) {
          if (vec2 && j + 1 < K) {
            const double2 xv = __ldg(reinterpret_cast<const double2*>(xr + j));
            acc[t * CW] += ve * xv.x;
            acc[t * CW + 1] += ve * xv.y;
          } else {
            if (j < K) acc[t * CW] += ve * __ldg(xr + j);
            if (j + 1 < K) acc[t * CW + 1] += ve * __ldg(xr + j + 1);
          }
        } else {
          if (j < K) acc[t * CW] += ve * __ldg(xr + j);
        }
      }
    }
  }
}

template <int G, int CW, int MAXT>
__device__ __forceinline__ void spmm_store(double* __restrict__ y_row, int K, double alpha, double beta,
                                           const double (&acc)[MAXT * CW]) {
  const int lane = threadIdx.x & (G - 1);
#pragma unroll
  for (int t = 0; t < MAXT; ++t)
#pragma unroll
    for (int c = 0; c < CW; ++c) {
      const int j = (lane + G * t) * CW + c;
      if (j < K) store_y(y_row + j, alpha, acc[t * CW + c], beta);
    }
}

}  // namespace dev

// Calls f(std::integral_constant<int, G>) for the runtime group width g (1..32).
template <class F>
void dispatch_group_width(int g, F&& f) {
  switch (g) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    default: f(std::integral_constant<int, 32>{}); break;
  }
}

// Base for our SpMM kernels: splits k into panels of <= 128 columns, each one launch.
class SpmmOperator : public LinearOperator {
 protected:
  using LinearOperator::LinearOperator;
  virtual void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const = 0;
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    for (int j0 = 0; j0 < k; j0 += SpmmTuning::panel)
      apply_panel(alpha, x + j0, beta, y + j0, std::min(SpmmTuning::panel, k - j0), k, s);
  }

 public:
  double bytes_per_apply(int k) const override { return 12.0 * nnz_ + 4.0 * rows_ + 16.0 * rows_ * k; }
};

}  // namespace spcg
