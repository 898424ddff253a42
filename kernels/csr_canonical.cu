// A device CSR's rows in canonical order (declared in csr_canonical.hpp): the check that every row's columns
// increase strictly, and a copy with each row sorted by column (stably) and its duplicates summed in their order.
// For spcg::is_canonical / spcg::canonical_copy, which the Python module runs on a CuPy matrix instead of CuPy's
// own has_canonical_format and sum_duplicates: those compile their kernels with NVRTC on a machine's first call
// (seconds), these are compiled with the library.
// Work mapping: the check and the per-row passes take one thread per row (rows are short; a long row costs one
// thread its length, which the sort, not this pass, dominates); the sort is CUB's DeviceSegmentedSort over the rows
// (Merrill's segmented radix/merge sorts), the offsets of the result an exclusive scan of the kept counts.
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <string>

#include "kernels/csr_canonical.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"

namespace spcg {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) { return static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535LL * 16)); }

__global__ void not_canonical_kernel(int32_t rows, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                     int* __restrict__ found) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x)
    for (int32_t p = rp[i] + 1; p < rp[i + 1]; ++p)
      if (ci[p] <= ci[p - 1]) {
        *found = 1;
        break;
      }
}

// kept[i] = row i's distinct columns (its entries sorted)
__global__ void distinct_count_kernel(int32_t rows, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                      int32_t* __restrict__ kept) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    int32_t n = 0;
    for (int32_t p = rp[i]; p < rp[i + 1]; ++p) n += p == rp[i] || ci[p] != ci[p - 1];
    kept[i] = n;
  }
}

// Row i's sorted entries, each run of one column summed in its order, to out from out_rp[i] on.
__global__ void merge_runs_kernel(int32_t rows, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                  const double* __restrict__ v, const int32_t* __restrict__ out_rp,
                                  int32_t* __restrict__ out_ci, double* __restrict__ out_v) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    int32_t w = out_rp[i] - 1;
    for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
      if (p == rp[i] || ci[p] != ci[p - 1]) out_ci[++w] = ci[p], out_v[w] = v[p];
      else out_v[w] += v[p];
    }
  }
}

}  // namespace

bool device_rows_canonical(const int32_t* row_ptr, const int32_t* col_idx, int32_t rows, cudaStream_t s) {
  if (rows <= 0) return true;
  DeviceArray<int> found(1, "canonical check");
  CHECK_CUDA(cudaMemsetAsync(found.data(), 0, sizeof(int), s));
  not_canonical_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, row_ptr, col_idx, found.data());
  CHECK_LAUNCH("canonical check");
  int h = 0;
  CHECK_CUDA(cudaMemcpyAsync(&h, found.data(), sizeof h, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return h == 0;
}

int64_t device_canonical_copy(const int32_t* row_ptr, const int32_t* col_idx, const double* values, int32_t rows,
                              int64_t nnz, int32_t* out_row_ptr, int32_t* out_col_idx, double* out_values,
                              cudaStream_t s) {
  if (rows <= 0) {
    if (rows == 0) CHECK_CUDA(cudaMemsetAsync(out_row_ptr, 0, sizeof(int32_t), s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return 0;
  }
  // the rows sorted by column (stable: a column's duplicates keep their order), then each run summed
  DeviceArray<int32_t> cols(static_cast<size_t>(nnz), "canonical copy: columns");
  DeviceArray<double> vals(static_cast<size_t>(nnz), "canonical copy: values");
  if (nnz > 0) {
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceSegmentedSort::StableSortPairs(nullptr, temp_bytes, col_idx, cols.data(), values, vals.data(),
                                                         nnz, rows, row_ptr, row_ptr + 1, s));
    DeviceArray<char> temp(std::max<size_t>(temp_bytes, 1), "canonical copy: sort scratch");
    CHECK_CUDA(cub::DeviceSegmentedSort::StableSortPairs(temp.data(), temp_bytes, col_idx, cols.data(), values,
                                                         vals.data(), nnz, rows, row_ptr, row_ptr + 1, s));
  }
  DeviceArray<int32_t> kept(static_cast<size_t>(rows) + 1, "canonical copy: kept");
  distinct_count_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, row_ptr, cols.data(), kept.data());
  CHECK_LAUNCH("canonical copy: distinct columns");
  CHECK_CUDA(cudaMemsetAsync(kept.data() + rows, 0, sizeof(int32_t), s));
  size_t scan_bytes = 0;
  CHECK_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, kept.data(), out_row_ptr, rows + 1, s));
  DeviceArray<char> scan_temp(std::max<size_t>(scan_bytes, 1), "canonical copy: scan scratch");
  CHECK_CUDA(cub::DeviceScan::ExclusiveSum(scan_temp.data(), scan_bytes, kept.data(), out_row_ptr, rows + 1, s));
  merge_runs_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, row_ptr, cols.data(), vals.data(), out_row_ptr,
                                                         out_col_idx, out_values);
  CHECK_LAUNCH("canonical copy: merge");
  int32_t total = 0;
  CHECK_CUDA(cudaMemcpyAsync(&total, out_row_ptr + rows, sizeof total, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return total;
}

}  // namespace spcg
