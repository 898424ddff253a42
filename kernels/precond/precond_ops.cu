// Preconditioner kernels. Work mapping: one thread per entry (i, j) of an n x k block for the Chebyshev step
// and the block-Jacobi apply (row i = t / k, so a row's k entries are adjacent threads); one thread per
// diagonal block for block-Jacobi's setup (a b x b Cholesky in registers, b <= 8, as in Ginkgo's batched
// block-Jacobi generation); one thread per row for the node-structure check.
#include <climits>

#include "kernels/kernel_module.cuh"
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

__global__ void chebyshev_rows_kernel(int32_t count, const int32_t* __restrict__ rows, const double* __restrict__ scale,
                                      const double* __restrict__ res, const double* __restrict__ d_in,
                                      double* __restrict__ d_out, double* __restrict__ x, double c1, double c2) {
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < count; j += int64_t{gridDim.x} * blockDim.x) {
    const int32_t t = rows[j];
    const double step = c2 * scale[t] * res[t];  // chebyshev_step_kernel's, a later step
    const double dt = fma(c1, d_in[t], step);
    d_out[t] = dt;
    x[t] = x[t] + dt;
  }
}

// Block g's rows: [first, first + m) of this GPU's (precond_ops.hpp: cut where a rank's rows begin or end).
__device__ __forceinline__ int64_t block_first_row(int64_t g, int b, int offset) { return max(g * b - offset, int64_t{0}); }
__device__ __forceinline__ int block_rows(int64_t g, int b, int offset, int64_t n) {
  return static_cast<int>(min(g * b + b - offset, n) - block_first_row(g, b, offset));
}

__global__ void block_jacobi_setup_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                          const double* __restrict__ v, int b, int offset, int32_t blocks,
                                          double* __restrict__ inverses, int32_t* __restrict__ first_bad) {
  const int32_t g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= blocks) return;
  const int32_t first = static_cast<int32_t>(block_first_row(g, b, offset));
  const int m = block_rows(g, b, offset, n);  // rows in this block
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

__global__ void block_jacobi_apply_kernel(int64_t n, int b, int offset, const double* __restrict__ inv,
                                          const double* __restrict__ r, double* __restrict__ z, int k) {
  const int64_t total = n * k, stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; t < total; t += stride) {
    const int64_t i = t / k;
    const int j = static_cast<int>(t - i * k);
    const int64_t g = (i + offset) / b, first = block_first_row(g, b, offset);
    const int row = static_cast<int>(i - first), m = block_rows(g, b, offset, n);
    const double* w = inv + g * b * b + int64_t{row} * b;
    double s = 0;
    for (int c = 0; c < m; ++c) s = fma(w[c], r[(first + c) * k + j], s);
    z[t] = s;
  }
}

__global__ void node_block_check_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci, int b,
                                        int offset, double* failed) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int32_t next = -1;  // the column the current run goes on with (-1: none open, the next entry starts one)
  bool good = true;
  for (int32_t p = rp[i]; good && p < rp[i + 1]; ++p) {
    const int32_t c = ci[p];
    const int place = (c + offset) % b;  // c's place in its node block
    // a run starts at a node's first unknown (or at the first column here: the node began on the rank before)
    good = next >= 0 ? c == next : place == 0 || c == 0;
    // and ends at the node's last unknown (or at the last column here: the node goes on on the next rank)
    next = place == b - 1 || c == n - 1 ? -1 : c + 1;
  }
  if (!good || next >= 0) *failed = 1;  // (every failing thread writes the same value)
}

void check_block(int b, int offset) {
  if (b < 1 || b > kBlockJacobiMaxSize) throw UsageError("block-Jacobi: the block size must be 1.." + std::to_string(kBlockJacobiMaxSize));
  if (offset < 0 || offset >= b) throw UsageError("block-Jacobi: the rows' offset into a block must be 0.." + std::to_string(b - 1));
}

}  // namespace

void launch_chebyshev_step(int64_t n, int k, const double* scale, const double* res, double* d, double* x, double c1,
                           double c2, bool first, bool x_is_zero, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  chebyshev_step_kernel<<<blocks_for(n * k), kThreads, 0, s>>>(n, k, scale, res, d, x, c1, c2, first, x_is_zero);
  CHECK_LAUNCH("chebyshev-step");
}

void launch_chebyshev_rows(int32_t count, const int32_t* rows, const double* scale, const double* res, const double* d_in,
                           double* d_out, double* x, double c1, double c2, cudaStream_t s) {
  if (count <= 0) return;
  chebyshev_rows_kernel<<<blocks_for(count), kThreads, 0, s>>>(count, rows, scale, res, d_in, d_out, x, c1, c2);
  CHECK_LAUNCH("chebyshev-rows");
}

void launch_block_jacobi_setup(const DeviceCsr& a, int b, int offset, double* inverses, int32_t* first_bad,
                               cudaStream_t s) {
  check_block(b, offset);
  if (a.rows == 0) return;
  const int64_t blocks = block_jacobi_blocks(a.rows, b, offset);
  block_jacobi_setup_kernel<<<static_cast<int>((blocks + 127) / 128), 128, 0, s>>>(
      a.rows, a.row_ptr.data(), a.col_idx.data(), a.values.data(), b, offset, static_cast<int32_t>(blocks), inverses,
      first_bad);
  CHECK_LAUNCH("block-jacobi-setup");
}

void launch_block_jacobi_apply(int64_t n, int b, int offset, const double* inverses, const double* r, double* z, int k,
                               cudaStream_t s) {
  check_block(b, offset);
  if (n == 0 || k == 0) return;
  block_jacobi_apply_kernel<<<blocks_for(n * k), kThreads, 0, s>>>(n, b, offset, inverses, r, z, k);
  CHECK_LAUNCH("block-jacobi-apply");
}

void launch_node_block_check(const DeviceCsr& a, int b, int offset, double* failed, cudaStream_t s) {
  check_block(b, offset);
  if (a.rows == 0) return;
  node_block_check_kernel<<<(a.rows + kThreads - 1) / kThreads, kThreads, 0, s>>>(a.rows, a.row_ptr.data(),
                                                                                 a.col_idx.data(), b, offset, failed);
  CHECK_LAUNCH("node-block-check");
}

}  // namespace spcg

SPCG_KERNEL_MODULE(precond_ops)
