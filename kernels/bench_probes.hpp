#pragma once
// Benchmark probes: device passes that are not operators but bound what operators can reach.
#include <cuda_runtime.h>

#include <cstdint>

namespace spcg {

// The gather floor of a CSR matrix (kernels/gather_floor.cu): sum of val[k] * x[col[k]] over all nonzeros,
// streamed without row structure. partials: gather_floor_partials(nnz) doubles.
int64_t gather_floor_partials(int64_t nnz);
void launch_gather_floor(int64_t nnz, const double* val, const int32_t* col, const double* x, double* partials,
                         cudaStream_t stream);

}  // namespace spcg
