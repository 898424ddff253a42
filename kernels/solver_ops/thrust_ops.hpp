#pragma once
// The plain Thrust vector operations: the reference path of the solvers (--vector-ops thrust). Each call is
// one Thrust algorithm; dot products return to the host (a synchronisation per call).
#include <cuda_runtime.h>

#include <cstdint>

namespace spcg {
double thrust_dot(const double* a, const double* b, int64_t n, cudaStream_t s);
void thrust_axpy(double a, const double* x, double* y, int64_t n, cudaStream_t s);   // y += a x
void thrust_xpby(const double* x, double b, double* y, int64_t n, cudaStream_t s);   // y = x + b y
void thrust_mul(const double* d, const double* x, double* y, int64_t n, cudaStream_t s);  // y = d .* x
void thrust_sqrt(const double* x, double* y, int64_t n, cudaStream_t s);        // y = sqrt(x)
void thrust_copy(const double* x, double* y, int64_t n, cudaStream_t s);
// How many of v's values an FP32 copy would change (NaN counts: it compares unequal to itself).
int64_t thrust_count_not_fp32(const double* v, int64_t n, cudaStream_t s);
}  // namespace spcg
