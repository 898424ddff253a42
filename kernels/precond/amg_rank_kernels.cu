// Device half of AMG's levels over ranks: CSR reshaping for the distributed prolongator and Galerkin product.
// Work mapping: the passes that move a matrix's entries (join, split) run a group of lanes per row, the power of
// two at or above the average row length (RowGroups), so that a group's loads and stores of its row are
// contiguous, and a split's compaction keeps the row's order by the group's ballots (as CUB's warp-level
// select); the passes over a few rows (pack, unpack of the halo rows) run one thread per row; two passes where
// the output's size is not known (count, then a Thrust (CUB) scan, then fill); a binary search per halo entry into
// the sorted halo columns (the halo plan's order: by owner, and so by column). Row order and entry order within a
// row are kept, so every output is the same bits for the same input (the deterministic mode's sums follow).
#include <thrust/copy.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>
#include <thrust/unique.h>

#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "kernels/precond/amg_rank_kernels.hpp"

namespace spcg {
namespace {

constexpr int kThreads = 256;
int blocks_for(int64_t n) { return static_cast<int>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

// Lanes per row for the passes that move a matrix's entries. Measured on poisson3d:600 over 4 H100s: with one
// thread per row, joining level 0's local and halo blocks (54M rows, 7 entries each) took 55 ms and splitting
// level 1's coarse rows (4.8M rows, ~35 entries) 30 ms, where their bytes take 3-4 ms and ~1.5 ms; a row's
// entries read and written by one thread touch a cache line per lane per step.
struct RowGroups {
  int log2_lanes = 0;
  static RowGroups for_rows(int64_t nnz, int64_t rows) {
    RowGroups g;
    const int64_t average = rows > 0 ? (nnz + rows - 1) / rows : 0;
    while ((int64_t{1} << g.log2_lanes) < average && g.log2_lanes < 5) ++g.log2_lanes;  // at most a warp
    return g;
  }
  int blocks(int64_t rows) const { return blocks_for(rows << log2_lanes); }
};

// A lane's place in its row's group: the row, the lane, and the group's lanes in the warp (for the ballots; a group
// never straddles a warp, its lanes a power of two within the 32).
struct RowLane {
  int64_t row;
  int32_t lane, lanes;
  unsigned group_mask, below;  // the group's lanes; those of them below this one
  __device__ explicit RowLane(int log2_lanes) {
    const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    row = t >> log2_lanes;
    lanes = 1 << log2_lanes;
    lane = static_cast<int32_t>(t & (lanes - 1));
    const unsigned warp_lane = threadIdx.x & 31u;
    group_mask = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1u) << (warp_lane & ~static_cast<unsigned>(lanes - 1));
    below = group_mask & ((1u << warp_lane) - 1u);
  }
};

__global__ void join_offsets_kernel(int32_t n, const int32_t* __restrict__ lrp, const int32_t* __restrict__ hrp,
                                    int32_t* __restrict__ rp) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i <= n) rp[i] = lrp[i] + hrp[i];
}

__global__ void join_fill_kernel(int32_t n, int log2_lanes, const int32_t* __restrict__ lrp, const int32_t* __restrict__ lci,
                                 const double* __restrict__ lv, const int32_t* __restrict__ hrp,
                                 const int32_t* __restrict__ hci, const double* __restrict__ hv,
                                 const int32_t* __restrict__ rp, int32_t* __restrict__ ci, double* __restrict__ v) {
  const RowLane at(log2_lanes);
  if (at.row >= n) return;
  const int64_t i = at.row;
  const int32_t o = rp[i], lb = lrp[i], le = lrp[i + 1], hb = hrp[i], he = hrp[i + 1];
  // (64-bit steps: a row ending within a group's width of INT32_MAX entries must not overflow)
  for (int64_t p = lb + at.lane; p < le; p += at.lanes) ci[o + (p - lb)] = lci[p], v[o + (p - lb)] = lv[p];
  const int64_t oh = int64_t{o} + (le - lb);
  for (int64_t p = hb + at.lane; p < he; p += at.lanes) ci[oh + (p - hb)] = n + hci[p], v[oh + (p - hb)] = hv[p];
}

__global__ void add_offset_kernel(int64_t count, const int32_t* __restrict__ in, int32_t offset, int32_t* __restrict__ out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < count) out[i] = in[i] + offset;
}

__global__ void pack_kernel(int64_t count, const int32_t* __restrict__ rows, const int32_t* __restrict__ rp,
                            const int32_t* __restrict__ ci, const double* __restrict__ v, int32_t width,
                            double* __restrict__ out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j >= count) return;
  const int32_t r = rows[j], begin = rp[r], length = rp[r + 1] - begin;
  double* o = out + j * 2 * int64_t{width};
  for (int32_t e = 0; e < width; ++e) {
    o[2 * e] = e < length ? static_cast<double>(ci[begin + e]) : -1.0;
    o[2 * e + 1] = e < length ? v[begin + e] : 0.0;
  }
}

__global__ void unpack_count_kernel(int32_t rows, const double* __restrict__ packed, int32_t width, int32_t* __restrict__ count) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows) return;
  const double* row = packed + i * 2 * int64_t{width};
  int32_t c = 0;
  while (c < width && row[2 * c] >= 0) ++c;
  count[i] = c;
}

__global__ void unpack_fill_kernel(int32_t rows, const double* __restrict__ packed, int32_t width,
                                   const int32_t* __restrict__ rp, int32_t* __restrict__ ci, double* __restrict__ v) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= rows) return;
  const double* row = packed + i * 2 * int64_t{width};
  for (int32_t p = rp[i], e = 0; p < rp[i + 1]; ++p, ++e) ci[p] = static_cast<int32_t>(row[2 * e]), v[p] = row[2 * e + 1];
}

// The halo slot of global column c: its index in the sorted halo columns, or -1.
__device__ int32_t slot_of(int64_t c, const int64_t* __restrict__ halo_columns, int32_t halo_count, int64_t own_end) {
  if (!halo_columns) return static_cast<int32_t>(c - own_end);
  int32_t lo = 0, hi = halo_count;
  while (lo < hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    if (halo_columns[mid] < c) lo = mid + 1;
    else hi = mid;
  }
  return lo < halo_count && halo_columns[lo] == c ? lo : -1;
}

template <bool kFill>
__global__ void split_kernel(int32_t n, int log2_lanes, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                             const double* __restrict__ v, int64_t own_begin, int32_t own_count,
                             const int64_t* __restrict__ halo_columns, int32_t halo_count, bool keep_halo,
                             int32_t* __restrict__ local_count, int32_t* __restrict__ halo_count_out,
                             const int32_t* __restrict__ lrp, int32_t* __restrict__ lci, double* __restrict__ lv,
                             const int32_t* __restrict__ hrp, int32_t* __restrict__ hci, double* __restrict__ hv,
                             unsigned long long* __restrict__ unmatched) {
  const RowLane at(log2_lanes);
  if (at.row >= n) return;  // (the whole group: one row)
  const int64_t i = at.row, own_end = own_begin + own_count;
  const int32_t lo = kFill ? lrp[i] : 0, ho = kFill ? hrp[i] : 0, end = rp[i + 1];
  int32_t nl = 0, nh = 0;  // the row's local and halo entries so far (every lane of the group alike)
  unsigned long long missing = 0;
  // the row in steps of the group's width; an entry's place among its kind is the ballot of the lanes below it
  for (int64_t base = rp[i]; base < end; base += at.lanes) {  // (64-bit: see join_fill_kernel)
    const int64_t p = base + at.lane;
    bool local = false, halo = false;
    int64_t c = 0;
    int32_t slot = -1;
    if (p < end) {
      c = ci[p];
      if (c >= own_begin && c < own_end) {
        local = true;
      } else if (keep_halo) {
        slot = slot_of(c, halo_columns, halo_count, own_end);
        if (slot < 0) ++missing;
        else halo = true;
      }
    }
    const unsigned local_lanes = __ballot_sync(at.group_mask, local), halo_lanes = __ballot_sync(at.group_mask, halo);
    if (kFill && local) {
      const int32_t o = lo + nl + __popc(local_lanes & at.below);
      lci[o] = static_cast<int32_t>(c - own_begin), lv[o] = v[p];
    }
    if (kFill && halo) {
      const int32_t o = ho + nh + __popc(halo_lanes & at.below);
      hci[o] = slot, hv[o] = v[p];
    }
    nl += __popc(local_lanes), nh += __popc(halo_lanes);
  }
  if (!kFill) {
    if (at.lane == 0) local_count[i] = nl, halo_count_out[i] = nh;
    if (missing) atomicAdd(unmatched, missing);  // a count, not a value: any order gives the same total
  }
}

__global__ void compressed_offsets_kernel(int32_t rows, const int32_t* __restrict__ ids, const int32_t* __restrict__ rp,
                                          int32_t nnz, int32_t* __restrict__ out) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j < rows) out[j] = rp[ids[j]];
  if (j == rows) out[j] = nnz;
}

__global__ void scatter_lengths_kernel(int32_t held, const int32_t* __restrict__ ids, const int32_t* __restrict__ rp,
                                       int32_t* __restrict__ count) {
  const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (j < held) count[ids[j]] = rp[j + 1] - rp[j];
}

void copy_entries(const DeviceCsr& from, DeviceCsr& to, int64_t at, cudaStream_t s) {
  if (from.nnz == 0) return;
  CHECK_CUDA(cudaMemcpyAsync(to.col_idx.data() + at, from.col_idx.data(), sizeof(int32_t) * from.nnz, cudaMemcpyDeviceToDevice, s));
  CHECK_CUDA(cudaMemcpyAsync(to.values.data() + at, from.values.data(), sizeof(double) * from.nnz, cudaMemcpyDeviceToDevice, s));
}

__global__ void place_lengths_kernel(int32_t n, const int32_t* __restrict__ rp, double* __restrict__ lengths) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < n) lengths[i] = static_cast<double>(rp[i + 1] - rp[i]);
}

__global__ void place_entries_kernel(int64_t nnz, const int32_t* __restrict__ ci, const double* __restrict__ v,
                                     double* __restrict__ columns, double* __restrict__ values) {
  const int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (q < nnz) columns[q] = static_cast<double>(ci[q]), values[q] = v[q];  // (exact: columns < 2^31)
}

__global__ void placed_counts_kernel(int32_t rows, const double* __restrict__ lengths, int32_t* __restrict__ count) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < rows) count[i] = static_cast<int32_t>(lengths[i]);
}

__global__ void placed_fill_kernel(int64_t nnz, const double* __restrict__ columns, const double* __restrict__ values,
                                   int32_t* __restrict__ ci, double* __restrict__ v) {
  const int64_t q = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (q < nnz) ci[q] = static_cast<int32_t>(columns[q]), v[q] = values[q];
}

}  // namespace

void place_row_lengths(const DeviceCsr& m, int64_t first_row, double* lengths, cudaStream_t s) {
  m.require_narrow("place_row_lengths");
  if (m.rows == 0) return;
  place_lengths_kernel<<<blocks_for(m.rows), kThreads, 0, s>>>(m.rows, m.row_ptr.data(), lengths + first_row);
  CHECK_LAUNCH("place-lengths");
}

void place_entries(const DeviceCsr& m, int64_t at, int64_t total, double* entries, cudaStream_t s) {
  if (m.nnz == 0) return;
  if (at < 0 || at + m.nnz > total) throw Error("place_entries: the entries fall outside the level's");
  place_entries_kernel<<<blocks_for(m.nnz), kThreads, 0, s>>>(m.nnz, m.col_idx.data(), m.values.data(), entries + at,
                                                              entries + total + at);
  CHECK_LAUNCH("place-entries");
}

DeviceCsr csr_from_placed(const double* lengths, const double* entries, int32_t rows, int32_t cols, cudaStream_t s) {
  DeviceArray<int32_t> count(static_cast<size_t>(rows), "placed row lengths");
  if (rows > 0) {
    placed_counts_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, lengths, count.data());
    CHECK_LAUNCH("placed-counts");
  }
  DeviceCsr out = csr_from_counts(count.data(), rows, cols, "gathered level", s);
  if (out.nnz > 0) {
    placed_fill_kernel<<<blocks_for(out.nnz), kThreads, 0, s>>>(out.nnz, entries, entries + out.nnz, out.col_idx.data(),
                                                                out.values.data());
    CHECK_LAUNCH("placed-fill");
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

DeviceCsr expand_rows(int32_t rows, int32_t cols, int32_t held, const int32_t* ids, const int32_t* row_ptr,
                      const int32_t* col_idx, const double* values, cudaStream_t s) {
  DeviceArray<int32_t> count(static_cast<size_t>(rows), "expanded row lengths");
  if (rows) CHECK_CUDA(cudaMemsetAsync(count.data(), 0, count.bytes(), s));
  if (held > 0) {
    scatter_lengths_kernel<<<blocks_for(held), kThreads, 0, s>>>(held, ids, row_ptr, count.data());
    CHECK_LAUNCH("scatter-lengths");
  }
  DeviceCsr out = csr_from_counts(count.data(), rows, cols, "expanded rows", s);
  const int64_t nnz = out.nnz;
  if (nnz) {  // the held rows' entries in row order are the whole CSR's
    CHECK_CUDA(cudaMemcpyAsync(out.col_idx.data(), col_idx, out.col_idx.bytes(), cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(out.values.data(), values, out.values.bytes(), cudaMemcpyDeviceToDevice, s));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

DeviceCsr join_columns(const DeviceCsr& local, const DeviceCsr& halo, cudaStream_t s) {
  local.require_narrow("join_columns"), halo.require_narrow("join_columns");
  if (local.rows != halo.rows) throw Error("join_columns: the blocks' rows differ");
  const int32_t n = local.rows;
  if (local.nnz + halo.nnz > INT32_MAX) throw Error("join_columns: past 32-bit offsets");
  DeviceCsr out = empty_csr(n, local.cols + halo.cols, local.nnz + halo.nnz, "joined rows");
  join_offsets_kernel<<<blocks_for(int64_t{n} + 1), kThreads, 0, s>>>(n, local.row_ptr.data(), halo.row_ptr.data(),
                                                                      out.row_ptr.data());
  CHECK_LAUNCH("join-offsets");
  if (n > 0) {
    const RowGroups groups = RowGroups::for_rows(local.nnz + halo.nnz, n);
    join_fill_kernel<<<groups.blocks(n), kThreads, 0, s>>>(n, groups.log2_lanes, local.row_ptr.data(), local.col_idx.data(), local.values.data(),
                                                         halo.row_ptr.data(), halo.col_idx.data(), halo.values.data(),
                                                         out.row_ptr.data(), out.col_idx.data(), out.values.data());
    CHECK_LAUNCH("join-fill");
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

DeviceCsr stack_rows(const DeviceCsr& top, const DeviceCsr& bottom, cudaStream_t s) {
  if (top.cols != bottom.cols) throw Error("stack_rows: the pieces' columns differ");
  if (top.nnz + bottom.nnz > INT32_MAX) throw Error("stack_rows: past 32-bit offsets");
  DeviceCsr out = empty_csr(top.rows + bottom.rows, top.cols, top.nnz + bottom.nnz, "stacked rows");
  CHECK_CUDA(cudaMemcpyAsync(out.row_ptr.data(), top.row_ptr.data(), sizeof(int32_t) * top.rows, cudaMemcpyDeviceToDevice, s));
  add_offset_kernel<<<blocks_for(int64_t{bottom.rows} + 1), kThreads, 0, s>>>(
      int64_t{bottom.rows} + 1, bottom.row_ptr.data(), static_cast<int32_t>(top.nnz), out.row_ptr.data() + top.rows);
  CHECK_LAUNCH("stack-offsets");
  copy_entries(top, out, 0, s);
  copy_entries(bottom, out, top.nnz, s);
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

DeviceCsr shift_columns(const DeviceCsr& m, int32_t offset, int32_t cols, cudaStream_t s) {
  DeviceCsr out = empty_csr(m.rows, cols, m.nnz, "shifted columns");
  CHECK_CUDA(cudaMemcpyAsync(out.row_ptr.data(), m.row_ptr.data(), out.row_ptr.bytes(), cudaMemcpyDeviceToDevice, s));
  if (m.nnz > 0) {
    add_offset_kernel<<<blocks_for(m.nnz), kThreads, 0, s>>>(m.nnz, m.col_idx.data(), offset, out.col_idx.data());
    CHECK_LAUNCH("shift-columns");
    CHECK_CUDA(cudaMemcpyAsync(out.values.data(), m.values.data(), out.values.bytes(), cudaMemcpyDeviceToDevice, s));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

int32_t longest_row(const DeviceCsr& m, const int32_t* rows, int64_t count, cudaStream_t s) {
  if (count == 0) return 0;
  ThrustPoolAllocator scratch;
  const int32_t* rp = m.row_ptr.data();
  return thrust::transform_reduce(
      thrust::cuda::par(scratch).on(s), thrust::device_pointer_cast(rows), thrust::device_pointer_cast(rows) + count,
      [rp] __device__(int32_t r) -> int32_t { return rp[r + 1] - rp[r]; }, int32_t{0}, thrust::maximum<int32_t>());
}

void pack_rows(const DeviceCsr& m, const int32_t* rows, int64_t count, int32_t width, double* out, cudaStream_t s) {
  if (count == 0 || width == 0) return;
  pack_kernel<<<blocks_for(count), kThreads, 0, s>>>(count, rows, m.row_ptr.data(), m.col_idx.data(), m.values.data(),
                                                      width, out);
  CHECK_LAUNCH("pack-rows");
}

DeviceCsr unpack_rows(const double* packed, int32_t rows, int32_t width, int32_t cols, cudaStream_t s) {
  DeviceArray<int32_t> count(static_cast<size_t>(rows), "unpacked row lengths");
  if (rows > 0) {
    if (width > 0) {
      unpack_count_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, packed, width, count.data());
      CHECK_LAUNCH("unpack-count");
    } else {
      CHECK_CUDA(cudaMemsetAsync(count.data(), 0, count.bytes(), s));
    }
  }
  DeviceCsr out = csr_from_counts(count.data(), rows, cols, "unpacked rows", s);
  const int64_t nnz = out.nnz;
  if (nnz > 0) {
    unpack_fill_kernel<<<blocks_for(rows), kThreads, 0, s>>>(rows, packed, width, out.row_ptr.data(), out.col_idx.data(),
                                                             out.values.data());
    CHECK_LAUNCH("unpack-fill");
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

ColumnSplit split_columns(const DeviceCsr& m, int64_t own_begin, int32_t own_count, const int64_t* halo_columns,
                          int32_t halo_count, bool keep_halo, cudaStream_t s) {
  m.require_narrow("split_columns");
  const int32_t n = m.rows;
  DeviceArray<int32_t> local_count(static_cast<size_t>(n), "split counts"), halo_count_rows(static_cast<size_t>(n), "split counts");
  DeviceArray<unsigned long long> unmatched(1, "split unmatched");
  CHECK_CUDA(cudaMemsetAsync(unmatched.data(), 0, unmatched.bytes(), s));
  const int32_t halo_cols = halo_columns ? halo_count : std::max(0, halo_count);
  const RowGroups groups = RowGroups::for_rows(m.nnz, n);
  if (n > 0) {
    split_kernel<false><<<groups.blocks(n), kThreads, 0, s>>>(
        n, groups.log2_lanes, m.row_ptr.data(), m.col_idx.data(), m.values.data(), own_begin, own_count, halo_columns, halo_count,
        keep_halo, local_count.data(), halo_count_rows.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
        unmatched.data());
    CHECK_LAUNCH("split-count");
  }
  ColumnSplit out;
  out.local = csr_from_counts(local_count.data(), n, own_count, "split local", s);
  out.halo = csr_from_counts(halo_count_rows.data(), n, halo_cols, "split halo", s);
  if (n > 0) {
    split_kernel<true><<<groups.blocks(n), kThreads, 0, s>>>(
        n, groups.log2_lanes, m.row_ptr.data(), m.col_idx.data(), m.values.data(), own_begin, own_count, halo_columns, halo_count,
        keep_halo, nullptr, nullptr, out.local.row_ptr.data(), out.local.col_idx.data(), out.local.values.data(),
        out.halo.row_ptr.data(), out.halo.col_idx.data(), out.halo.values.data(), nullptr);
    CHECK_LAUNCH("split-fill");
  }
  unsigned long long missing = 0;
  CHECK_CUDA(cudaMemcpyAsync(&missing, unmatched.data(), sizeof missing, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  out.unmatched = static_cast<int64_t>(missing);
  return out;
}

DeviceArray<int64_t> columns_outside(const DeviceCsr& m, int64_t own_begin, int32_t own_count, cudaStream_t s) {
  ThrustPoolAllocator scratch;
  auto policy = thrust::cuda::par(scratch).on(s);
  DeviceArray<int64_t> all(static_cast<size_t>(m.nnz), "columns outside");
  const int64_t own_end = own_begin + own_count;
  const auto first = thrust::device_pointer_cast(all.data());
  const auto last = thrust::copy_if(
      policy, thrust::device_pointer_cast(m.col_idx.data()), thrust::device_pointer_cast(m.col_idx.data()) + m.nnz, first,
      [own_begin, own_end] __device__(int32_t c) -> bool { return c < own_begin || c >= own_end; });
  thrust::sort(policy, first, last);
  const int64_t count = thrust::unique(policy, first, last) - first;
  DeviceArray<int64_t> out(static_cast<size_t>(count), "halo columns");
  if (count) CHECK_CUDA(cudaMemcpyAsync(out.data(), all.data(), out.bytes(), cudaMemcpyDeviceToDevice, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

CompressedRows compress_rows(const DeviceCsr& m, cudaStream_t s) {
  m.require_narrow("compress_rows");
  CompressedRows out;
  const int32_t n = m.rows;
  ThrustPoolAllocator scratch;
  auto policy = thrust::cuda::par(scratch).on(s);
  DeviceArray<int32_t> ids(static_cast<size_t>(n), "compressed row ids");
  const int32_t* rp = m.row_ptr.data();
  const int32_t kept = n == 0 ? 0
                              : static_cast<int32_t>(thrust::copy_if(policy, thrust::counting_iterator<int32_t>(0),
                                                                     thrust::counting_iterator<int32_t>(n),
                                                                     thrust::device_pointer_cast(ids.data()),
                                                                     [rp] __device__(int32_t i) -> bool { return rp[i + 1] > rp[i]; }) -
                                                     thrust::device_pointer_cast(ids.data()));
  out.rows = kept;
  out.ids = DeviceArray<int32_t>(static_cast<size_t>(kept), "compressed row ids");
  if (kept) CHECK_CUDA(cudaMemcpyAsync(out.ids.data(), ids.data(), out.ids.bytes(), cudaMemcpyDeviceToDevice, s));
  out.row_ptr = DeviceArray<int32_t>(static_cast<size_t>(kept) + 1, "compressed row pointers");
  compressed_offsets_kernel<<<blocks_for(int64_t{kept} + 1), kThreads, 0, s>>>(kept, out.ids.data(), rp,
                                                                              static_cast<int32_t>(m.nnz), out.row_ptr.data());
  CHECK_LAUNCH("compressed-offsets");
  // the empty rows hold no entries: the compressed rows' entries are m's, in order
  out.cols = DeviceArray<int32_t>(static_cast<size_t>(m.nnz), "compressed columns");
  out.values = DeviceArray<double>(static_cast<size_t>(m.nnz), "compressed values");
  if (m.nnz) {
    CHECK_CUDA(cudaMemcpyAsync(out.cols.data(), m.col_idx.data(), out.cols.bytes(), cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(out.values.data(), m.values.data(), out.values.bytes(), cudaMemcpyDeviceToDevice, s));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return out;
}

}  // namespace spcg
