#pragma once
// Shared pieces of the SpMM kernels (row-major X and Y, leading dimension ld; a launch covers a panel of
// K <= 128 columns). A group of G lanes owns one row (or row piece): lanes load G (column, value) pairs of
// the row with one coalesced load each and pass them round with shuffles (GE-SpMM's coalesced row caching),
// and each lane accumulates CW adjacent columns per pass (GE-SpMM's coarse-grained warp merging), so one
// sparse entry feeds CW multiply-adds and X is read in 8*CW-byte pieces.
#include <algorithm>

#include "kernels/device_formats.hpp"
#include "kernels/device_utils.cuh"

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

// Entries per lane gathered together in spmm_accumulate for a group of G lanes: groups of 1-2 lanes need several
// in flight; wider groups already issue enough (H100, power-law 1M, spmm-split: U = 4 1.8x faster at k = 1, 2,
// 1.3x slower at k = 16; 7-pt 128^3, spmm-cwm: 2x faster at k = 1, 2, 10% slower at k = 8 with U = 2).
template <int G>
constexpr int gathers_in_flight() {
  return G <= 2 ? 4 : 1;
}

// acc[t * CW + c] += sum over entries p in [begin, end) of val[p] * X[col[p], (lane + G t) CW + c].
// Each lane loads U entries per chunk of G * U, and the X rows of U entries are gathered together before their
// multiply-adds, so U gathers per lane are in flight instead of one (short rows with few lanes per row
// otherwise wait a full L2 round trip per entry). E > 1 also takes E consecutive entries of the chunk per step
// (E gathers per group in flight where the group is wide and U = 1).
template <int G, int CW, int MAXT, int U = gathers_in_flight<G>(), int E = 1>
__device__ __forceinline__ void spmm_accumulate(int begin, int end, const int* __restrict__ col,
                                                const double* __restrict__ val, const double* __restrict__ X, int ld,
                                                int K, bool vec2, double (&acc)[MAXT * CW]) {
  const int lane = threadIdx.x & (G - 1);
  const unsigned mask = group_mask<G>();
  for (int base = begin; base < end; base += G * U) {
    int c[U];
    double v[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = base + u * G + lane;
      c[u] = 0, v[u] = 0;
      if (p < end) c[u] = load_stream(col + p), v[u] = load_stream(val + p);
    }
    const int lanes_used = min(G, end - base);
    for (int e0 = 0; e0 < lanes_used; e0 += E) {  // entries base + u G + e0 + f, u < U, f < E
      double xv[U * E][MAXT][CW];
      double ve[U * E];
#pragma unroll
      for (int u = 0; u < U; ++u)
#pragma unroll
        for (int f = 0; f < E; ++f) {
          const int e = e0 + f, i = u * E + f;
          const int ce = __shfl_sync(mask, c[u], e, G);
          const double vs = __shfl_sync(mask, v[u], e, G);
          const bool on = (u == 0 || base + u * G + e < end) && (f == 0 || e < lanes_used);  // group-uniform
          ve[i] = on ? vs : 0.0;  // e >= lanes_used wraps to another lane's entry
          const double* xr = X + static_cast<int64_t>(ce) * ld;
#pragma unroll
          for (int t = 0; t < MAXT; ++t) {
            const int j = (lane + G * t) * CW;
            if constexpr (CW == 2 || CW == 4) {
              if (vec2 && j + CW - 1 < K) {  // 16-byte loads
#pragma unroll
                for (int h = 0; h < CW; h += 2) {
                  const double2 x2 =
                      on ? __ldg(reinterpret_cast<const double2*>(xr + j + h)) : make_double2(0.0, 0.0);
                  xv[i][t][h] = x2.x, xv[i][t][h + 1] = x2.y;
                }
                continue;
              }
            }
#pragma unroll
            for (int q = 0; q < CW; ++q) xv[i][t][q] = on && j + q < K ? __ldg(xr + j + q) : 0.0;
          }
        }
#pragma unroll
      for (int i = 0; i < U * E; ++i)
#pragma unroll
        for (int t = 0; t < MAXT; ++t)
#pragma unroll
          for (int q = 0; q < CW; ++q) acc[t * CW + q] += ve[i] * xv[i][t][q];
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
