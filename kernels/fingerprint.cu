// A 64-bit hash of each of up to three device arrays (declared in fingerprint.hpp), for spcg::fingerprint: the
// Python module's spcg.cg compares a device matrix with its cached setup by these hashes (python/spcg/_cache.py).
// The function is python/spcg/_device.py's (its NumPy code is the reference the tests compare with):
//   hash_t = sum over i of mix(w_i + GOLDEN * (i + t * 2^40)) mod 2^64,
// w_i element i as a 64-bit word (an int32 widened with its sign, as NumPy's astype(int64); a 64-bit element's
// bits), t the array's position, mix splitmix64's finaliser. Addition mod 2^64 is associative and commutative,
// so the atomics' order does not matter: the result is the same on every run and grid.
// Work mapping: one launch over all the arrays, one after the other: a grid-stride loop per array (4 elements per
// thread per step, their loads issued together), the block's sum by warp shuffles, then one atomicAdd per block
// and array. The last block to arrive (dev::last_block_arrives) moves the sums to `out`, leaves them zero and
// resets the counter, so the per-thread scratch is ready for the next call without a memset; the host then reads
// the sums with one copy.
#include <algorithm>
#include <string>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/fingerprint.hpp"

namespace spcg {
namespace {

struct FingerprintTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 8;
  static constexpr int unroll = 4;  // elements per thread per step (loads in flight)
};

constexpr unsigned long long kGolden = 0x9E3779B97F4A7C15ull;

struct FingerprintLaunch {
  const void* data[kFingerprintMaxArrays];
  int64_t count[kFingerprintMaxArrays];
  int wide[kFingerprintMaxArrays];  // 1: 64-bit words, 0: int32
  int arrays;
};

// Device scratch of one host thread (calls on a thread run one after the other: each ends synchronised).
struct FingerprintScratch {
  unsigned long long sums[kFingerprintMaxArrays];  // the blocks' atomics; zero between calls
  unsigned long long out[kFingerprintMaxArrays];   // the hashes, for the copy to the host
  unsigned int arrived;                            // blocks done; zero between calls
};

__device__ __forceinline__ unsigned long long splitmix_finaliser(unsigned long long z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// This thread's share of the sum over p[0..n), indices first + i.
template <class T>
__device__ __forceinline__ unsigned long long thread_sum(const T* __restrict__ p, int64_t n, unsigned long long first) {
  constexpr int U = FingerprintTuning::unroll;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  unsigned long long s = 0;
  for (int64_t base = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < n; base += U * stride) {
    unsigned long long w[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * stride;
      // widened with the sign (int32), or the word itself (long long)
      w[u] = i < n ? static_cast<unsigned long long>(static_cast<long long>(p[i])) : 0ull;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * stride;
      if (i < n) s += splitmix_finaliser(w[u] + kGolden * (first + static_cast<unsigned long long>(i)));
    }
  }
  return s;
}

// Sum over the block (valid in thread 0); blockDim.x a multiple of 32.
__device__ __forceinline__ unsigned long long block_total(unsigned long long v) {
  __shared__ unsigned long long warp_totals[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  __syncthreads();  // warp_totals may still be read by the previous array's call
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  v = 0;
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_totals[lane] : 0ull;
#pragma unroll
    for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  }
  return v;
}

__global__ void __launch_bounds__(FingerprintTuning::threads)
    fingerprint_kernel(FingerprintLaunch a, FingerprintScratch* scratch) {
  for (int t = 0; t < a.arrays; ++t) {
    const unsigned long long first = static_cast<unsigned long long>(t) << 40;
    const unsigned long long s =
        a.wide[t] ? thread_sum(static_cast<const long long*>(a.data[t]), a.count[t], first)
                  : thread_sum(static_cast<const int32_t*>(a.data[t]), a.count[t], first);
    const unsigned long long total = block_total(s);
    if (threadIdx.x == 0 && total != 0) atomicAdd(&scratch->sums[t], total);
  }
  if (!dev::last_block_arrives(&scratch->arrived)) return;
  if (threadIdx.x < a.arrays) scratch->out[threadIdx.x] = atomicExch(&scratch->sums[threadIdx.x], 0ull);
  if (threadIdx.x == 0) scratch->arrived = 0;
}

// The calling thread's scratch: device sums (zeroed once, on the first call's stream) and a pinned slot for the
// copy back, made on first use and again when the thread's current device changes; freed when the thread ends.
class ThreadScratch {
 public:
  ThreadScratch() = default;
  ThreadScratch(const ThreadScratch&) = delete;
  ThreadScratch& operator=(const ThreadScratch&) = delete;
  ~ThreadScratch() {
    release();
    if (host_) cudaFreeHost(host_);
  }

  void ready(cudaStream_t s) {
    int device = 0;
    CHECK_CUDA(cudaGetDevice(&device));
    if (!host_) CHECK_CUDA(cudaMallocHost(&host_, sizeof(unsigned long long) * kFingerprintMaxArrays));
    if (device_scratch_ && device == device_) return;
    release();
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, sizeof(FingerprintScratch)));
    device_scratch_ = static_cast<FingerprintScratch*>(p);
    CHECK_CUDA(cudaMemsetAsync(device_scratch_, 0, sizeof(FingerprintScratch), s));  // before the kernel on s
    device_ = device;  // ready once zeroed (a failed memset makes the next call start again)
  }
  FingerprintScratch* device_scratch() const { return device_scratch_; }
  unsigned long long* host() const { return host_; }

 private:
  void release() noexcept {  // errors ignored: the thread may end after CUDA has shut down
    if (device_scratch_ && cudaFree(device_scratch_) != cudaSuccess) cudaGetLastError();  // not a later launch's
    device_scratch_ = nullptr;
    device_ = -1;
  }
  FingerprintScratch* device_scratch_ = nullptr;
  unsigned long long* host_ = nullptr;
  int device_ = -1;
};

}  // namespace

void device_fingerprint(const FingerprintArray* arrays, int n, uint64_t* hashes, cudaStream_t s) {
  if (n < 0 || n > kFingerprintMaxArrays)
    throw Error("device_fingerprint: " + std::to_string(n) + " arrays (at most " +
                std::to_string(kFingerprintMaxArrays) + ")");
  FingerprintLaunch launch{};
  launch.arrays = n;
  int64_t largest = 0;
  for (int t = 0; t < n; ++t) {
    if (arrays[t].element_bytes != 4 && arrays[t].element_bytes != 8)
      throw Error("device_fingerprint: elements of " + std::to_string(arrays[t].element_bytes) + " bytes");
    hashes[t] = 0;
    launch.data[t] = arrays[t].data;
    launch.count[t] = std::max<int64_t>(0, arrays[t].count);
    launch.wide[t] = arrays[t].element_bytes == 8;
    largest = std::max(largest, launch.count[t]);
  }
  if (largest == 0) return;  // every array empty: every sum is 0, nothing to launch
  thread_local ThreadScratch scratch;
  scratch.ready(s);
  const int blocks = grid_stride_blocks(largest, FingerprintTuning::threads, FingerprintTuning::blocks_per_sm);
  fingerprint_kernel<<<blocks, FingerprintTuning::threads, 0, s>>>(launch, scratch.device_scratch());
  CHECK_LAUNCH("fingerprint");
  CHECK_CUDA(cudaMemcpyAsync(scratch.host(), scratch.device_scratch()->out, sizeof(unsigned long long) * n,
                             cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  for (int t = 0; t < n; ++t) hashes[t] = scratch.host()[t];
}

}  // namespace spcg
