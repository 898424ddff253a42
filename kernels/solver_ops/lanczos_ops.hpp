#pragma once
// Lanczos's vector steps with the scalars on the device (kernels/solver_ops/lanczos_ops.cu).
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/solver_ops/vector_ops.hpp"

namespace spcg {

// Lanczos on D^-1/2 A D^-1/2 with its scalars on the device (coeffs: 2 per step; solver/spectrum.cpp), around
// w = A t: w = d .* w, coeffs[2j] = w . u; then w -= coeffs[2j] u + sqrt(coeffs[2j - 1]) u_prev,
// coeffs[2j + 1] = w . w; then u_next = w / sqrt(coeffs[2j + 1]), t = d .* u_next. d null: D = I.
void launch_lanczos_scale_dot(int64_t n, double* w, const double* u, const double* d, const ReductionWorkspace& ws,
                              double* coeffs, int j, cudaStream_t s);
void launch_lanczos_orthogonalize(int64_t n, double* w, const double* u, const double* u_prev, const ReductionWorkspace& ws,
                                  double* coeffs, int j, cudaStream_t s);
void launch_lanczos_next(int64_t n, const double* w, const double* d, const double* coeffs, int j, double* u_next,
                         double* t, cudaStream_t s);

}  // namespace spcg
