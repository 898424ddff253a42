// Deterministic carry fix-up for the segmented-reduction kernels (coo, csr-merge): each block or warp interval
// leaves the partial sum of the row it was in the middle of; runs of equal rows are summed in order by the
// thread at the head of the run (Merrill & Garland 2016 fix up with a second pass the same way).
#include "kernels/device_utils.cuh"
#include "kernels/variants/spmv_launchers.hpp"

namespace spcg {
namespace {
struct CarryFixupTuning {
  static constexpr int threads = 256;
};

__global__ void carry_fixup_kernel(const int32_t* __restrict__ row, const double* __restrict__ val, int64_t count,
                                   int32_t rows_limit, double alpha, double* __restrict__ y, int ld) {
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= count) return;
  const int32_t r = row[t];
  if (r >= rows_limit || (t > 0 && row[t - 1] == r)) return;
  double sum = 0;
  for (int64_t u = t; u < count && row[u] == r; ++u) sum += val[u];
  y[int64_t{r} * ld] += alpha * sum;
}
}  // namespace

void launch_carry_fixup(const int32_t* carry_row, const double* carry_val, int64_t count, int32_t rows_limit,
                        double alpha, double* y, int ld, cudaStream_t s) {
  if (count == 0) return;
  const int64_t blocks = (count + CarryFixupTuning::threads - 1) / CarryFixupTuning::threads;
  carry_fixup_kernel<<<static_cast<unsigned>(blocks), CarryFixupTuning::threads, 0, s>>>(carry_row, carry_val, count,
                                                                                        rows_limit, alpha, y, ld);
  CHECK_LAUNCH("carry-fixup");
}

}  // namespace spcg
