#pragma once
// Small vector launchers used by operators and solvers (implemented in vector_ops.cu).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace spcg {
// y = beta * y over `count` entries; beta == 0 writes zeros without reading y.
void launch_scale(double beta, double* y, size_t count, cudaStream_t s);
// y = value over `count` entries.
void launch_fill(double value, double* y, size_t count, cudaStream_t s);
// y[e] = 2 u_e - 1, u_e the (first+e+1)-th uniform of SplitMix64(seed): make_rhs("random")'s block, bit for
// bit (first > 0: the entries from `first` on, one rank's rows of the block).
void launch_fill_splitmix_uniform(uint64_t seed, double* y, size_t count, cudaStream_t s, uint64_t first = 0);
}  // namespace spcg
