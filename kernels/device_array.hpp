#pragma once
// RAII device memory. Allocation failures say what was being allocated, how much, and how much is free.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda_check.hpp"

namespace spcg {

void* device_allocate(size_t bytes, const char* what);  // throws DeviceMemoryError with sizes
void device_free(void* p) noexcept;
// Free device memory: the driver's free bytes plus what our allocator's pool keeps idle (device_array.cpp).
struct DeviceMemoryInfo {
  size_t free_bytes = 0, total_bytes = 0;
};
DeviceMemoryInfo device_memory_info();
// Returns what the pool keeps idle to the driver (waits for the device first), for other users of the device.
void release_idle_device_memory();
// Makes the pool and its first allocation, which cost 7-12 ms the first time in a process (one H100 run, 2M-row
// setups, 2026-11-26): CudaStart's thread calls it, so that a setup after a file's read finds the pool made.
// Best effort: a failure here is left for the first real allocation to report.
void start_device_pool() noexcept;
// Thrust's temporary storage from the same pool: thrust::cuda::par(allocator).on(stream) (a plain policy would
// cudaMalloc and cudaFree the scratch of every scan, sort and reduction).
struct ThrustPoolAllocator {
  using value_type = char;
  char* allocate(std::ptrdiff_t bytes) { return static_cast<char*>(device_allocate(static_cast<size_t>(bytes), "Thrust scratch")); }
  void deallocate(char* p, size_t) { device_free(p); }
};
void* pinned_allocate(size_t bytes, const char* what);  // page-locked host memory
void pinned_free(void* p) noexcept;

template <class T>
class DeviceArray {
 public:
  DeviceArray() = default;
  explicit DeviceArray(size_t n, const char* what = "buffer") : n_(n) {
    if (n) p_ = static_cast<T*>(device_allocate(n * sizeof(T), what));
  }
  template <class Alloc>
  DeviceArray(const std::vector<T, Alloc>& h, const char* what = "buffer") : DeviceArray(h.size(), what) {
    upload(h);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  DeviceArray(DeviceArray&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      device_free(p_);
      p_ = std::exchange(o.p_, nullptr);
      n_ = std::exchange(o.n_, 0);
    }
    return *this;
  }
  ~DeviceArray() { device_free(p_); }

  T* data() { return p_; }
  const T* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(T); }
  // Uploads and zero fills are complete when they return. A plain cudaMemcpy from pageable memory or a
  // cudaMemset runs on the legacy stream and may still be in flight then, and the solvers' streams do not wait
  // for the legacy stream (cudaStreamNonBlocking): a reduction counter zeroed that way was read by the kernel
  // before the zero landed whenever other threads kept the legacy stream busy (ranks as threads: ||b|| came out
  // as one rank's share, issue #37).
  template <class Alloc>
  void upload(const std::vector<T, Alloc>& h) {
    if (h.size() != n_) throw Error("DeviceArray::upload: size mismatch");
    if (n_) {
      CHECK_CUDA(cudaMemcpyAsync(p_, h.data(), bytes(), cudaMemcpyHostToDevice, cudaStreamLegacy));
      CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  void zero() {
    if (n_) {
      CHECK_CUDA(cudaMemsetAsync(p_, 0, bytes(), cudaStreamLegacy));
      CHECK_CUDA(cudaStreamSynchronize(cudaStreamLegacy));
    }
  }
  // std::vector<T> by default; HostVector<T> (or any allocator) on request.
  template <class Vector = std::vector<T>>
  Vector download() const {
    Vector h(n_);
    if (n_) CHECK_CUDA(cudaMemcpy(h.data(), p_, bytes(), cudaMemcpyDeviceToHost));
    return h;
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Page-locked host memory: device-to-host copies into it skip the driver's staging copy (block CG reads a small
// matrix back every step).
template <class T>
class PinnedArray {
 public:
  explicit PinnedArray(size_t n, const char* what = "pinned buffer") : n_(n) {
    if (n) p_ = static_cast<T*>(pinned_allocate(n * sizeof(T), what));
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() { pinned_free(p_); }
  T* data() { return p_; }
  size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Copies large host arrays to the device at the link's speed. Pageable cudaMemcpy goes through the driver's
// staging buffers: H100 machine, 175 MB (the 128^3 CSR) in 21.5-22.8 ms (8.1-8.5 GB/s). Page-locking the
// array in place took 3.4-4.3 ms and the copy then 3.4 ms (54.5 GB/s). Arrays below kPinnedUploadBytes are
// copied plainly (locking costs more than it saves there).
// Larger arrays are locked in chunks, each chunk's copy running while the next is locked: 67 / 176 / 448 MB
// took 2.6-3.8 / 6.4-7.5 / 16-18 ms locked whole then copied, 2.0 / 4.3-4.9 / 10.2-10.8 ms in chunks of 32 MB
// (pageable: 4.6-6.6 / 17 / 43-45 ms; a pinned staging ring filled by 4 threads: 3.6-4.9 / 9.5-12 / 20-35 ms;
// one H100 run, 2026-11-26). The chunks end on 2 MiB boundaries (a huge page's), so no page is locked twice.
// The pages stay locked until the uploader goes (its owner keeps it as long as it keeps the host arrays): an
// unlock holds back every other thread's CUDA calls while it runs (448 MB: 11 ms, in which 20 launches with
// their syncs took 9.7 ms), so unlocked on a helper thread behind the copies it delayed the setup's next steps
// (poisson3d:200's statistics 1.6 -> 10-14 ms, the whole setup 85 -> 100-110 ms).
class PinnedUploader {
 public:
  static constexpr size_t kPinnedUploadBytes = size_t{8} << 20;
  static constexpr size_t kLockedChunkBytes = size_t{32} << 20;
  static constexpr size_t kChunkAlignment = size_t{2} << 20;
  explicit PinnedUploader(cudaStream_t s = 0) : stream_(s) {}
  ~PinnedUploader();
  PinnedUploader(const PinnedUploader&) = delete;
  PinnedUploader& operator=(const PinnedUploader&) = delete;
  // Enqueues dst <- src; src must stay alive and unchanged until finish() returns, and alive until this uploader
  // is destroyed (which unlocks it).
  void copy(void* dst, const void* src, size_t bytes);
  // Waits for every copy.
  void finish();

 private:
  cudaStream_t stream_;
  std::vector<const void*> locked_;
};

// n x k dense block on the device, row-major (entry (i, j) at i * k + j), matching spcg::DenseBlock.
struct DeviceBlock {
  int32_t rows = 0;
  int32_t cols = 0;
  DeviceArray<double> values;

  DeviceBlock() = default;
  DeviceBlock(int32_t r, int32_t c, const char* what = "dense block")
      : rows(r), cols(c), values(static_cast<size_t>(r) * static_cast<size_t>(c), what) {}
  double* data() { return values.data(); }
  const double* data() const { return values.data(); }
  size_t size() const { return values.size(); }
};

}  // namespace spcg
