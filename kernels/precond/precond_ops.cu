// Preconditioner kernels. Work mapping: one thread per entry (i, j) of an n x k block for the Chebyshev step
// and the block-Jacobi apply (row i = t / k, so a row's k entries are adjacent threads); one thread per
// diagonal block for block-Jacobi's setup (a b x b Cholesky in registers, b <= 8, as in Ginkgo's batched
// block-Jacobi generation); one thread per row for the node-structure check.
#include <climits>

#include "kernels/device_utils.cuh"
#include "kernels/precond/precond_ops.hpp"

namespace spcg {
namespace {

constexpr int kThreads = 256;
int blocks_for(int64_t work) { return grid_stride_blocks(std::max<int64_t>(work, 1), kThreads); }

__global__ void chebyshev_step_kernel(int64_t n, int k, const double* __restrict__ scale, const double* __restrict__ res,
                                      double* __restrict__ d, double* __restrict__ x, double c1, double c2, bool first,
                                      bool x_is_zero) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const double step = c2 * scale[k == 1 ? t : t / k] * res[t];
    const double dt = first ? step : fma(c1, d[t], step);
    d[t] = dt;
    x[t] = first && x_is_zero ? dt : x[t] + dt;
  }
}

__global__ void block_jacobi_setup_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                          const double* __restrict__ v, int b, double* __restrict__ inverses,
                                          int32_t* __restrict__ first_bad) {
  const int32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  const int32_t first = g * b;
  if (first >= n) return;
  const int m = min(b, n - first);  // rows in this block
  constexpr int B = kBlockJacobiMaxSize;
  double a[B * B];
  for (int e = 0; e < B * B; ++e) a[e] = 0;
  for (int r = 0; r < m; ++r)
    for (int32_t p = rp[first + r]; p < rp[first + r + 1]; ++p) {
      const int32_t c = ci[p] - first;
      if (c >= 0 && c < m) a[r * B + c] = v[p];
    }
  // Cholesky a = L L' in place (lower triangle), then the inverse by solving L L' X = I column by column.
  bool ok = true;
  for (int j = 0; j < m && ok; ++j) {
    double s = a[j * B + j];
    for (int t = 0; t < j; ++t) s -= a[j * B + t] * a[j * B + t];
    if (!(s > 0)) {
      ok = false;
      break;
    }
    const double l = sqrt(s);
    a[j * B + j] = l;
    for (int i = j + 1; i < m; ++i) {
      double u = a[i * B + j];
      for (int t = 0; t < j; ++t) u -= a[i * B + t] * a[j * B + t];
      a[i * B + j] = u / l;
    }
  }
  double* out = inverses + int64_t{g} * b * b;
  if (!ok) {
    atomicMin(first_bad, g);  // the smallest failing block: order-free
    for (int e = 0; e < b * b; ++e) out[e] = 0;
    return;
  }
  for (int c = 0; c < b; ++c) {
    double y[B];
    // forward: L y = e_c
    for (int i = 0; i < m; ++i) {
      double s = i == c ? 1.0 : 0.0;
      for (int t = 0; t < i; ++t) s -= a[i * B + t] * y[t];
      y[i] = s / a[i * B + i];
    }
    // backward: L' x = y
    for (int i = m - 1; i >= 0; --i) {
      double s = y[i];
      for (int t = i + 1; t < m; ++t) s -= a[t * B + i] * y[t];
      y[i] = s / a[i * B + i];
    }
    for (int i = 0; i < b; ++i) out[i * b + c] = c < m ? (i < m ? y[i] : 0.0) : (i == c ? 1.0 : 0.0);
  }
}

__global__ void block_jacobi_apply_kernel(int64_t n, int b, const double* __restrict__ inv, const double* __restrict__ r,
                                          double* __restrict__ z, int k) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t i = t / k;
    const int j = static_cast<int>(t - i * k);
    const int64_t g = i / b, first = g * b;
    const int row = static_cast<int>(i - first), m = static_cast<int>(n - first < b ? n - first : int64_t{b});
    const double* w = inv + g * b * b + int64_t{row} * b;
    double s = 0;
    for (int c = 0; c < m; ++c) s = fma(w[c], r[(first + c) * k + j], s);
    z[t] = s;
  }
}

__global__ void node_block_check_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci, int b,
                                        int* ok) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const int32_t start = rp[i], len = rp[i + 1] - start;
  bool good = len % b == 0;
  for (int32_t p = 0; good && p < len; ++p) {
    const int32_t c = ci[start + p], lead = ci[start + p - p % b];
    good = lead % b == 0 && c == lead + p % b;
  }
  if (!good) *ok = 0;
}

}  // namespace

void launch_chebyshev_step(int64_t n, int k, const double* scale, const double* res, double* d, double* x, double c1,
                           double c2, bool first, bool x_is_zero, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  chebyshev_step_kernel<<<blocks_for(n * k), kThreads, 0, s>>>(n, k, scale, res, d, x, c1, c2, first, x_is_zero);
  CHECK_LAUNCH("chebyshev-step");
}

void launch_block_jacobi_setup(const DeviceCsr& a, int b, double* inverses, int32_t* first_bad, cudaStream_t s) {
  if (b < 1 || b > kBlockJacobiMaxSize) throw UsageError("block-Jacobi: the block size must be 1.." + std::to_string(kBlockJacobiMaxSize));
  if (a.rows == 0) return;
  const int64_t groups = (int64_t{a.rows} + b - 1) / b;
  block_jacobi_setup_kernel<<<static_cast<int>((groups + 127) / 128), 128, 0, s>>>(a.rows, a.row_ptr.data(), a.col_idx.data(),
                                                                                 a.values.data(), b, inverses, first_bad);
  CHECK_LAUNCH("block-jacobi-setup");
}

void launch_block_jacobi_apply(int64_t n, int b, const double* inverses, const double* r, double* z, int k,
                               cudaStream_t s) {
  if (n == 0 || k == 0) return;
  block_jacobi_apply_kernel<<<blocks_for(n * k), kThreads, 0, s>>>(n, b, inverses, r, z, k);
  CHECK_LAUNCH("block-jacobi-apply");
}

void launch_node_block_check(const DeviceCsr& a, int b, int* ok, cudaStream_t s) {
  if (a.rows == 0) return;
  if (a.rows % b != 0) {
    CHECK_CUDA(cudaMemsetAsync(ok, 0, sizeof(int), s));
    return;
  }
  node_block_check_kernel<<<(a.rows + kThreads - 1) / kThreads, kThreads, 0, s>>>(a.rows, a.row_ptr.data(), a.col_idx.data(),
                                                                                 b, ok);
  CHECK_LAUNCH("node-block-check");
}

}  // namespace spcg
