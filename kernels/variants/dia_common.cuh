#pragma once
// What the symmetric DIA kernels share (spmv_dia.cu's row sweep and spmv_dia_box.cu's plane march): the value
// loads and the polynomial smoother's epilogue. Header-only device code.
#include <cstdint>

#include "kernels/device_utils.cuh"

namespace spcg {
namespace dia {

// Stripes with caching loads when they are read twice (symmetric), streaming loads otherwise; FP32 values are
// widened on load (the products and sums are FP64 either way).
template <bool Symmetric>
__device__ __forceinline__ double load_value(const double* p) {
  if constexpr (Symmetric) return __ldg(p);
  else return dev::load_stream(p);
}
template <bool Symmetric>
__device__ __forceinline__ double load_value(const float* p) {
  if constexpr (Symmetric) return static_cast<double>(__ldg(p));
  else return static_cast<double>(__ldcs(p));
}

// A polynomial smoother's step in the product's epilogue (FusedSmoothing: the product is of d_in, alpha -1 and
// beta 1 on res), each row's arithmetic that of dev::store_y and launch_chebyshev_step (the same bits).
struct SmoothingEpilogue {
  double* res = nullptr;
  const double* res_in = nullptr;  // read in res's place where not null (res = b - A d: no copy of b into res first)
  double* d_out = nullptr;         // null: the residual alone (FusedSmoothing::residual_step)
  double* x = nullptr;
  const double* scale = nullptr;
  double c1 = 0, c2 = 0;
  const uint8_t* rows_apart = nullptr;  // rows whose step the caller finishes (res alone written)
  __device__ __forceinline__ void operator()(int64_t row, double d_in, double sum) const {
    const double r = fma(1.0, (res_in ? res_in : res)[row], -1.0 * sum);  // store_y(res, -1, sum, 1)
    res[row] = r;
    if (!d_out || (rows_apart && rows_apart[row])) return;
    const double dt = fma(c1, d_in, c2 * scale[row] * r);  // chebyshev_step_kernel's
    d_out[row] = dt;
    x[row] = x[row] + dt;
  }
};

}  // namespace dia
}  // namespace spcg
