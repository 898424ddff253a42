// Lanczos's three vector steps around w = A t, with its scalars on the device (solver/spectrum.cpp).
// Work mapping and reductions: reductions.cuh.
#include <algorithm>
#include <cmath>

#include "kernels/kernel_module.cuh"
#include "kernels/solver_ops/lanczos_ops.hpp"
#include "kernels/solver_ops/reductions.cuh"

namespace spcg {
namespace {

// Lanczos on S = D^-1/2 A D^-1/2 (solver/spectrum.cpp), three kernels a step around w = A t, the scalars on the
// device (coeffs[2j] = alpha_j, coeffs[2j + 1] = beta_{j+1}^2) so that the steps run without a host round trip.
// w = d .* w (d null: unchanged); coeffs[2j] = w . u.
__global__ void lanczos_scale_dot_kernel(int64_t n, double* __restrict__ w, const double* __restrict__ u,
                                         const double* __restrict__ d, DotSink sink) {
  double v = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double wi = d ? d[i] * w[i] : w[i];
    w[i] = wi;
    v += wi * u[i];
  }
  dev::dot_epilogue(sink, v);
}
// w -= alpha_j u + beta_j u_prev; coeffs[2j + 1] = w . w.
__global__ void lanczos_orthogonalize_kernel(int64_t n, double* __restrict__ w, const double* __restrict__ u,
                                             const double* __restrict__ u_prev, const double* __restrict__ coeffs, int j,
                                             DotSink sink) {
  const double alpha = coeffs[2 * j], beta = j > 0 ? sqrt(coeffs[2 * j - 1]) : 0.0;
  double v = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double wi = w[i] - alpha * u[i] - beta * u_prev[i];
    w[i] = wi;
    v += wi * wi;
  }
  dev::dot_epilogue(sink, v);
}
// u_next = w / beta_{j+1}; t = d .* u_next (the next step's operand; d null: t = u_next).
__global__ void lanczos_next_kernel(int64_t n, const double* __restrict__ w, const double* __restrict__ d,
                                    const double* __restrict__ coeffs, int j, double* __restrict__ u_next,
                                    double* __restrict__ t) {
  const double inv_beta = 1.0 / sqrt(coeffs[2 * j + 1]);
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x) {
    const double ui = w[i] * inv_beta;
    u_next[i] = ui;
    t[i] = d ? d[i] * ui : ui;
  }
}

}  // namespace

void launch_lanczos_scale_dot(int64_t n, double* w, const double* u, const double* d, const ReductionWorkspace& ws,
                              double* coeffs, int j, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  lanczos_scale_dot_kernel<<<blocks, VectorTuning::threads, 0, s>>>(n, w, u, d, ws.sink(coeffs + 2 * j));
  CHECK_LAUNCH("lanczos-scale-dot");
}
void launch_lanczos_orthogonalize(int64_t n, double* w, const double* u, const double* u_prev, const ReductionWorkspace& ws,
                                  double* coeffs, int j, cudaStream_t s) {
  const int blocks = std::min(ws.capacity, reduction_blocks(std::max<int64_t>(n, 1)));
  lanczos_orthogonalize_kernel<<<blocks, VectorTuning::threads, 0, s>>>(n, w, u, u_prev, coeffs, j,
                                                                        ws.sink(coeffs + 2 * j + 1));
  CHECK_LAUNCH("lanczos-orthogonalize");
}
void launch_lanczos_next(int64_t n, const double* w, const double* d, const double* coeffs, int j, double* u_next,
                         double* t, cudaStream_t s) {
  lanczos_next_kernel<<<reduction_blocks(std::max<int64_t>(n, 1)), VectorTuning::threads, 0, s>>>(n, w, d, coeffs, j,
                                                                                                 u_next, t);
  CHECK_LAUNCH("lanczos-next");
}

}  // namespace spcg

SPCG_KERNEL_MODULE(lanczos_ops)
