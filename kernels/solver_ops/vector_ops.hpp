#pragma once
// The solvers' vector kernels that are not one algorithm's: the reduction workspace, deterministic dot products
// and column dots, row scaling, and the sum over ranks and the gather of several GPUs. The fused CG steps are in
// cg_ops.hpp, Lanczos's in lanczos_ops.hpp.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/device_array.hpp"
#include "kernels/linear_operator.hpp"

namespace spcg {

// Reduction workspace: partials for up to `capacity` blocks (x `width` values) plus results.
struct ReductionWorkspace {
  DeviceArray<double> partials;
  DeviceArray<unsigned int> counter;
  int capacity = 0, width = 0;
  ReductionWorkspace() = default;
  ReductionWorkspace(int capacity_blocks, int values_per_block);
  DotSink sink(double* result) const;
};
int reduction_blocks(int64_t n);  // the grid size the fused vector kernels use

// result = a . b (deterministic: fixed grid, fixed-order combine).
void launch_dot(const double* a, const double* b, int64_t n, const ReductionWorkspace& ws, double* result, cudaStream_t s);

// out[j] = sum_i a(i, j) * b(i, j) for n x k row-major blocks (deterministic).
void launch_column_dots(int64_t n, int k, const double* a, const double* b, const ReductionWorkspace& ws, double* out,
                        cudaStream_t s);
// y = a .* x elementwise (Jacobi), over count entries where a is indexed by row (count = n * k, row = i / k).
void launch_row_scale(int64_t n, int k, const double* dinv, const double* x, double* y, cudaStream_t s);

// out[i] = inputs[0][i] + inputs[1][i] + ... in rank order (inputs: a device array of `ranks` device pointers).
void launch_sum_over_ranks(const double* const* inputs, int ranks, size_t count, double* out, cudaStream_t s);

// out[i] = gathered[i] + gathered[count + i] + ... over `ranks` slices of `count` values, in rank order.
void launch_sum_gathered(const double* gathered, int ranks, size_t count, double* out, cudaStream_t s);

// out[i * k + j] = x[rows[i] * k + j], i < count, j < k: rows of an n x k row-major block.
void launch_gather(const int32_t* rows, int64_t count, const double* x, double* out, cudaStream_t s, int k = 1);

}  // namespace spcg
