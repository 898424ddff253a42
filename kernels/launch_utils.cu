#include <algorithm>
#include <map>
#include <tuple>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

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

size_t device_max_shared_per_block() {
  static size_t bytes = [] {
    int dev = 0, optin = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return static_cast<size_t>(optin);
  }();
  return bytes;
}

int64_t device_l2_bytes() {
  static int64_t bytes = [] {
    int dev = 0, l2 = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    return int64_t{l2};
  }();
  return bytes;
}

int grid_stride_blocks(int64_t work_items, int threads_per_block, int blocks_per_sm) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(needed, int64_t{device_sm_count()} * blocks_per_sm)));
}

int resident_blocks(const void* kernel, int threads_per_block, size_t dynamic_smem) {
  static std::map<std::tuple<const void*, int, size_t>, int> cache;
  const auto key = std::make_tuple(kernel, threads_per_block, dynamic_smem);
  auto it = cache.find(key);
  if (it == cache.end()) {
    int per_sm = 0;
    CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads_per_block, dynamic_smem));
    it = cache.emplace(key, std::max(1, per_sm) * device_sm_count()).first;
  }
  return it->second;
}

}  // namespace spcg
