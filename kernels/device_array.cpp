#include "device_array.hpp"

#include <cstdio>

namespace spcg {

static std::string mib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / (1024.0 * 1024.0));
  return s;
}

void* device_allocate(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw DeviceMemoryError("not enough GPU memory for " + std::string(what) + ": needed " + mib(bytes) + ", " +
                            mib(free_b) + " free of " + mib(total_b));
  }
  CHECK_CUDA(e);
  return p;
}

void* pinned_allocate(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    throw DeviceMemoryError("not enough page-locked host memory for " + std::string(what) + ": needed " + mib(bytes));
  }
  CHECK_CUDA(e);
  return p;
}

void pinned_free(void* p) noexcept {
  if (p) cudaFreeHost(p);
}

void device_free(void* p) noexcept {
  if (p) cudaFree(p);  // a failing free in a destructor cannot be reported; the next checked call sees it
}

}  // namespace spcg
