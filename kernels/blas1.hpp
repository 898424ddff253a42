#pragma once
// Small vector launchers used by operators and solvers (implemented in vector_ops.cu).
#include <cuda_runtime.h>

#include <cstddef>

namespace spcg {
// y = beta * y over `count` entries; beta == 0 writes zeros without reading y.
void launch_scale(double beta, double* y, size_t count, cudaStream_t s);
}  // namespace spcg
