#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/inner_product.h>
#include <thrust/transform.h>
#include <thrust/copy.h>
#include <thrust/count.h>

#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "kernels/solver_ops/thrust_ops.hpp"

namespace spcg {
namespace {
thrust::device_ptr<double> dp(double* p) { return thrust::device_pointer_cast(p); }
thrust::device_ptr<const double> dp(const double* p) { return thrust::device_pointer_cast(p); }
}  // namespace

double thrust_dot(const double* a, const double* b, int64_t n, cudaStream_t s) {
  ThrustPoolAllocator scratch;
  return thrust::inner_product(thrust::cuda::par(scratch).on(s), dp(a), dp(a) + n, dp(b), 0.0);
}
void thrust_axpy(double a, const double* x, double* y, int64_t n, cudaStream_t s) {
  thrust::transform(thrust::cuda::par_nosync.on(s), dp(x), dp(x) + n, dp(y), dp(y),
                    [a] __device__(double xi, double yi) { return fma(a, xi, yi); });
}
void thrust_xpby(const double* x, double b, double* y, int64_t n, cudaStream_t s) {
  thrust::transform(thrust::cuda::par_nosync.on(s), dp(x), dp(x) + n, dp(y), dp(y),
                    [b] __device__(double xi, double yi) { return fma(b, yi, xi); });
}
void thrust_mul(const double* d, const double* x, double* y, int64_t n, cudaStream_t s) {
  thrust::transform(thrust::cuda::par_nosync.on(s), dp(d), dp(d) + n, dp(x), dp(y),
                    [] __device__(double di, double xi) { return di * xi; });
}
void thrust_sqrt(const double* x, double* y, int64_t n, cudaStream_t s) {
  thrust::transform(thrust::cuda::par_nosync.on(s), dp(x), dp(x) + n, dp(y), [] __device__(double xi) { return sqrt(xi); });
}
void thrust_copy(const double* x, double* y, int64_t n, cudaStream_t s) {
  thrust::copy(thrust::cuda::par_nosync.on(s), dp(x), dp(x) + n, dp(y));
}
int64_t thrust_count_not_fp32(const double* v, int64_t n, cudaStream_t s) {
  ThrustPoolAllocator scratch;
  return thrust::count_if(thrust::cuda::par(scratch).on(s), dp(v), dp(v) + n,
                          [] __device__(double x) { return static_cast<double>(static_cast<float>(x)) != x; });
}

}  // namespace spcg
