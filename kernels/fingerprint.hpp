#pragma once
// A 64-bit hash of each of a few device arrays in one launch (kernels/fingerprint.cu): the device half of
// spcg::fingerprint (spcg/spcg.hpp), the Python module's test of "the same matrix" for device inputs
// (python/spcg/_cache.py; python/spcg/_device.py keeps the NumPy reference of the same function).
#include <cuda_runtime.h>

#include <cstdint>

namespace spcg {

// One device array: `count` elements of `element_bytes` bytes, 4 (int32, each widened with its sign to 64 bits)
// or 8 (any 64-bit word, an int64's or a float64's bits), aligned to their size.
struct FingerprintArray {
  const void* data = nullptr;
  int64_t count = 0;
  int element_bytes = 8;
};

constexpr int kFingerprintMaxArrays = 3;

// hashes[t] = sum over i < count of mix(w_i + 0x9E3779B97F4A7C15 * (i + t * 2^40)) mod 2^64 for arrays[t],
// t < n <= kFingerprintMaxArrays, w_i element i as a 64-bit word and mix splitmix64's finaliser. One kernel over
// all n arrays and one device-to-host copy of the n sums, on stream s, which is synchronised before the call
// returns (work queued on s before the call is complete when the kernel reads the arrays). Nothing is launched
// when every array is empty (hashes 0). The arguments are the caller's to check (spcg::fingerprint does);
// n outside [0, kFingerprintMaxArrays] or another element size throws spcg::Error.
void device_fingerprint(const FingerprintArray* arrays, int n, uint64_t* hashes, cudaStream_t s);

}  // namespace spcg
