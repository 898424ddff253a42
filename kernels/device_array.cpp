#include "kernels/device_array.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>

namespace spcg {

static std::string mib(size_t b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / (1024.0 * 1024.0));
  return s;
}

namespace {

// Device memory comes from CUDA's stream-ordered pool of the device (cudaMallocAsync), which keeps what is freed
// for the next allocation: a cudaMalloc/cudaFree pair cost 0.08-0.31 ms on the H100 (1-500 MiB; cudaFree also
// unmaps), a pool pair 3-5 us, and AMG's setup makes ~60 per level. The pool's operations go to a stream of its
// own (never the legacy stream, which a graph capture on another stream forbids). A free first waits for the
// device, as cudaFree does, so that memory back in the pool is in use nowhere; an allocation then has nothing
// to wait for, and its stream is synchronised so that any stream may use it at once.
class DevicePool {
 public:
  DevicePool() {
    int device = 0, supported = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess || !supported ||
        cudaDeviceGetDefaultMemPool(&pool_, device) != cudaSuccess ||
        cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) != cudaSuccess) {
      cudaGetLastError();
      pool_ = nullptr;  // plain cudaMalloc / cudaFree
      return;
    }
    uint64_t keep_all = UINT64_MAX;
    cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep_all);
  }
  cudaError_t allocate(void** p, size_t bytes) const {
    if (!pool_) return cudaMalloc(p, bytes);
    cudaError_t e = cudaMallocAsync(p, bytes, stream_);
    if (e == cudaErrorMemoryAllocation) {  // memory the pool keeps idle may be what is missing
      cudaGetLastError();
      trim();
      e = cudaMallocAsync(p, bytes, stream_);
    }
    if (e != cudaSuccess) return e;
    return cudaStreamSynchronize(stream_);
  }
  void free(void* p) const {
    if (!pool_) {
      cudaFree(p);
      return;
    }
    cudaDeviceSynchronize();
    cudaFreeAsync(p, stream_);
  }
  void trim() const {
    if (!pool_) return;
    cudaDeviceSynchronize();
    cudaMemPoolTrimTo(pool_, 0);
  }
  size_t idle_bytes() const {
    if (!pool_) return 0;
    uint64_t reserved = 0, used = 0;
    cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved);
    cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used);
    return reserved > used ? static_cast<size_t>(reserved - used) : 0;
  }

 private:
  cudaMemPool_t pool_ = nullptr;
  cudaStream_t stream_ = nullptr;  // never destroyed: frees may run during static destruction
};

std::atomic<bool> pool_made{false};
const DevicePool& device_pool() {
  static const DevicePool* pool = [] {
    const DevicePool* p = new DevicePool;  // process lifetime (see stream_)
    pool_made = true;
    return p;
  }();
  return *pool;
}

}  // namespace

DeviceMemoryInfo device_memory_info() {
  DeviceMemoryInfo info;
  CHECK_CUDA(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  info.free_bytes += device_pool().idle_bytes();
  return info;
}

void release_idle_device_memory() {
  if (pool_made) device_pool().trim();  // nothing allocated yet: no pool to trim, and no CUDA to start
}

void start_device_pool() noexcept {
  try {
    device_free(device_allocate(size_t{1} << 20, "the pool's first block"));
  } catch (const std::exception&) {
    cudaGetLastError();
  }
}

void* device_allocate(size_t bytes, const char* what) {
  void* p = nullptr;
  const cudaError_t e = device_pool().allocate(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    const DeviceMemoryInfo info = device_memory_info();
    throw DeviceMemoryError("not enough GPU memory for " + std::string(what) + ": needed " + mib(bytes) + ", " +
                            mib(info.free_bytes) + " free of " + mib(info.total_bytes));
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
  if (p) device_pool().free(p);  // a failing free in a destructor cannot be reported; the next checked call sees it
}

PinnedUploader::~PinnedUploader() {
  for (const void* p : locked_) cudaHostUnregister(const_cast<void*>(p));
}

void PinnedUploader::copy(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (bytes < kPinnedUploadBytes) {
    CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
    return;
  }
  // a chunk at a time (the class's comment says why), each ending on a 2 MiB boundary
  const char* from = static_cast<const char*>(src);
  const char* const end = from + bytes;
  char* to = static_cast<char*>(dst);
  while (from < end) {
    const uintptr_t past = (reinterpret_cast<uintptr_t>(from) + kLockedChunkBytes + kChunkAlignment - 1) / kChunkAlignment * kChunkAlignment;
    const char* next = std::min(end, reinterpret_cast<const char*>(past));
    const size_t len = static_cast<size_t>(next - from);
    cudaPointerAttributes at{};
    const bool locked_already = cudaPointerGetAttributes(&at, from) == cudaSuccess && at.type == cudaMemoryTypeHost;
    if (locked_already) {
      // (pinned or registered by its owner: copied as it is)
    } else if (cudaHostRegister(const_cast<char*>(from), len, cudaHostRegisterDefault) == cudaSuccess) {
      locked_.push_back(from);
    } else {
      cudaGetLastError();  // not lockable here (not supported): a plain copy instead
    }
    CHECK_CUDA(cudaMemcpyAsync(to, from, len, cudaMemcpyHostToDevice, stream_));
    to += len;
    from = next;
  }
}

void PinnedUploader::finish() { CHECK_CUDA(cudaStreamSynchronize(stream_)); }

}  // namespace spcg
