#include <algorithm>

#include "cuda_check.hpp"
#include "device_utils.cuh"

namespace spcg {

int device_sm_count() {
  static int count = [] {
    int dev = 0, sms = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
  }();
  return count;
}

int grid_stride_blocks(int64_t work_items, int threads_per_block, int blocks_per_sm) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{device_sm_count()} * blocks_per_sm)));
}

}  // namespace spcg
