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

PinnedUploader::~PinnedUploader() {
  if (unlocking_.joinable()) unlocking_.join();
  for (const void* p : locked_) cudaHostUnregister(const_cast<void*>(p));  // finish() was never called
}

void PinnedUploader::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (bytes >= kPinnedUploadBytes) {
    const cudaError_t e = cudaHostRegister(const_cast<void*>(src), bytes, cudaHostRegisterDefault);
    if (e == cudaSuccess) {
      locked_.push_back(src);
    } else {
      cudaGetLastError();  // not lockable here (already locked, or not supported): a plain copy instead
    }
  }
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
}

void PinnedUploader::finish() {
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  if (locked_.empty()) return;
  if (unlocking_.joinable()) unlocking_.join();
  unlocking_ = std::thread([locked = std::move(locked_)] {
    for (const void* p : locked) cudaHostUnregister(const_cast<void*>(p));
  });
  locked_.clear();
}

}  // namespace spcg
