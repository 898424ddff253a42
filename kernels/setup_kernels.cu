// Setup on the device: statistics, DIA, SELL-32 and ELL from the device CSR (declared in setup_kernels.hpp).
// Work mapping: one thread per row (grid-stride) for the statistics and the conversions, one thread per
// 32-row slice for the SELL widths; warp reductions, then one atomic per warp and quantity. Every quantity
// is an integer count, a minimum or maximum, or a value computed by the host's formula, so the results equal
// sparse/stats.cpp and sparse/formats.cpp bit for bit (tests/test_kernels.cpp checks it on every test matrix).
// Why on the device: the 7-point 128^3 matrix (14.6M entries) took 680 ms of host statistics, conversion and
// analysis before this (issue #22); its CSR has to be uploaded anyway, and a pass over it here costs well
// under a millisecond.
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <thrust/iterator/counting_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/kernel_module.cuh"
#include "kernels/device_utils.cuh"
#include "sparse/formats.hpp"
#include "kernels/setup_kernels.hpp"

namespace spcg {
namespace {

struct SetupTuning {
  static constexpr int threads = 256;
  static constexpr int blocks_per_sm = 4;
};

// Device accumulators of StatsTotals (unsigned for atomicAdd, long long for atomicMin/Max, doubles as the
// bits of non-negative values, whose order is the integer order of their bits).
struct DeviceTotals {
  unsigned long long length_sum, length_sum_sq, empty_rows, missing_diagonal, nonpositive_diagonal, dominant,
      strictly_dominant, explicit_zeros, non_finite, lower_entries, matched_upper, unmatched;
  long long row_min, row_max, bandwidth, first_nonpositive_row;
  unsigned long long max_abs_bits, max_asymmetry_bits;
  unsigned long long histogram[StatsTotals::kBuckets];
  unsigned long long distinct_diagonals;
};

template <class T>
__device__ __forceinline__ T warp_reduce(T v, int op) {  // op 0 sum, 1 min, 2 max
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const T o = __shfl_down_sync(0xffffffffu, v, off);
    v = op == 0 ? v + o : op == 1 ? (o < v ? o : v) : (o > v ? o : v);
  }
  return v;
}

// The host's std::max(a, b): b only when a < b, so a NaN never replaces a number.
__device__ __forceinline__ double host_max(double a, double b) { return a < b ? b : a; }

// Row statistics: one thread per row, its entries in order (the off-diagonal sum is the host's, term by term).
template <class Offset>  // the row offsets as stored: int32, or 64-bit past 2^31 entries
__global__ void __launch_bounds__(SetupTuning::threads)
    stats_rows_kernel(int rows, const Offset* __restrict__ rp, const int* __restrict__ ci, const double* __restrict__ val,
                      unsigned char* __restrict__ diagonal_seen, DeviceTotals* out) {
  __shared__ unsigned long long histogram[StatsTotals::kBuckets];
  for (int b = threadIdx.x; b < StatsTotals::kBuckets; b += blockDim.x) histogram[b] = 0;
  __syncthreads();
  unsigned long long sum = 0, sum_sq = 0, empty = 0, missing = 0, nonpos = 0, dominant = 0, strict = 0, zeros = 0,
                     non_finite = 0;
  long long row_min = LLONG_MAX, row_max = 0, band = 0, first_nonpos = LLONG_MAX;
  double max_abs = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    const Offset b = rp[i], e = rp[i + 1];
    const long long len = e - b;
    row_min = min(row_min, len), row_max = max(row_max, len);
    sum += len, sum_sq += static_cast<unsigned long long>(len * len), empty += len == 0;
    atomicAdd(&histogram[len == 0 ? 0 : 64 - __clzll(len)], 1ull);
    double diag = 0, off = 0;
    bool has_diag = false;
    for (Offset p = b; p < e; ++p) {
      const int j = ci[p];
      const double v = val[p];
      non_finite += !isfinite(v);
      max_abs = host_max(max_abs, fabs(v));
      zeros += v == 0.0;
      const long long d = static_cast<long long>(j) - i;
      band = max(band, d < 0 ? -d : d);
      unsigned char* seen = diagonal_seen + (d + rows - 1);
      if (!*seen) *seen = 1;
      if (j == i) diag = v, has_diag = true;
      else off += fabs(v);
    }
    missing += !has_diag;
    if (!(has_diag && diag > 0)) ++nonpos, first_nonpos = min(first_nonpos, static_cast<long long>(i));
    dominant += fabs(diag) >= off;
    strict += fabs(diag) > off;
  }
  const unsigned long long counts[] = {sum, sum_sq, empty, missing, nonpos, dominant, strict, zeros, non_finite};
  unsigned long long* targets[] = {&out->length_sum, &out->length_sum_sq, &out->empty_rows, &out->missing_diagonal,
                                   &out->nonpositive_diagonal, &out->dominant, &out->strictly_dominant,
                                   &out->explicit_zeros, &out->non_finite};
  const bool lane0 = (threadIdx.x & 31) == 0;
#pragma unroll
  for (int q = 0; q < 9; ++q) {
    const unsigned long long v = warp_reduce(counts[q], 0);
    if (lane0 && v) atomicAdd(targets[q], v);
  }
  row_min = warp_reduce(row_min, 1), first_nonpos = warp_reduce(first_nonpos, 1);
  row_max = warp_reduce(row_max, 2), band = warp_reduce(band, 2);
  // non-negative doubles order as their bits
  const unsigned long long abs_bits = warp_reduce(static_cast<unsigned long long>(__double_as_longlong(max_abs)), 2);
  if (lane0) {
    atomicMin(&out->row_min, row_min), atomicMin(&out->first_nonpositive_row, first_nonpos);
    atomicMax(&out->row_max, row_max), atomicMax(&out->bandwidth, band);
    atomicMax(&out->max_abs_bits, abs_bits);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < StatsTotals::kBuckets; b += blockDim.x)
    if (histogram[b]) atomicAdd(&out->histogram[b], histogram[b]);
}

// Symmetry, each entry (i, j) looking (j, i) up by binary search in row j as the host does. A warp takes 32
// consecutive rows: a lane checks a short row alone, the whole warp strides over a long one (a dense row's
// thousands of dependent searches would serialise on one thread; a warp for every 7-entry row idles 25 lanes).
// Without BothTriangles only the upper entries look; the lower ones are counted (stats.cpp explains the check).
template <bool BothTriangles, class Offset>
__device__ __forceinline__ void check_mirror(int64_t i, Offset p, const Offset* __restrict__ rp, const int* __restrict__ ci,
                                             const double* __restrict__ val, unsigned long long& lower,
                                             unsigned long long& matched, unsigned long long& unmatched,
                                             double& max_asym) {
  const int j = ci[p];
  if (j == i) return;
  if (!BothTriangles && j < i) {
    ++lower;
    return;
  }
  Offset lo = rp[j], hi = rp[j + 1];
  while (lo < hi) {
    const Offset mid = lo + ((hi - lo) >> 1);  // lo + hi passes int32 beyond 2^30 entries (poisson3d:600 did)
    if (ci[mid] < i) lo = mid + 1;
    else hi = mid;
  }
  const double v = val[p];
  double vji = 0;
  if (lo == rp[j + 1] || ci[lo] != i) ++unmatched;
  else vji = val[lo], matched += j > i;
  const double scale = host_max(fabs(v), fabs(vji));
  if (scale > 0) max_asym = host_max(max_asym, fabs(v - vji) / scale);
}

template <bool BothTriangles, class Offset>
__global__ void __launch_bounds__(SetupTuning::threads)
    stats_symmetry_kernel(int rows, const Offset* __restrict__ rp, const int* __restrict__ ci,
                          const double* __restrict__ val, DeviceTotals* out) {
  constexpr int kLongRow = 32;
  unsigned long long lower = 0, matched = 0, unmatched = 0;
  double max_asym = 0;
  const int lane = threadIdx.x & 31;
  const int64_t warps = int64_t{gridDim.x} * blockDim.x / 32;
  for (int64_t first = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32 * 32; first < rows; first += warps * 32) {
    const int64_t i = first + lane;
    const Offset b = i < rows ? rp[i] : 0, e = i < rows ? rp[i + 1] : 0;
    const bool long_row = e - b > kLongRow;
    if (!long_row)
      for (Offset p = b; p < e; ++p) check_mirror<BothTriangles>(i, p, rp, ci, val, lower, matched, unmatched, max_asym);
    for (unsigned todo = __ballot_sync(0xffffffffu, long_row); todo; todo &= todo - 1) {
      const int owner = __ffs(todo) - 1;
      const int64_t row = first + owner;
      const Offset rb = __shfl_sync(0xffffffffu, b, owner), re = __shfl_sync(0xffffffffu, e, owner);
      for (Offset p = rb + lane; p < re; p += 32)
        check_mirror<BothTriangles>(row, p, rp, ci, val, lower, matched, unmatched, max_asym);
    }
  }
  lower = warp_reduce(lower, 0), matched = warp_reduce(matched, 0), unmatched = warp_reduce(unmatched, 0);
  const unsigned long long asym_bits = warp_reduce(static_cast<unsigned long long>(__double_as_longlong(max_asym)), 2);
  if (lane == 0) {
    if (lower) atomicAdd(&out->lower_entries, lower);
    if (matched) atomicAdd(&out->matched_upper, matched);
    if (unmatched) atomicAdd(&out->unmatched, unmatched);
    atomicMax(&out->max_asymmetry_bits, asym_bits);
  }
}

__global__ void count_flags_kernel(int64_t n, const unsigned char* __restrict__ flags, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    c += flags[i];
  c = warp_reduce(c, 0);
  if ((threadIdx.x & 31) == 0 && c) atomicAdd(count, c);
}

// The diagonal entry of row `row` (0 when absent), for the first non-positive one's value.
template <class Offset>
__global__ void diagonal_value_kernel(int row, const Offset* rp, const int* ci, const double* val, double* out) {
  double d = 0;
  for (Offset p = rp[row]; p < rp[row + 1]; ++p)
    if (ci[p] == row) d = val[p];
  *out = d;
}

// DIA: slot_of[offset + rows - 1] is the diagonal index of an occupied offset; every entry goes to its slot.
__global__ void slot_kernel(int diagonals, const int* __restrict__ occupied, int* __restrict__ slot_of) {
  const int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < diagonals) slot_of[occupied[k]] = k;
}
template <class Offset>
__global__ void dia_scatter_kernel(int rows, const Offset* __restrict__ rp, const int* __restrict__ ci,
                                   const double* __restrict__ val, const int* __restrict__ slot_of, int64_t stride,
                                   double* __restrict__ out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x)
    for (Offset p = rp[i]; p < rp[i + 1]; ++p) out[int64_t{slot_of[ci[p] - i + rows - 1]} * stride + i] = val[p];
}
// dia_is_symmetric's comparison: offset -o of row i against offset +o of row i - o, for every negative offset.
__global__ void dia_mirror_kernel(int rows, int diagonals, const int* __restrict__ offsets, const double* __restrict__ v,
                                  int64_t stride, int* __restrict__ differs) {
  const int k = blockIdx.y;  // a negative offset (the caller launches one row of blocks per negative diagonal)
  const int o = offsets[k], up = diagonals - 1 - k;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x - o; i < rows; i += int64_t{gridDim.x} * blockDim.x)
    if (v[int64_t{k} * stride + i] != v[int64_t{up} * stride + i + o]) *differs = 1;
}

// SELL-32: slice widths (into slice_ptr, scanned afterwards), then the padded, column-major slices.
__global__ void sell_width_kernel(int rows, int64_t slices, const int* __restrict__ rp, int* __restrict__ width,
                                  int64_t* __restrict__ slice_len) {
  for (int64_t s = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; s < slices; s += int64_t{gridDim.x} * blockDim.x) {
    int w = 0;
    const int64_t stop = (s + 1) * 32 < rows ? (s + 1) * 32 : int64_t{rows};
    for (int64_t r = s * 32; r < stop; ++r) w = max(w, rp[r + 1] - rp[r]);
    width[s] = w;
    slice_len[s] = int64_t{w} * 32;
  }
}
__global__ void sell_fill_kernel(int rows, int64_t slices, const int* __restrict__ rp, const int* __restrict__ ci,
                                 const double* __restrict__ val, const int64_t* __restrict__ slice_ptr,
                                 const int* __restrict__ width, int* __restrict__ col_out, double* __restrict__ val_out) {
  for (int64_t pos = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; pos < slices * 32;
       pos += int64_t{gridDim.x} * blockDim.x) {
    const int64_t s = pos / 32, r = pos % 32;
    const bool real = pos < rows;
    const int b = real ? rp[pos] : 0, len = real ? rp[pos + 1] - b : 0;
    const int pad_col = len ? ci[b + len - 1] : 0;
    for (int k = 0; k < width[s]; ++k) {
      const int64_t at = slice_ptr[s] + int64_t{k} * 32 + r;
      col_out[at] = k < len ? ci[b + k] : pad_col;
      val_out[at] = k < len ? val[b + k] : 0.0;
    }
  }
}
__global__ void ell_fill_kernel(int rows, int width, const int* __restrict__ rp, const int* __restrict__ ci,
                                const double* __restrict__ val, int* __restrict__ col_out, double* __restrict__ val_out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    const int b = rp[i], len = rp[i + 1] - b;
    const int pad_col = len ? ci[b + len - 1] : 0;
    for (int k = 0; k < width; ++k) {
      const int64_t at = int64_t{k} * rows + i;
      col_out[at] = k < len ? ci[b + k] : pad_col;
      val_out[at] = k < len ? val[b + k] : 0.0;
    }
  }
}

// HYB: row lengths counted by length; the ELL head (the first `limit` entries, padded like csr_to_ell pads the
// head matrix); the COO tail (entries past `limit`) at the rows' scanned offsets.
__global__ void length_count_kernel(int rows, const int* __restrict__ rp, unsigned long long* __restrict__ count) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x)
    atomicAdd(&count[rp[i + 1] - rp[i]], 1ull);
}
__global__ void hyb_head_kernel(int rows, int width, int limit, const int* __restrict__ rp, const int* __restrict__ ci,
                                const double* __restrict__ val, int* __restrict__ col_out, double* __restrict__ val_out,
                                int64_t* __restrict__ tail_len) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    const int b = rp[i], len = rp[i + 1] - b, head = min(len, limit);
    const int pad_col = head ? ci[b + head - 1] : 0;
    for (int k = 0; k < width; ++k) {
      const int64_t at = int64_t{k} * rows + i;
      col_out[at] = k < head ? ci[b + k] : pad_col;
      val_out[at] = k < head ? val[b + k] : 0.0;
    }
    tail_len[i] = len - head;
  }
}
__global__ void hyb_tail_kernel(int rows, int limit, const int* __restrict__ rp, const int* __restrict__ ci,
                                const double* __restrict__ val, const int64_t* __restrict__ tail_at,
                                int* __restrict__ row_out, int* __restrict__ col_out, double* __restrict__ val_out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows; i += int64_t{gridDim.x} * blockDim.x) {
    int64_t at = tail_at[i];
    for (int p = rp[i] + limit; p < rp[i + 1]; ++p, ++at)
      row_out[at] = static_cast<int>(i), col_out[at] = ci[p], val_out[at] = val[p];
  }
}

int blocks_for(int64_t items) { return grid_stride_blocks(items, SetupTuning::threads, SetupTuning::blocks_per_sm); }

// *first = the smallest i with a[i] != b[i] (left at n when none): a grid-stride pass, one atomicMin per thread.
__global__ void first_difference_kernel(const int32_t* a, const int32_t* b, int64_t n, unsigned long long* first) {
  unsigned long long mine = static_cast<unsigned long long>(n);
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    if (a[i] != b[i]) {
      mine = static_cast<unsigned long long>(i);
      break;  // later i of this thread are larger
    }
  if (mine < static_cast<unsigned long long>(n)) atomicMin(first, mine);
}

template <class T>
T fetch(const T* device_value, cudaStream_t s) {
  T h{};
  CHECK_CUDA(cudaMemcpyAsync(&h, device_value, sizeof(T), cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return h;
}

__global__ void to_float_kernel(const double* __restrict__ in, int64_t count, float* __restrict__ out) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x)
    out[i] = static_cast<float>(in[i]);
}

__global__ void narrow_row_offsets_kernel(const int64_t* __restrict__ from, int32_t* __restrict__ to, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n; i += int64_t{gridDim.x} * blockDim.x)
    to[i] = static_cast<int32_t>(from[i]);
}

}  // namespace

void narrow_row_offsets(const int64_t* from, int32_t* to, int64_t n, cudaStream_t s) {
  if (n <= 0) return;
  narrow_row_offsets_kernel<<<blocks_for(n), SetupTuning::threads, 0, s>>>(from, to, n);
  CHECK_LAUNCH("row offsets' narrowing");
}

int64_t first_difference(const int32_t* a, const int32_t* b, int64_t n, cudaStream_t s) {
  if (n <= 0) return -1;
  DeviceArray<unsigned long long> first(1, "first difference");
  const unsigned long long none = static_cast<unsigned long long>(n);
  CHECK_CUDA(cudaMemcpyAsync(first.data(), &none, sizeof none, cudaMemcpyHostToDevice, s));
  first_difference_kernel<<<blocks_for(n), SetupTuning::threads, 0, s>>>(a, b, n, first.data());
  CHECK_LAUNCH("first difference");
  const unsigned long long at = fetch(first.data(), s);
  return at == none ? -1 : static_cast<int64_t>(at);
}

StatsTotals device_stats_totals(const DeviceCsr& a, DeviceArray<uint8_t>& diagonal_seen, cudaStream_t s) {
  StatsTotals t;
  diagonal_seen = DeviceArray<uint8_t>(static_cast<size_t>(a.rows) + a.cols, "diagonal flags");
  if (a.rows == 0) return t;
  CHECK_CUDA(cudaMemsetAsync(diagonal_seen.data(), 0, diagonal_seen.bytes(), s));
  DeviceArray<DeviceTotals> totals(1, "statistics totals");
  DeviceTotals h{};
  std::memset(&h, 0, sizeof h);
  h.row_min = h.first_nonpositive_row = LLONG_MAX;
  CHECK_CUDA(cudaMemcpyAsync(totals.data(), &h, sizeof h, cudaMemcpyHostToDevice, s));
  with_row_offsets(a, [&](auto rp) {
    stats_rows_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, rp, a.col_idx.data(), a.values.data(),
                                                                           diagonal_seen.data(), totals.data());
  });
  CHECK_LAUNCH("statistics");
  if (a.rows == a.cols) {
    const int warp_blocks = blocks_for(a.rows);  // a thread per row, a warp per 32 rows
    with_row_offsets(a, [&](auto rp) {
      stats_symmetry_kernel<false><<<warp_blocks, SetupTuning::threads, 0, s>>>(a.rows, rp, a.col_idx.data(),
                                                                                a.values.data(), totals.data());
    });
    CHECK_LAUNCH("statistics: symmetry");
    h = fetch(totals.data(), s);
    if (h.unmatched > 0 || h.lower_entries != h.matched_upper) {  // unmatched entries: look from both sides
      h.lower_entries = h.matched_upper = h.unmatched = h.max_asymmetry_bits = 0;
      CHECK_CUDA(cudaMemcpyAsync(totals.data(), &h, sizeof h, cudaMemcpyHostToDevice, s));
      with_row_offsets(a, [&](auto rp) {
        stats_symmetry_kernel<true><<<warp_blocks, SetupTuning::threads, 0, s>>>(a.rows, rp, a.col_idx.data(),
                                                                                 a.values.data(), totals.data());
      });
      CHECK_LAUNCH("statistics: symmetry, both triangles");
    }
  }
  h = fetch(totals.data(), s);
  unsigned long long* distinct = &totals.data()->distinct_diagonals;
  CHECK_CUDA(cudaMemsetAsync(distinct, 0, sizeof(unsigned long long), s));
  count_flags_kernel<<<blocks_for(static_cast<int64_t>(diagonal_seen.size())), SetupTuning::threads, 0, s>>>(
      static_cast<int64_t>(diagonal_seen.size()), diagonal_seen.data(), distinct);
  CHECK_LAUNCH("statistics: diagonals");
  t.distinct_diagonals = static_cast<int64_t>(fetch(distinct, s));
  t.row_min = h.row_min, t.row_max = h.row_max;
  t.length_sum = static_cast<int64_t>(h.length_sum), t.length_sum_sq = static_cast<int64_t>(h.length_sum_sq);
  for (int b = 0; b < StatsTotals::kBuckets; ++b) t.histogram[b] = static_cast<int64_t>(h.histogram[b]);
  t.empty_rows = static_cast<int64_t>(h.empty_rows), t.bandwidth = h.bandwidth;
  t.missing_diagonal = static_cast<int64_t>(h.missing_diagonal);
  t.nonpositive_diagonal = static_cast<int64_t>(h.nonpositive_diagonal);
  t.dominant = static_cast<int64_t>(h.dominant), t.strictly_dominant = static_cast<int64_t>(h.strictly_dominant);
  t.explicit_zeros = static_cast<int64_t>(h.explicit_zeros), t.non_finite = static_cast<int64_t>(h.non_finite);
  std::memcpy(&t.max_abs_value, &h.max_abs_bits, sizeof(double));
  std::memcpy(&t.max_asymmetry, &h.max_asymmetry_bits, sizeof(double));
  t.pattern_symmetric = h.unmatched == 0;
  if (h.nonpositive_diagonal > 0) {
    t.first_nonpositive_row = h.first_nonpositive_row;
    DeviceArray<double> d(1, "diagonal value");
    with_row_offsets(a, [&](auto rp) {
      diagonal_value_kernel<<<1, 1, 0, s>>>(static_cast<int>(h.first_nonpositive_row), rp, a.col_idx.data(),
                                            a.values.data(), d.data());
    });
    CHECK_LAUNCH("statistics: diagonal value");
    t.first_nonpositive_value = fetch(d.data(), s);
  }
  return t;
}

DeviceDia device_dia(const DeviceCsr& a, const DeviceArray<uint8_t>& diagonal_seen, int64_t diagonals,
                     bool allow_symmetric, int stride_multiple, cudaStream_t s) {
  DeviceDia d;
  d.rows = a.rows, d.cols = a.cols;
  d.stride = (int64_t{a.rows} + stride_multiple - 1) / stride_multiple * stride_multiple;
  const int m = static_cast<int>(diagonals);
  std::vector<int32_t> offsets(static_cast<size_t>(m));
  if (m > 0) {
    // occupied indices, in increasing order = increasing offset
    DeviceArray<int32_t> occupied(static_cast<size_t>(m), "DIA occupied offsets");
    DeviceArray<int32_t> selected(1, "DIA offset count");
    const int n = static_cast<int>(diagonal_seen.size());
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceSelect::Flagged(nullptr, temp_bytes, thrust::counting_iterator<int32_t>(0),
                                          diagonal_seen.data(), occupied.data(), selected.data(), n, s));
    DeviceArray<char> temp(std::max<size_t>(temp_bytes, 1), "DIA selection scratch");
    CHECK_CUDA(cub::DeviceSelect::Flagged(temp.data(), temp_bytes, thrust::counting_iterator<int32_t>(0),
                                          diagonal_seen.data(), occupied.data(), selected.data(), n, s));
    if (fetch(selected.data(), s) != m) throw Error("device DIA: occupied diagonals differ from the statistics");
    DeviceArray<int32_t> slot_of(diagonal_seen.size(), "DIA slot map");
    slot_kernel<<<(m + 255) / 256, 256, 0, s>>>(m, occupied.data(), slot_of.data());
    CHECK_LAUNCH("DIA slots");
    DeviceArray<double> values(static_cast<size_t>(d.stride) * m, "DIA values");
    CHECK_CUDA(cudaMemsetAsync(values.data(), 0, values.bytes(), s));
    with_row_offsets(a, [&](auto rp) {
      dia_scatter_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, rp, a.col_idx.data(), a.values.data(),
                                                                              slot_of.data(), d.stride, values.data());
    });
    CHECK_LAUNCH("DIA scatter");
    CHECK_CUDA(cudaMemcpyAsync(offsets.data(), occupied.data(), sizeof(int32_t) * m, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    for (int32_t& o : offsets) o -= a.rows - 1;
    d.values = std::move(values);
  }
  d.diagonals = m;
  d.min_offset = m ? offsets.front() : 0;
  d.max_offset = m ? offsets.back() : 0;
  d.offsets = DeviceArray<int32_t>(offsets, "DIA offsets");
  // Symmetric: the offsets mirror, and so do the values (dia_is_symmetric); then keep the offsets >= 0, which
  // are the last diagonals, contiguous in memory.
  int negative = 0, positive = 0;
  for (int32_t o : offsets) negative += o < 0, positive += o > 0;
  bool symmetric = allow_symmetric && a.rows == a.cols && negative == positive;
  for (int k = 0; symmetric && k < negative; ++k) symmetric = offsets[m - 1 - k] == -offsets[k];
  if (symmetric && negative > 0) {
    DeviceArray<int> differs(1, "DIA mirror flag");
    CHECK_CUDA(cudaMemsetAsync(differs.data(), 0, sizeof(int), s));
    const dim3 grid(static_cast<unsigned>(std::min(blocks_for(a.rows), 1024)), static_cast<unsigned>(negative));
    dia_mirror_kernel<<<grid, SetupTuning::threads, 0, s>>>(a.rows, m, d.offsets.data(), d.values.data(), d.stride,
                                                            differs.data());
    CHECK_LAUNCH("DIA mirror check");
    symmetric = fetch(differs.data(), s) == 0;
  }
  if (symmetric) {
    const int kept = m - negative;
    DeviceArray<double> upper(static_cast<size_t>(d.stride) * kept, "DIA values (upper half)");
    CHECK_CUDA(cudaMemcpyAsync(upper.data(), d.values.data() + static_cast<size_t>(d.stride) * negative, upper.bytes(),
                               cudaMemcpyDeviceToDevice, s));
    std::vector<int32_t> upper_offsets(offsets.begin() + negative, offsets.end());
    CHECK_CUDA(cudaStreamSynchronize(s));
    d.values = std::move(upper);
    d.offsets = DeviceArray<int32_t>(upper_offsets, "DIA offsets");
    d.diagonals = kept;
    d.max_offset = upper_offsets.empty() ? 0 : upper_offsets.back();
    d.min_offset = -d.max_offset;
    d.symmetric = true;
  }
  return d;
}

DeviceSell device_sell32(const DeviceCsr& a, double max_fill, cudaStream_t s) {
  a.require_narrow("the SELL conversion");
  DeviceSell d;
  d.rows = a.rows, d.cols = a.cols, d.slice_height = 32;
  const int64_t slices = (int64_t{a.rows} + 31) / 32;
  d.slices = static_cast<int32_t>(slices);
  d.slice_ptr = DeviceArray<int64_t>(static_cast<size_t>(slices) + 1, "SELL slice pointers");
  d.slice_width = DeviceArray<int32_t>(static_cast<size_t>(std::max<int64_t>(slices, 1)), "SELL slice widths");
  CHECK_CUDA(cudaMemsetAsync(d.slice_ptr.data(), 0, d.slice_ptr.bytes(), s));
  if (slices > 0) {
    sell_width_kernel<<<blocks_for(slices), SetupTuning::threads, 0, s>>>(a.rows, slices, a.row_ptr.data(),
                                                                           d.slice_width.data(), d.slice_ptr.data());
    CHECK_LAUNCH("SELL widths");
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, d.slice_ptr.data(), d.slice_ptr.data(),
                                             static_cast<int>(slices + 1), s));
    DeviceArray<char> temp(std::max<size_t>(temp_bytes, 1), "SELL scan scratch");
    CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, d.slice_ptr.data(), d.slice_ptr.data(),
                                             static_cast<int>(slices + 1), s));
  }
  d.stored = slices > 0 ? fetch(d.slice_ptr.data() + slices, s) : 0;
  check_format_fill("sell", double(d.stored), a.nnz, max_fill);
  d.col_idx = DeviceArray<int32_t>(static_cast<size_t>(d.stored), "SELL column indices");
  d.values = DeviceArray<double>(static_cast<size_t>(d.stored), "SELL values");
  if (d.stored > 0) {
    sell_fill_kernel<<<blocks_for(slices * 32), SetupTuning::threads, 0, s>>>(
        a.rows, slices, a.row_ptr.data(), a.col_idx.data(), a.values.data(), d.slice_ptr.data(), d.slice_width.data(),
        d.col_idx.data(), d.values.data());
    CHECK_LAUNCH("SELL fill");
  }
  return d;
}

DeviceHyb device_hyb(const DeviceCsr& a, int32_t row_max, cudaStream_t s) {
  a.require_narrow("the HYB conversion");
  DeviceHyb h;
  h.ell.rows = h.coo.rows = a.rows, h.ell.cols = h.coo.cols = a.cols;
  int32_t limit = 0;
  if (a.rows > 0) {
    DeviceArray<unsigned long long> count(static_cast<size_t>(row_max) + 1, "HYB row-length counts");
    CHECK_CUDA(cudaMemsetAsync(count.data(), 0, count.bytes(), s));
    length_count_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, a.row_ptr.data(), count.data());
    CHECK_LAUNCH("HYB row lengths");
    const std::vector<unsigned long long> counted = count.download();
    limit = hyb_width_from_lengths(std::vector<int64_t>(counted.begin(), counted.end()), a.rows);
  }
  // csr_to_ell of the head matrix: as wide as its longest row, min(row length, limit)
  h.ell.width = std::min(limit, row_max);
  const size_t total = static_cast<size_t>(a.rows) * h.ell.width;
  h.ell.col_idx = DeviceArray<int32_t>(total, "HYB ELL column indices");
  h.ell.values = DeviceArray<double>(total, "HYB ELL values");
  DeviceArray<int64_t> tail_at(static_cast<size_t>(a.rows) + 1, "HYB tail offsets");
  CHECK_CUDA(cudaMemsetAsync(tail_at.data(), 0, tail_at.bytes(), s));
  if (a.rows > 0) {
    hyb_head_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, h.ell.width, limit, a.row_ptr.data(),
                                                                         a.col_idx.data(), a.values.data(),
                                                                         h.ell.col_idx.data(), h.ell.values.data(),
                                                                         tail_at.data());
    CHECK_LAUNCH("HYB head");
    size_t temp_bytes = 0;
    CHECK_CUDA(cub::DeviceScan::ExclusiveSum(nullptr, temp_bytes, tail_at.data(), tail_at.data(), a.rows + 1, s));
    DeviceArray<char> temp(std::max<size_t>(temp_bytes, 1), "HYB scan scratch");
    CHECK_CUDA(cub::DeviceScan::ExclusiveSum(temp.data(), temp_bytes, tail_at.data(), tail_at.data(), a.rows + 1, s));
  }
  h.coo.nnz = a.rows > 0 ? fetch(tail_at.data() + a.rows, s) : 0;
  h.coo.row_idx = DeviceArray<int32_t>(static_cast<size_t>(h.coo.nnz), "HYB COO row indices");
  h.coo.col_idx = DeviceArray<int32_t>(static_cast<size_t>(h.coo.nnz), "HYB COO column indices");
  h.coo.values = DeviceArray<double>(static_cast<size_t>(h.coo.nnz), "HYB COO values");
  if (h.coo.nnz > 0) {
    hyb_tail_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, limit, a.row_ptr.data(), a.col_idx.data(),
                                                                         a.values.data(), tail_at.data(),
                                                                         h.coo.row_idx.data(), h.coo.col_idx.data(),
                                                                         h.coo.values.data());
    CHECK_LAUNCH("HYB tail");
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return h;
}

DeviceArray<float> device_to_float(const DeviceArray<double>& in, const char* what, cudaStream_t s) {
  DeviceArray<float> out(in.size(), what);
  const int64_t count = static_cast<int64_t>(in.size());
  if (count) {
    to_float_kernel<<<grid_stride_blocks(count, SetupTuning::threads), SetupTuning::threads, 0, s>>>(in.data(), count,
                                                                                                 out.data());
    CHECK_LAUNCH("FP32 values");
    CHECK_CUDA(cudaStreamSynchronize(s));
  }
  return out;
}

DeviceEll device_ell(const DeviceCsr& a, int32_t width, cudaStream_t s) {
  a.require_narrow("the ELL conversion");
  DeviceEll d;
  d.rows = a.rows, d.cols = a.cols, d.width = width;
  const size_t total = static_cast<size_t>(a.rows) * width;
  d.col_idx = DeviceArray<int32_t>(total, "ELL column indices");
  d.values = DeviceArray<double>(total, "ELL values");
  if (total > 0) {
    ell_fill_kernel<<<blocks_for(a.rows), SetupTuning::threads, 0, s>>>(a.rows, width, a.row_ptr.data(),
                                                                         a.col_idx.data(), a.values.data(),
                                                                         d.col_idx.data(), d.values.data());
    CHECK_LAUNCH("ELL fill");
  }
  return d;
}

}  // namespace spcg

SPCG_KERNEL_MODULE(setup_kernels)
