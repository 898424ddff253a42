// spcg::fingerprint, spcg::is_canonical and spcg::canonical_copy (spcg/spcg.hpp): the arguments checked here (sizes, element sizes, alignment, and that each
// pointer is memory of the current device: a host pointer would fault in the kernel and take the context with
// it), then one launch (kernels/fingerprint.cu).
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "kernels/cuda_check.hpp"
#include "kernels/csr_canonical.hpp"
#include "kernels/fingerprint.hpp"
#include "spcg/spcg.hpp"

namespace spcg {
namespace {

std::string named(size_t t) { return "fingerprint: array " + std::to_string(t); }

void check_reachable(const DeviceWordsRef& a, size_t t, int device) {
  cudaPointerAttributes attr{};
  CHECK_CUDA(cudaPointerGetAttributes(&attr, a.data));
  if (attr.type == cudaMemoryTypeUnregistered)
    throw UsageError(named(t) + " is not memory CUDA knows (a device, managed or pinned host allocation)");
  if (attr.type == cudaMemoryTypeDevice && attr.device != device)
    throw UsageError(named(t) + " is on CUDA device " + std::to_string(attr.device) + ", the current device is " +
                     std::to_string(device));
}

}  // namespace

std::vector<uint64_t> fingerprint(const std::vector<DeviceWordsRef>& arrays, CUstream_st* stream) {
  if (arrays.size() > static_cast<size_t>(kFingerprintMaxArrays))
    throw UsageError("fingerprint: " + std::to_string(arrays.size()) + " arrays, at most " +
                     std::to_string(kFingerprintMaxArrays));
  std::vector<FingerprintArray> in(arrays.size());
  bool any = false;
  for (size_t t = 0; t < arrays.size(); ++t) {
    const DeviceWordsRef& a = arrays[t];
    if (a.element_bytes != 4 && a.element_bytes != 8)
      throw UsageError(named(t) + ": elements of " + std::to_string(a.element_bytes) + " bytes (4 or 8)");
    if (a.count < 0) throw UsageError(named(t) + ": a negative count (" + std::to_string(a.count) + ")");
    if (a.count > 0 && !a.data) throw UsageError(named(t) + ": " + std::to_string(a.count) + " elements at null");
    if (a.count > 0 && reinterpret_cast<uintptr_t>(a.data) % a.element_bytes != 0)
      throw UsageError(named(t) + " is not aligned to its " + std::to_string(a.element_bytes) + "-byte elements");
    in[t] = FingerprintArray{a.data, a.count, a.element_bytes};
    any = any || a.count > 0;
  }
  std::vector<uint64_t> hashes(arrays.size(), 0);
  if (!any) return hashes;  // every array empty: every hash is 0, and no device is needed
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("a fingerprint of device arrays needs a GPU: " + why);
  int device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  for (size_t t = 0; t < arrays.size(); ++t)
    if (arrays[t].count > 0) check_reachable(arrays[t], t, device);
  device_fingerprint(in.data(), static_cast<int>(in.size()), hashes.data(), stream);
  return hashes;
}

namespace {
void check_ref(const DeviceCsrRef& a) {
  if (a.rows < 0 || a.cols < 0 || a.nnz < 0 || (a.rows > 0 && !a.row_ptr) || (a.nnz > 0 && (!a.col_idx || !a.values)))
    throw UsageError("DeviceCsrRef: negative sizes or missing arrays");
}
}  // namespace

bool is_canonical(const DeviceCsrRef& a, CUstream_st* stream) {
  check_ref(a);
  return device_rows_canonical(a.row_ptr, a.col_idx, a.rows, stream);
}

int64_t canonical_copy(const DeviceCsrRef& a, int32_t* out_row_ptr, int32_t* out_col_idx, double* out_values,
                       CUstream_st* stream) {
  check_ref(a);
  if (!out_row_ptr || (a.nnz > 0 && (!out_col_idx || !out_values))) throw UsageError("canonical_copy: missing output arrays");
  return device_canonical_copy(a.row_ptr, a.col_idx, a.values, a.rows, a.nnz, out_row_ptr, out_col_idx, out_values, stream);
}

std::array<uint64_t, 3> fingerprint(const DeviceCsrRef& a, CUstream_st* stream) {
  check_ref(a);
  const int64_t row_pointers = a.row_ptr ? int64_t{a.rows} + 1 : 0;  // a null {0} of 0 rows hashes as 0 too
  const std::vector<uint64_t> h = fingerprint(
      {DeviceWordsRef{a.row_ptr, row_pointers, 4}, DeviceWordsRef{a.col_idx, a.nnz, 4}, DeviceWordsRef{a.values, a.nnz, 8}},
      stream);
  return {h[0], h[1], h[2]};
}

}  // namespace spcg
