// Device half of the AMG setup. Work mapping: one thread per row for the row-local steps (diagonal, strength,
// independent-set rounds, aggregate joins); a group of 4-32 lanes per row for the row-wise products (the
// smoothing of P, A P and R (A P)); one warp per row for the dense coarsest solve; Thrust (CUB) scans for the
// prefix sums, and CUB's radix sort of the entries' positions for the transpose; cuSPARSE SpGEMM only for a product with a row wider than
// our kernel takes. The aggregation follows sparse/aggregation.cpp (after Bell, Dalton & Olson, SISC 2012, and
// cusp's MIS-2 aggregation) so that the host reference and the device give the same aggregates.
#include <cub/device/device_radix_sort.cuh>
#include <thrust/binary_search.h>
#include <thrust/count.h>
#include <thrust/device_ptr.h>
#include <thrust/execution_policy.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/functional.h>
#include <thrust/transform_reduce.h>

#include <cstring>
#include <mutex>

#include "kernels/kernel_module.cuh"
#include "kernels/precond/amg_kernels.hpp"
#include "kernels/device_utils.cuh"

namespace spcg {
namespace {

constexpr int kThreads = 256;
int row_blocks(int64_t n) { return static_cast<int>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads)); }

__global__ void diagonal_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                const double* __restrict__ v, double* __restrict__ d) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double di = 0;
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p)
    if (ci[p] == i) di = v[p];
  d[i] = di;
}

struct DiagonalBits {
  int32_t first_nonpositive;
  unsigned long long min_bits, max_bits;  // positive doubles order as their bit patterns
};

// One atomic per block, not per row: 8M rows' atomics on one address serialised in L2 (16 ms at 8M rows), and
// one a warp still cost 652 us at 8M rows (a pass over the same entries without them: 251 us).
template <class Offset>  // the row offsets as stored: int32, or 64-bit past 2^31 entries (a rank's share)
__global__ void __launch_bounds__(kThreads)
    inverse_diagonal_kernel(int32_t n, const Offset* __restrict__ rp, const int32_t* __restrict__ ci,
                            const double* __restrict__ v, double* __restrict__ dinv, double* __restrict__ diag,
                            DiagonalBits* out) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  int32_t nonpositive = INT32_MAX;
  unsigned long long lo = ~0ULL, hi = 0ULL;
  if (i < n) {
    double di = 0;
    for (Offset p = rp[i]; p < rp[i + 1]; ++p)
      if (ci[p] == i) di = v[p];
    dinv[i] = 1.0 / di;
    if (diag) diag[i] = di;
    if (!(di > 0)) {
      nonpositive = i;
    } else {
      lo = hi = static_cast<unsigned long long>(__double_as_longlong(di));
    }
  }
  // min / max are order-free: the summary does not depend on the launch
  nonpositive = __reduce_min_sync(0xffffffffu, static_cast<unsigned>(nonpositive));
  for (int off = 16; off > 0; off /= 2) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, off));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, off));
  }
  constexpr int kWarps = kThreads / 32;
  __shared__ int32_t s_nonpositive[kWarps];
  __shared__ unsigned long long s_lo[kWarps], s_hi[kWarps];
  const int warp = threadIdx.x / 32;
  if ((threadIdx.x & 31) == 0) s_nonpositive[warp] = nonpositive, s_lo[warp] = lo, s_hi[warp] = hi;
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kWarps; ++w)
    nonpositive = min(nonpositive, s_nonpositive[w]), lo = min(lo, s_lo[w]), hi = max(hi, s_hi[w]);
  if (nonpositive != INT32_MAX) atomicMin(&out->first_nonpositive, nonpositive);
  if (hi != 0ULL) atomicMin(&out->min_bits, lo), atomicMax(&out->max_bits, hi);
}

__global__ void l1_inverse_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                  const double* __restrict__ v, double* __restrict__ l1) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  double s = 0;
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) s += ci[p] == i ? v[p] : fabs(v[p]);
  l1[i] = 1.0 / s;
}

__device__ __forceinline__ bool strong(double aij, double di, double dj, double theta) {
  return fabs(aij) >= theta * sqrt(fabs(di * dj)) && aij != 0.0;
}

__global__ void strength_count_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                      const double* __restrict__ v, const double* __restrict__ d, double theta,
                                      int32_t* __restrict__ count) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int32_t c = 0;
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
    const int32_t j = ci[p];
    if (j != i && strong(v[p], d[i], d[j], theta)) ++c;
  }
  count[i] = c;
}

__global__ void strength_fill_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                     const double* __restrict__ v, const double* __restrict__ d, double theta,
                                     const int32_t* __restrict__ srp, int32_t* __restrict__ sci) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int32_t out = srp[i];
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
    const int32_t j = ci[p];
    if (j != i && strong(v[p], d[i], d[j], theta)) sci[out++] = j;
  }
}

// The host's priority(node, seed), bit for bit.
__device__ __forceinline__ uint64_t priority(int32_t node, uint64_t seed) {
  uint64_t z = static_cast<uint64_t>(node) + 0x9E3779B97F4A7C15ULL * (seed + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
enum : uint8_t { kOut = 0, kUndecided = 1, kIn = 2 };
// (state, priority(index), index) of a > that of b. The priority is a function of the index, so a tuple is
// carried as (state, index).
__device__ __forceinline__ bool tuple_greater(uint8_t sa, int32_t ia, uint8_t sb, int32_t ib, uint64_t seed) {
  if (sa != sb) return sa > sb;
  const uint64_t pa = priority(ia, seed), pb = priority(ib, seed);
  if (pa != pb) return pa > pb;
  return ia > ib;
}

// The max over {i} and its neighbours of the tuples (ts, ti): first pass from the states (the tuple of j is
// (state[j], j)), second pass from the first's output. In the first pass an In row keeps its own tuple (no two
// In rows lie within distance 2, so none of its neighbours is In); the second pass only matters for undecided
// rows (mis_update reads nothing else), so decided rows skip it. A row whose first-pass tuple was made from
// decided states alone (its own and its neighbours': final) keeps it in every later round, marked settled, so
// that the later rounds read the rows near undecided ones only (poisson3d:200's level 0: 16 rounds, each first
// pass reading the whole graph, 163 us, before).
template <bool kFromStates>
__global__ void mis_max_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                               const uint8_t* __restrict__ state, const uint8_t* __restrict__ ts,
                               const int32_t* __restrict__ ti, uint8_t* __restrict__ os, int32_t* __restrict__ oi,
                               uint64_t seed, uint8_t* __restrict__ settled = nullptr) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  uint8_t ms;
  int32_t mi;
  if (kFromStates) {
    if (settled[i]) return;  // (os, oi as an earlier round left them)
    ms = state[i], mi = i;
    bool undecided_near = ms == kUndecided;
    if (ms != kIn)
      for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
        const int32_t j = ci[p];
        undecided_near |= state[j] == kUndecided;
        if (tuple_greater(state[j], j, ms, mi, seed)) ms = state[j], mi = j;
      }
    if (!undecided_near) settled[i] = 1;
  } else {
    if (state[i] != kUndecided) return;
    ms = ts[i], mi = ti[i];
    for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
      const int32_t j = ci[p];
      if (tuple_greater(ts[j], ti[j], ms, mi, seed)) ms = ts[j], mi = ti[j];
    }
  }
  os[i] = ms;
  oi[i] = mi;
}

__global__ void mis_update_kernel(int32_t n, uint8_t* __restrict__ state, const uint8_t* __restrict__ ts,
                                  const int32_t* __restrict__ ti, unsigned* __restrict__ undecided) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  bool still_undecided = false;
  if (i < n && state[i] == kUndecided) {
    if (ti[i] == i) state[i] = kIn;
    else if (ts[i] == kIn) state[i] = kOut;
    else still_undecided = true;
  }
  // a count only (the states do not depend on the order), one atomic per warp
  const unsigned warp_count = __popc(__ballot_sync(0xffffffffu, still_undecided));
  if ((threadIdx.x & 31) == 0 && warp_count) atomicAdd(undecided, warp_count);
}

__global__ void root_flags_kernel(int32_t n, const uint8_t* __restrict__ state, int32_t* __restrict__ flag) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) flag[i] = state[i] == kIn;
}

__global__ void root_ids_kernel(int32_t n, const uint8_t* __restrict__ state, const int32_t* __restrict__ id,
                                int32_t* __restrict__ of) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) of[i] = state[i] == kIn ? id[i] : -1;
}

__global__ void join_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                            const int32_t* __restrict__ before, int32_t* __restrict__ after, uint64_t seed) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int32_t a = before[i];
  if (a < 0) {
    uint64_t best_p = 0;
    int32_t best = -1;
    for (int32_t p = rp[i]; p < rp[i + 1]; ++p) {
      const int32_t j = ci[p];
      if (before[j] < 0) continue;
      const uint64_t pj = priority(j, seed);
      if (best < 0 || pj > best_p || (pj == best_p && j > best)) best_p = pj, best = j;
    }
    if (best >= 0) a = before[best];
  }
  after[i] = a;
}

__global__ void aggregate_size_kernel(int32_t n, const int32_t* __restrict__ of, int32_t* __restrict__ size) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(size + of[i], 1);  // integer counts: order-free
}

__global__ void tentative_kernel(int32_t n, const int32_t* __restrict__ of, const int32_t* __restrict__ size,
                                 int32_t* __restrict__ rp, int32_t* __restrict__ ci, double* __restrict__ v) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > n) return;
  rp[i] = i;
  if (i == n) return;
  ci[i] = of[i];
  v[i] = 1.0 / sqrt(static_cast<double>(size[of[i]]));
}

__global__ void expand_rows_kernel(int32_t n, const int32_t* __restrict__ rp, int32_t* __restrict__ row) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) row[p] = i;
}

// The transpose's entry k: the row and the value of the entry the sort put at k
__global__ void transpose_gather_kernel(int32_t nnz, const int32_t* __restrict__ sorted, const int32_t* __restrict__ row_of,
                                        const double* __restrict__ v, int32_t* __restrict__ t_col, double* __restrict__ t_val) {
  const int32_t k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k >= nnz) return;
  const int32_t p = sorted[k];
  t_col[k] = row_of[p];
  t_val[k] = v[p];
}

// out[k] = v[from[k]]: a kept transpose's new values
__global__ void gather_kernel(int64_t nnz, const int32_t* __restrict__ from, const double* __restrict__ v,
                              double* __restrict__ out) {
  const int64_t k = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (k < nnz) out[k] = v[from[k]];
}

__global__ void csr_to_dense_kernel(int32_t n, const int32_t* __restrict__ rp, const int32_t* __restrict__ ci,
                                    const double* __restrict__ v, double* __restrict__ out) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) out[int64_t{ci[p]} * n + i] = v[p];
}

__global__ void dense_apply_kernel(int32_t n, int k, const double* __restrict__ m, const double* __restrict__ r,
                                   double* __restrict__ z) {
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= n) return;
  const double* row = m + warp * n;
  for (int j = 0; j < k; ++j) {
    double s = 0;
    for (int32_t c = lane; c < n; c += 32) s = fma(row[c], r[int64_t{c} * k + j], s);
    s = dev::warp_sum(s);
    if (lane == 0) z[warp * k + j] = s;
  }
}

// A row of C = scale (A B) + E, walked by a group of G lanes: visit(active, column, product) on each chunk of G of
// the row's products a_ij b_jc, flattened over (j, c) in the row's order (a scan of B's row lengths and a binary
// search place them; B's values only when with_values), then on E's entries G at a time; false when visit stops
// the walk. Every lane of the warp takes part in every step (groups of one warp that looped apart would run one
// after another): a lane past the last row walks an empty one.
constexpr int kInactive = -2;  // the column of a product slot past the row's end (owned columns are >= 0, unused -1)
template <int G>
struct RowWalk {
  static constexpr unsigned kAll = 0xffffffffu;
  int member;
  int32_t a_begin, a_length, a_longest, e_begin, e_length, e_longest;
  const int32_t *aci, *brp, *bci, *eci;
  const double *av, *bv, *ev;
  __device__ RowWalk(bool valid, int32_t i, int member_, const int32_t* arp, const int32_t* aci_, const double* av_,
                     const int32_t* brp_, const int32_t* bci_, const double* bv_, const int32_t* erp,
                     const int32_t* eci_, const double* ev_)
      : member(member_), aci(aci_), brp(brp_), bci(bci_), eci(eci_), av(av_), bv(bv_), ev(ev_) {
    a_begin = valid ? arp[i] : 0, a_length = valid ? arp[i + 1] - a_begin : 0;
    a_longest = __reduce_max_sync(kAll, a_length);
    e_begin = valid && erp ? erp[i] : 0, e_length = valid && erp ? erp[i + 1] - e_begin : 0;
    e_longest = erp ? __reduce_max_sync(kAll, e_length) : 0;
  }
  template <class Visit>
  __device__ bool products(bool with_values, Visit&& visit) const {
    for (int32_t chunk = 0; chunk < a_longest; chunk += G) {
      int32_t b_begin = 0, length = 0;
      double a_value = 0;
      if (chunk + member < a_length) {
        const int32_t p = a_begin + chunk + member, j = aci[p];
        a_value = av[p];
        b_begin = brp[j];
        length = brp[j + 1] - b_begin;
      }
      int32_t inclusive = length;
      for (int off = 1; off < G; off *= 2) {
        const int32_t y = __shfl_up_sync(kAll, inclusive, off, G);
        if (member >= off) inclusive += y;
      }
      const int32_t exclusive = inclusive - length, total = __shfl_sync(kAll, inclusive, G - 1, G);
      const int32_t most = __reduce_max_sync(kAll, total);
      for (int32_t t0 = 0; t0 < most; t0 += G) {
        const int32_t t = t0 + member;
        int e = 0;  // the last member whose products start at or before t: t's entry of A
        for (int step = G / 2; step > 0; step /= 2)
          if (__shfl_sync(kAll, exclusive, e + step, G) <= t) e += step;
        const int32_t q = __shfl_sync(kAll, b_begin, e, G) + (t - __shfl_sync(kAll, exclusive, e, G));
        const double a_e = __shfl_sync(kAll, a_value, e, G);
        const bool active = t < total;
        if (!visit(active, active ? bci[q] : kInactive, active && with_values ? a_e * bv[q] : 0.0)) return false;
      }
    }
    return true;
  }
  template <class Visit>
  __device__ bool e_entries(Visit&& visit) const {  // (distinct columns within a row)
    for (int32_t q0 = 0; q0 < e_longest; q0 += G) {
      const bool active = q0 + member < e_length;
      const int32_t q = e_begin + q0 + member;
      if (!visit(active, active ? eci[q] : kInactive, active ? ev[q] : 0.0)) return false;
    }
    return true;
  }
};

// sums[slot] += v over a whole warp, the lanes of one slot one after another in lane order (the products' order):
// the same bits whatever the launch. slot < 0: nothing to add.
__device__ __forceinline__ void add_in_order(double* sums, int slot, double v, int lane) {
  constexpr unsigned kAll = 0xffffffffu;
  unsigned peers = __match_any_sync(kAll, slot);
  bool pending = slot >= 0;
  while (__any_sync(kAll, pending)) {
    if (pending && __ffs(peers) - 1 == lane) {
      sums[slot] += v;
      pending = false;
    }
    __syncwarp();
    peers &= peers - 1;
  }
}

// Each product of a chunk (then each entry of E), in the row's order, to the lane of the group that owns its
// column (own[k]: the column of rank member + k G, -1 past the row's), broadcast from lane to lane: sum[k] adds
// its column's products in the row's order.
template <int G, int kOwned>
__device__ __forceinline__ bool add_to_owner(const int32_t (&own)[kOwned], double (&sum)[kOwned], int32_t c, double v) {
  for (int src = 0; src < G; ++src) {
    const int32_t cs = __shfl_sync(0xffffffffu, c, src, G);
    const double vs = __shfl_sync(0xffffffffu, v, src, G);
#pragma unroll
    for (int k = 0; k < kOwned; ++k)
      if (own[k] == cs) sum[k] += vs;
  }
  return true;
}

// sum[k] = the row's C entry in column own[k]: scale times its products (in the row's order), then its E entry.
template <int G, int kOwned>
__device__ __forceinline__ void sum_owned_columns(const RowWalk<G>& walk, const int32_t (&own)[kOwned], double scale,
                                                  double (&sum)[kOwned]) {
#pragma unroll
  for (int k = 0; k < kOwned; ++k) sum[k] = 0;
  auto accumulate = [&](bool, int32_t c, double v) { return add_to_owner<G, kOwned>(own, sum, c, v); };
  walk.products(true, accumulate);
#pragma unroll
  for (int k = 0; k < kOwned; ++k) sum[k] *= scale;  // C = scale * (A B) + E
  walk.e_entries(accumulate);
}

// C(i, :) = scale_i sum_j a_ij B(j, :) + E(i, :), scale_i = s0 * (dinv ? dinv[i] : 1), E optional. A group of
// G lanes per row of C (Gustavson's row-wise product with a hash per row, as in Nagasaka, Nukada & Matsuoka,
// ICPP 2017, and cuSPARSE's SpGEMM; G from the products per row, RowProductTuning). The row's products
// a_ij b_jc, flattened over (j, c) in the row's order, go G at a time to the lanes (a scan of B's row lengths
// and a binary search place them). Pass 1 puts each product's column into a shared-memory hash table and counts
// the distinct ones. Pass 2 sums each column's products in the row's order whatever the launch, so the same
// input gives the same bits: whole warps add into a shared sum per hash slot, the lanes of one slot one after
// another; smaller groups sort the row's columns, give lane `member` the columns of ranks member, member + G,
// ... (at most 8, in registers) and broadcast each product to the group. Either way the columns come out
// sorted. A row with more distinct columns than its group takes sets *too_long: the caller retries with whole
// warps, then cuSPARSE.
template <int G, bool kFill>
__global__ void __launch_bounds__(RowProductTuning::kWarpsPerBlock * 32)
    row_product_kernel(int32_t n, const int32_t* __restrict__ arp, const int32_t* __restrict__ aci,
                       const double* __restrict__ av, const int32_t* __restrict__ brp,
                       const int32_t* __restrict__ bci, const double* __restrict__ bv,
                       const int32_t* __restrict__ erp, const int32_t* __restrict__ eci,
                       const double* __restrict__ ev, const double* __restrict__ dinv, double s0,
                       int32_t* __restrict__ count, const int32_t* __restrict__ crp, int32_t* __restrict__ cci,
                       double* __restrict__ cv, int* too_long) {
  using T = RowProductTuning;
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kRowsPerWarp = 32 / G;
  constexpr int kSlots = T::kSlotsPerLane * G, kBits = T::kHashBits(G), kMaxColumns = kSlots / 2;
  constexpr int kOwned = kMaxColumns / G;  // columns per lane in pass 2 (small groups)
  constexpr int kGroups = T::kWarpsPerBlock * kRowsPerWarp;
  static_assert(kSlots == 1 << kBits, "the hash takes log2(slots) bits");
  // pass 2's sums: whole warps (long rows) add into a shared sum per hash slot, the lanes of one slot one after
  // another in lane order (found by __match_any_sync): 5.4 ms against 15.5 for the broadcast on R (A P) at 8M
  // rows (H100, 2026-11-25, commit 5359d60); smaller groups (short rows) broadcast each product to the lane that owns its
  // column, in registers
  constexpr bool kSlotSums = kFill && G == 32, kBroadcast = kFill && G < 32;
  __shared__ int32_t keys_all[kGroups][kSlots + 1];  // + 1: the groups' equal slots fall in different banks
  __shared__ double sums_all[kSlotSums ? kGroups : 1][kSlotSums ? kSlots : 1];
  __shared__ int32_t list_all[kFill ? kGroups : 1][kFill ? kMaxColumns + G : 1];
  __shared__ int32_t sorted_all[kBroadcast ? kGroups : 1][kBroadcast ? kMaxColumns + G : 1];
  const int lane = threadIdx.x & 31, member = lane % G, group = threadIdx.x / G, base = lane - member;
  const unsigned group_bits = G == 32 ? kAll : (1u << G) - 1;
  const int64_t row = int64_t{blockIdx.x} * kGroups + group;
  // Every step runs warp-wide, as many times as the warp's longest row needs (groups of one warp that loop
  // apart would run one after another); a group past the last row takes part with nothing to do.
  const bool valid = row < n;
  if (__all_sync(kAll, !valid)) return;
  const int32_t i = valid ? static_cast<int32_t>(row) : 0;
  int32_t* keys = keys_all[group];
  double* sums = sums_all[kSlotSums ? group : 0];
  for (int t = member; t < kSlots; t += G) {
    keys[t] = -1;
    if constexpr (kSlotSums) sums[t] = 0;
  }
  __syncwarp();
  int distinct = 0;  // the group's
  // column c into the group's hash (once): its slot, -1 when not active
  auto insert = [&](bool active, int32_t c) {
    bool added = false;
    int slot = -1;
    if (active) {
      unsigned h = (static_cast<unsigned>(c) * 2654435761u) >> (32 - kBits);  // Knuth's multiplicative hash
      for (;;) {
        const int32_t old = atomicCAS(&keys[h], -1, c);
        if (old == -1 || old == c) {
          added = old == -1;
          slot = static_cast<int>(h);
          break;
        }
        h = (h + 1) & (kSlots - 1);
      }
    }
    distinct += __popc((__ballot_sync(kAll, added) >> base) & group_bits);
    return slot;
  };
  const RowWalk<G> walk(valid, i, member, arp, aci, av, brp, bci, bv, erp, eci, ev);
  // pass 1 (and pass 2's first walk): the columns; too many in any group of the warp ends it (the caller
  // redoes the whole product with wider groups)
  auto insert_all = [&](bool active, int32_t c, double v) {
    const int slot = insert(active, c);
    if (__any_sync(kAll, distinct > kMaxColumns)) {
      if (member == 0 && distinct > kMaxColumns) *too_long = 1;
      return false;
    }
    if constexpr (kSlotSums) add_in_order(sums, slot, v, lane);
    return true;
  };
  const double scale = valid ? s0 * (dinv ? dinv[i] : 1.0) : 0.0;
  if (!walk.products(kSlotSums, insert_all)) return;
  if constexpr (kSlotSums) {  // C = scale * (A B) + E
    for (int t = member; t < kSlots; t += G) sums[t] *= scale;
    __syncwarp();
  }
  if (!walk.e_entries(insert_all)) return;
  if constexpr (!kFill) {
    if (valid && member == 0) count[i] = distinct;
    return;
  }
  __syncwarp();
  // the distinct columns listed
  int32_t* list = list_all[kFill ? group : 0];
  int listed = 0;
  for (int t0 = 0; t0 < kSlots; t0 += G) {
    const int32_t key = keys[t0 + member];
    const unsigned used = (__ballot_sync(kAll, key >= 0) >> base) & group_bits;
    if (key >= 0) list[listed + __popc(used & ((1u << member) - 1))] = key;
    listed += __popc(used);
  }
  __syncwarp();
  const int32_t out = valid ? crp[i] : 0;
  if constexpr (kSlotSums) {  // each slot's column to its rank among the row's columns
    for (int t0 = 0; t0 < kSlots; t0 += G) {
      const int32_t key = keys[t0 + member];
      if (!valid || key < 0) continue;
      int rank = 0;
      for (int u = 0; u < listed; ++u) rank += list[u] < key;
      cci[out + rank] = key;
      cv[out + rank] = sums[t0 + member];
    }
  } else {  // sorted, each lane owning the columns of ranks member, member + G, ...
    int32_t* sorted = sorted_all[kBroadcast ? group : 0];
    for (int u = member; u < listed; u += G) {
      const int32_t key = list[u];
      int rank = 0;
      for (int v = 0; v < listed; ++v) rank += list[v] < key;
      sorted[rank] = key;
    }
    __syncwarp();
    int32_t own[kOwned];
    double sum[kOwned];
#pragma unroll
    for (int k = 0; k < kOwned; ++k) {
      const int r = member + k * G;
      own[k] = r < listed ? sorted[r] : -1;
    }
    sum_owned_columns<G, kOwned>(walk, own, scale, sum);
    if (!valid) return;
#pragma unroll
    for (int k = 0; k < kOwned; ++k) {
      const int r = member + k * G;
      if (r < listed) {
        cci[out + r] = own[k];
        cv[out + r] = sum[k];
      }
    }
  }
}

// The values of C on a kept shape (RowProductShape with its columns: new values on the same patterns): C's
// offsets and sorted columns given, each product summed into its column in the row's order -- row_product_kernel's
// fill pass without its hash, its listing and its sort, so the same bits. Whole warps find each product's column
// by a binary search of the row's columns (shared memory) and add into a shared sum per column, the lanes of one
// column one after another in lane order; smaller groups give lane `member` the columns of ranks member,
// member + G, ... and broadcast each product to the group, as the fill pass does.
template <int G>
__global__ void __launch_bounds__(RowProductTuning::kWarpsPerBlock * 32)
    row_product_values_kernel(int32_t n, const int32_t* __restrict__ arp, const int32_t* __restrict__ aci,
                              const double* __restrict__ av, const int32_t* __restrict__ brp,
                              const int32_t* __restrict__ bci, const double* __restrict__ bv,
                              const int32_t* __restrict__ erp, const int32_t* __restrict__ eci,
                              const double* __restrict__ ev, const double* __restrict__ dinv, double s0,
                              const int32_t* __restrict__ crp, const int32_t* __restrict__ cci, double* __restrict__ cv) {
  using T = RowProductTuning;
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kRowsPerWarp = 32 / G, kGroups = T::kWarpsPerBlock * kRowsPerWarp;
  constexpr int kMaxColumns = T::kSlotsPerLane * G / 2, kOwned = kMaxColumns / G;  // (the fill pass's)
  constexpr bool kSlotSums = G == 32;
  __shared__ int32_t cols_all[kSlotSums ? kGroups : 1][kSlotSums ? kMaxColumns : 1];
  __shared__ double sums_all[kSlotSums ? kGroups : 1][kSlotSums ? kMaxColumns : 1];
  const int lane = threadIdx.x & 31, member = lane % G, group = threadIdx.x / G;
  const int64_t row = int64_t{blockIdx.x} * kGroups + group;
  const bool valid = row < n;
  if (__all_sync(kAll, !valid)) return;
  const int32_t i = valid ? static_cast<int32_t>(row) : 0;
  const int32_t out = valid ? crp[i] : 0, length = valid ? crp[i + 1] - out : 0;
  const double scale = valid ? s0 * (dinv ? dinv[i] : 1.0) : 0.0;
  const RowWalk<G> walk(valid, i, member, arp, aci, av, brp, bci, bv, erp, eci, ev);
  if constexpr (kSlotSums) {
    int32_t* cols = cols_all[group];
    double* sums = sums_all[group];
    for (int t = lane; t < length; t += G) cols[t] = cci[out + t], sums[t] = 0;
    __syncwarp();
    auto add = [&](bool active, int32_t c, double v) {
      int slot = -1;
      if (active) {  // c's rank among the row's columns (it is one of them: the same patterns)
        int lo = 0, hi = length;
        while (lo < hi) {
          const int mid = (lo + hi) / 2;
          if (cols[mid] < c) lo = mid + 1;
          else hi = mid;
        }
        slot = lo < length && cols[lo] == c ? lo : -1;
      }
      add_in_order(sums, slot, v, lane);
      return true;
    };
    walk.products(true, add);
    for (int t = lane; t < length; t += G) sums[t] *= scale;  // C = scale * (A B) + E
    __syncwarp();
    walk.e_entries(add);
    __syncwarp();
    if (valid)
      for (int t = lane; t < length; t += G) cv[out + t] = sums[t];
  } else {
    int32_t own[kOwned];
    double sum[kOwned];
#pragma unroll
    for (int k = 0; k < kOwned; ++k) {
      const int r = member + k * G;
      own[k] = r < length ? cci[out + r] : -1;
    }
    sum_owned_columns<G, kOwned>(walk, own, scale, sum);
    if (!valid) return;
#pragma unroll
    for (int k = 0; k < kOwned; ++k) {
      const int r = member + k * G;
      if (r < length) cv[out + r] = sum[k];
    }
  }
}

// One pass of the row product with G lanes per row; true when every row fitted.
template <bool kFill>
bool row_product_pass(int group_lanes, int32_t n, const DeviceCsr& a, const DeviceCsr& b, const int32_t* erp,
                      const int32_t* eci, const double* ev, const double* dinv, double s0, int32_t* count,
                      DeviceCsr* c, int* flag, cudaStream_t s) {
  constexpr int kWarps = RowProductTuning::kWarpsPerBlock;
  const int64_t rows_per_block = int64_t{kWarps} * (32 / group_lanes);
  const int blocks = static_cast<int>((int64_t{n} + rows_per_block - 1) / rows_per_block);
  if (n == 0) return true;
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kWarps * 32, 0, s>>>(n, a.row_ptr.data(), a.col_idx.data(), a.values.data(), b.row_ptr.data(),
                                         b.col_idx.data(), b.values.data(), erp, eci, ev, dinv, s0, count,
                                         c ? c->row_ptr.data() : nullptr, c ? c->col_idx.data() : nullptr,
                                         c ? c->values.data() : nullptr, flag);
  };
  switch (group_lanes) {
    case 4: launch(row_product_kernel<4, kFill>); break;
    case 8: launch(row_product_kernel<8, kFill>); break;
    case 16: launch(row_product_kernel<16, kFill>); break;
    default: launch(row_product_kernel<32, kFill>); break;
  }
  CHECK_LAUNCH(kFill ? "row-product-fill" : "row-product-count");
  if (kFill) return true;
  int wide = 0;
  CHECK_CUDA(cudaMemcpyAsync(&wide, flag, sizeof wide, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return !wide;
}

// The values of C on a kept shape with its columns (row_product_values_kernel), G = shape.lanes.
void row_product_values_pass(const RowProductShape& shape, int32_t n, const DeviceCsr& a, const DeviceCsr& b,
                             const int32_t* erp, const int32_t* eci, const double* ev, const double* dinv, double s0,
                             DeviceCsr& c, cudaStream_t s) {
  constexpr int kWarps = RowProductTuning::kWarpsPerBlock;
  const int64_t rows_per_block = int64_t{kWarps} * (32 / shape.lanes);
  const int blocks = static_cast<int>((int64_t{n} + rows_per_block - 1) / rows_per_block);
  if (n == 0) return;
  auto launch = [&](auto kernel) {
    kernel<<<blocks, kWarps * 32, 0, s>>>(n, a.row_ptr.data(), a.col_idx.data(), a.values.data(), b.row_ptr.data(),
                                         b.col_idx.data(), b.values.data(), erp, eci, ev, dinv, s0, c.row_ptr.data(),
                                         c.col_idx.data(), c.values.data());
  };
  switch (shape.lanes) {
    case 4: launch(row_product_values_kernel<4>); break;
    case 8: launch(row_product_values_kernel<8>); break;
    case 16: launch(row_product_values_kernel<16>); break;
    default: launch(row_product_values_kernel<32>); break;
  }
  CHECK_LAUNCH("row-product-values");
}

// A device copy of `from` (D2D on s).
template <class T>
DeviceArray<T> device_copy(const DeviceArray<T>& from, const char* what, cudaStream_t s) {
  DeviceArray<T> to(from.size(), what);
  if (from.bytes()) CHECK_CUDA(cudaMemcpyAsync(to.data(), from.data(), from.bytes(), cudaMemcpyDeviceToDevice, s));
  return to;
}
// Whether `bytes` more may be kept for a later update: a saving, not a need, so only where what stays free after
// them is at least as much again and an eighth of the device (the update runs beside the old hierarchy, and the
// solver's vectors, the fused steps' second d and a wider block's workspaces come later).
bool room_to_keep(size_t bytes) {
  const DeviceMemoryInfo m = device_memory_info();
  return m.free_bytes > bytes + std::max(bytes, m.total_bytes / 8);
}

// v(i, :) *= s0 * (dinv ? dinv[i] : 1).
__global__ void scale_rows_kernel(int32_t n, const int32_t* __restrict__ rp, double* __restrict__ v,
                                  const double* __restrict__ dinv, double s0) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const double scale = s0 * (dinv ? dinv[i] : 1.0);
  for (int32_t p = rp[i]; p < rp[i + 1]; ++p) v[p] *= scale;
}

// C(i, :) = T(i, :) + E(i, :), both rows sorted, merged (E's columns need not be T's): cuSPARSE's fallback with
// an E term. kFill false: each row's count; true: the entries, sorted.
template <bool kFill>
__global__ void merge_add_kernel(int32_t n, const int32_t* __restrict__ trp, const int32_t* __restrict__ tci,
                                 const double* __restrict__ tv, const int32_t* __restrict__ erp,
                                 const int32_t* __restrict__ eci, const double* __restrict__ ev, int32_t* __restrict__ count,
                                 const int32_t* __restrict__ crp, int32_t* __restrict__ cci, double* __restrict__ cv) {
  const int32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int32_t p = trp[i], q = erp[i], out = kFill ? crp[i] : 0;
  while (p < trp[i + 1] || q < erp[i + 1]) {
    const int32_t ct = p < trp[i + 1] ? tci[p] : INT32_MAX, ce = q < erp[i + 1] ? eci[q] : INT32_MAX;
    const int32_t c = ct < ce ? ct : ce;
    double v = 0;
    if (ct == c) v += kFill ? tv[p] : 0.0, ++p;
    if (ce == c) v += kFill ? ev[q] : 0.0, ++q;
    if (kFill) cci[out] = c, cv[out] = v;
    ++out;
  }
  if (!kFill) count[i] = out;
}

// Exclusive scan of count[0..n) into out[0..n], out[n] = the total; returns the total.
int64_t scan_counts(const int32_t* count, int32_t n, int32_t* out, cudaStream_t s) {
  ThrustPoolAllocator scratch;
  auto policy = thrust::cuda::par(scratch).on(s);
  CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(int32_t), s));
  if (n > 0) thrust::inclusive_scan(policy, thrust::device_pointer_cast(count), thrust::device_pointer_cast(count) + n,
                                    thrust::device_pointer_cast(out) + 1);
  int32_t total = 0;
  CHECK_CUDA(cudaMemcpyAsync(&total, out + n, sizeof total, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  return total;
}

}  // namespace

DeviceCsr empty_csr(int32_t rows, int32_t cols, int64_t nnz, const char* what) {
  DeviceCsr c;
  c.rows = rows, c.cols = cols, c.nnz = nnz;
  c.row_ptr = DeviceArray<int32_t>(static_cast<size_t>(rows) + 1, what);
  c.col_idx = DeviceArray<int32_t>(static_cast<size_t>(nnz), what);
  c.values = DeviceArray<double>(static_cast<size_t>(nnz), what);
  return c;
}

DeviceCsr csr_from_counts(const int32_t* count, int32_t rows, int32_t cols, const char* what, cudaStream_t s) {
  DeviceArray<int32_t> rp(static_cast<size_t>(rows) + 1, what);
  if (rows > 0) {  // the total in 64 bits first: a product past 2^31 entries cannot take int32 offsets
    ThrustPoolAllocator scratch;
    const int64_t total = thrust::transform_reduce(
        thrust::cuda::par(scratch).on(s), thrust::device_pointer_cast(count), thrust::device_pointer_cast(count) + rows,
        [] __device__(int32_t c) -> int64_t { return c; }, int64_t{0}, thrust::plus<int64_t>());
    if (total > INT32_MAX) throw Error(std::string(what) + ": " + std::to_string(total) + " entries, past 32-bit offsets");
  }
  const int64_t nnz = scan_counts(count, rows, rp.data(), s);
  DeviceCsr c;
  c.rows = rows, c.cols = cols, c.nnz = nnz;
  c.row_ptr = std::move(rp);
  c.col_idx = DeviceArray<int32_t>(static_cast<size_t>(nnz), what);
  c.values = DeviceArray<double>(static_cast<size_t>(nnz), what);
  return c;
}

namespace {

// One cuSPARSE handle for the setup products that fall back to SpGEMM, created on first use and kept for the
// process's life: destroyed at exit it crashed 16 of 207 device runs in cuSPARSE's teardown (H100, 2026-11-25, recorded in 3937db6, when a
// helper thread had created it; the library, loaded with dlopen, is never closed either).
struct SpgemmHandle {
  cusparseHandle_t h = nullptr;
  SpgemmHandle() { CHECK_CUSPARSE(cusparseCreate(&h)); }
};
std::mutex spgemm_mutex;
SpgemmHandle& spgemm_handle() {
  static SpgemmHandle* handle = new SpgemmHandle;  // thread-safe initialisation; never destroyed (see above)
  return *handle;
}

struct SpMat {
  cusparseSpMatDescr_t d = nullptr;
  ~SpMat() {
    if (d) cusparseDestroySpMat(d);
  }
};
struct SpgemmDescr {
  cusparseSpGEMMDescr_t d = nullptr;
  SpgemmDescr() { CHECK_CUSPARSE(cusparseSpGEMM_createDescr(&d)); }
  ~SpgemmDescr() { cusparseSpGEMM_destroyDescr(d); }
};
void describe(const DeviceCsr& a, SpMat& m) {
  // cuSPARSE only reads A and B; its descriptor type is not const-qualified
  CHECK_CUSPARSE(cusparseCreateCsr(&m.d, a.rows, a.cols, a.nnz, const_cast<int32_t*>(a.row_ptr.data()),
                                   const_cast<int32_t*>(a.col_idx.data()), const_cast<double*>(a.values.data()),
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
}

}  // namespace

void launch_diagonal(const DeviceCsr& a, double* d, cudaStream_t s) {
  if (a.rows == 0) return;
  diagonal_kernel<<<row_blocks(a.rows), kThreads, 0, s>>>(a.rows, a.row_ptr.data(), a.col_idx.data(), a.values.data(), d);
  CHECK_LAUNCH("diagonal");
}

DiagonalSummary inverse_diagonal(const DeviceCsr& a, double* dinv, cudaStream_t s, double* diagonal) {
  DiagonalSummary summary;
  if (a.rows == 0) return summary;
  const DiagonalBits start{INT32_MAX, ~0ULL, 0ULL};
  DeviceArray<DiagonalBits> bits(1, "diagonal summary");
  CHECK_CUDA(cudaMemcpyAsync(bits.data(), &start, sizeof start, cudaMemcpyHostToDevice, s));
  with_row_offsets(a, [&](auto rp) {
    inverse_diagonal_kernel<<<row_blocks(a.rows), kThreads, 0, s>>>(a.rows, rp, a.col_idx.data(), a.values.data(), dinv,
                                                                    diagonal, bits.data());
  });
  CHECK_LAUNCH("inverse-diagonal");
  DiagonalBits h{};
  CHECK_CUDA(cudaMemcpyAsync(&h, bits.data(), sizeof h, cudaMemcpyDeviceToHost, s));
  CHECK_CUDA(cudaStreamSynchronize(s));
  summary.first_nonpositive = h.first_nonpositive;
  if (h.first_nonpositive != INT32_MAX) {
    double inv = 0;
    CHECK_CUDA(cudaMemcpy(&inv, dinv + h.first_nonpositive, sizeof inv, cudaMemcpyDeviceToHost));
    summary.first_value = 1.0 / inv;  // 1 / (1 / d) = d for d != 0; 1 / inf = 0 for a zero or missing diagonal
  } else {
    std::memcpy(&summary.min, &h.min_bits, sizeof(double));
    std::memcpy(&summary.max, &h.max_bits, sizeof(double));
  }
  return summary;
}

void launch_l1_inverse(const DeviceCsr& a, double* l1, cudaStream_t s) {
  if (a.rows == 0) return;
  l1_inverse_kernel<<<row_blocks(a.rows), kThreads, 0, s>>>(a.rows, a.row_ptr.data(), a.col_idx.data(), a.values.data(), l1);
  CHECK_LAUNCH("l1-inverse");
}

DeviceCsr strength_graph(const DeviceCsr& a, const double* diag, double theta, cudaStream_t s) {
  const int32_t n = a.rows;
  DeviceArray<int32_t> count(static_cast<size_t>(n), "strength counts");
  DeviceArray<int32_t> rp(static_cast<size_t>(n) + 1, "strength row pointers");
  if (n > 0) {
    strength_count_kernel<<<row_blocks(n), kThreads, 0, s>>>(n, a.row_ptr.data(), a.col_idx.data(), a.values.data(), diag,
                                                             theta, count.data());
    CHECK_LAUNCH("strength-count");
  }
  const int64_t nnz = scan_counts(count.data(), n, rp.data(), s);
  DeviceCsr g;
  g.rows = g.cols = n, g.nnz = nnz;
  g.row_ptr = std::move(rp);
  g.col_idx = DeviceArray<int32_t>(static_cast<size_t>(nnz), "strength columns");
  // pattern only: no values array (the aggregation reads the columns; 8 bytes per entry saved)
  if (n > 0) {
    strength_fill_kernel<<<row_blocks(n), kThreads, 0, s>>>(n, a.row_ptr.data(), a.col_idx.data(), a.values.data(), diag,
                                                            theta, g.row_ptr.data(), g.col_idx.data());
    CHECK_LAUNCH("strength-fill");
  }
  return g;
}

DeviceAggregates aggregate_on_device(const DeviceCsr& g, uint64_t seed, cudaStream_t s) {
  if (g.rows != g.cols) throw Error("aggregate_on_device: the graph is not square");
  const int32_t n = g.rows;
  DeviceAggregates agg;
  agg.of = DeviceArray<int32_t>(static_cast<size_t>(n), "aggregate of row");
  if (n == 0) return agg;
  DeviceArray<uint8_t> state(static_cast<size_t>(n), "MIS state"), ts1(static_cast<size_t>(n), "MIS tuple"),
      ts2(static_cast<size_t>(n), "MIS tuple");
  DeviceArray<int32_t> ti1(static_cast<size_t>(n), "MIS tuple"), ti2(static_cast<size_t>(n), "MIS tuple");
  DeviceArray<unsigned> undecided(1, "MIS undecided count");
  DeviceArray<uint8_t> settled(static_cast<size_t>(n), "MIS settled rows");
  CHECK_CUDA(cudaMemsetAsync(state.data(), kUndecided, n, s));
  CHECK_CUDA(cudaMemsetAsync(settled.data(), 0, n, s));
  const int blocks = row_blocks(n);
  for (unsigned left = 1; left > 0;) {
    // two rounds of max over {i} and its neighbours: the max over the distance-2 neighbourhood
    mis_max_kernel<true><<<blocks, kThreads, 0, s>>>(n, g.row_ptr.data(), g.col_idx.data(), state.data(), nullptr,
                                                     nullptr, ts1.data(), ti1.data(), seed, settled.data());
    mis_max_kernel<false><<<blocks, kThreads, 0, s>>>(n, g.row_ptr.data(), g.col_idx.data(), state.data(), ts1.data(),
                                                      ti1.data(), ts2.data(), ti2.data(), seed);
    CHECK_CUDA(cudaMemsetAsync(undecided.data(), 0, sizeof(unsigned), s));
    mis_update_kernel<<<blocks, kThreads, 0, s>>>(n, state.data(), ts2.data(), ti2.data(), undecided.data());
    CHECK_LAUNCH("mis2");
    CHECK_CUDA(cudaMemcpyAsync(&left, undecided.data(), sizeof left, cudaMemcpyDeviceToHost, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    ++agg.mis_rounds;
    if (agg.mis_rounds > 10000) throw Error("aggregate_on_device: the independent set did not settle");
  }
  // roots numbered in index order
  DeviceArray<int32_t> flag(static_cast<size_t>(n), "root flags"), id(static_cast<size_t>(n) + 1, "root ids");
  root_flags_kernel<<<blocks, kThreads, 0, s>>>(n, state.data(), flag.data());
  CHECK_LAUNCH("root-flags");
  agg.count = static_cast<int32_t>(scan_counts(flag.data(), n, id.data(), s));
  root_ids_kernel<<<blocks, kThreads, 0, s>>>(n, state.data(), id.data(), agg.of.data());
  // next to a root, then two edges from one (each pass reads the assignments from before it)
  DeviceArray<int32_t>& before = flag;  // reused
  CHECK_CUDA(cudaMemcpyAsync(before.data(), agg.of.data(), agg.of.bytes(), cudaMemcpyDeviceToDevice, s));
  join_kernel<<<blocks, kThreads, 0, s>>>(n, g.row_ptr.data(), g.col_idx.data(), before.data(), id.data(), seed);
  join_kernel<<<blocks, kThreads, 0, s>>>(n, g.row_ptr.data(), g.col_idx.data(), id.data(), agg.of.data(), seed);
  CHECK_LAUNCH("aggregate-join");
  ThrustPoolAllocator scratch;
  const auto policy = thrust::cuda::par(scratch).on(s);
  const auto unassigned = thrust::count(policy, thrust::device_pointer_cast(agg.of.data()),
                                        thrust::device_pointer_cast(agg.of.data()) + n, -1);
  if (unassigned > 0)
    throw Error("aggregate_on_device: " + std::to_string(unassigned) +
                " nodes are more than two edges from every root (graph not symmetric?)");
  return agg;
}

DeviceCsr tentative_prolongator(const DeviceAggregates& agg, int32_t rows, cudaStream_t s) {
  DeviceCsr p = empty_csr(rows, agg.count, rows, "tentative prolongator");
  DeviceArray<int32_t> size(static_cast<size_t>(agg.count), "aggregate sizes");
  if (agg.count) CHECK_CUDA(cudaMemsetAsync(size.data(), 0, size.bytes(), s));
  if (rows > 0) {
    aggregate_size_kernel<<<row_blocks(rows), kThreads, 0, s>>>(rows, agg.of.data(), size.data());
  }
  tentative_kernel<<<row_blocks(int64_t{rows} + 1), kThreads, 0, s>>>(rows, agg.of.data(), size.data(), p.row_ptr.data(),
                                                                      p.col_idx.data(), p.values.data());
  CHECK_LAUNCH("tentative-prolongator");
  CHECK_CUDA(cudaStreamSynchronize(s));  // `size` is freed on return
  return p;
}

DeviceCsr row_product(const DeviceCsr& a, const DeviceCsr& b, const DeviceCsr* e, const double* dinv, double s0,
                      cudaStream_t s, bool* by_cusparse, RowProductShape* shape) {
  if (a.cols != b.rows || (e && (e->rows != a.rows || e->cols != b.cols)))
    throw Error("row_product: shapes do not match");
  if (by_cusparse) *by_cusparse = false;
  const int32_t n = a.rows;
  DeviceArray<int> flag(1, "row product flag");
  CHECK_CUDA(cudaMemsetAsync(flag.data(), 0, sizeof(int), s));
  const int32_t* erp = e ? e->row_ptr.data() : nullptr;
  const int32_t* eci = e ? e->col_idx.data() : nullptr;
  const double* ev = e ? e->values.data() : nullptr;
  if (shape && shape->lanes > 0) {  // a shape learned on the same patterns: no counting pass, no scan
    if (!shape->row_ptr || shape->row_ptr->size() != static_cast<size_t>(n) + 1 ||
        (shape->col_idx && shape->col_idx->size() != static_cast<size_t>(shape->nnz)))
      throw Error("row_product: the kept shape is of another product");
    DeviceCsr c;
    c.rows = n, c.cols = b.cols, c.nnz = shape->nnz;
    c.row_ptr = device_copy(*shape->row_ptr, "row product", s);
    c.values = DeviceArray<double>(static_cast<size_t>(shape->nnz), "row product");
    if (shape->col_idx) {  // the values alone
      c.col_idx = device_copy(*shape->col_idx, "row product", s);
      row_product_values_pass(*shape, n, a, b, erp, eci, ev, dinv, s0, c, s);
    } else {  // the fill pass alone; its columns kept for the next time
      c.col_idx = DeviceArray<int32_t>(static_cast<size_t>(shape->nnz), "row product");
      row_product_pass<true>(shape->lanes, n, a, b, erp, eci, ev, dinv, s0, nullptr, &c, flag.data(), s);
      if (room_to_keep(c.col_idx.bytes()))
        shape->col_idx = std::make_shared<const DeviceArray<int32_t>>(device_copy(c.col_idx, "row product shape", s));
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    return c;
  }
  if (shape) *shape = RowProductShape{};
  DeviceArray<int32_t> count(static_cast<size_t>(n), "row product counts");
  // the group that takes the mean row's products (at most 8 G distinct columns); a row past its group's limit
  // sends the product to whole warps (256 columns), and past that to cuSPARSE
  const double products = (n ? double(a.nnz) / n : 0.0) * (b.rows ? double(b.nnz) / b.rows : 0.0) +
                          (e && n ? double(e->nnz) / n : 0.0);
  int lanes = RowProductTuning::group_lanes(products);
  bool fits = row_product_pass<false>(lanes, n, a, b, erp, eci, ev, dinv, s0, count.data(), nullptr, flag.data(), s);
  if (!fits && lanes < 32) {
    lanes = 32;
    CHECK_CUDA(cudaMemsetAsync(flag.data(), 0, sizeof(int), s));
    fits = row_product_pass<false>(lanes, n, a, b, erp, eci, ev, dinv, s0, count.data(), nullptr, flag.data(), s);
  }
  if (!fits) {  // a row with many distinct columns: cuSPARSE's product, then the scaling and E
    if (by_cusparse) *by_cusparse = true;
    DeviceCsr t = spgemm(a, b, s);
    if ((dinv || s0 != 1.0) && n > 0) {
      scale_rows_kernel<<<row_blocks(n), kThreads, 0, s>>>(n, t.row_ptr.data(), t.values.data(), dinv, s0);
      CHECK_LAUNCH("scale-rows");
    }
    if (e && n > 0) {  // T + E merged row by row
      merge_add_kernel<false><<<row_blocks(n), kThreads, 0, s>>>(n, t.row_ptr.data(), t.col_idx.data(), t.values.data(),
                                                                 erp, eci, ev, count.data(), nullptr, nullptr, nullptr);
      CHECK_LAUNCH("merge-add-count");
      DeviceCsr c = csr_from_counts(count.data(), n, b.cols, "merged product", s);
      merge_add_kernel<true><<<row_blocks(n), kThreads, 0, s>>>(n, t.row_ptr.data(), t.col_idx.data(), t.values.data(),
                                                                erp, eci, ev, nullptr, c.row_ptr.data(), c.col_idx.data(),
                                                                c.values.data());
      CHECK_LAUNCH("merge-add");
      CHECK_CUDA(cudaStreamSynchronize(s));
      return c;
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    return t;
  }
  DeviceCsr c = csr_from_counts(count.data(), n, b.cols, "row product", s);
  row_product_pass<true>(lanes, n, a, b, erp, eci, ev, dinv, s0, nullptr, &c, flag.data(), s);
  if (shape) {
    shape->row_ptr = std::make_shared<const DeviceArray<int32_t>>(device_copy(c.row_ptr, "row product shape", s));
    shape->lanes = lanes, shape->nnz = c.nnz;
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return c;
}

DeviceCsr transpose(const DeviceCsr& a, cudaStream_t s, TransposeShape* shape) {
  a.require_narrow("the transpose");  // (the sort's positions are int32)
  if (shape && shape->order) {  // the same pattern: the kept order gathers the new values
    if (shape->order->size() != static_cast<size_t>(a.nnz) || shape->row_ptr->size() != static_cast<size_t>(a.cols) + 1)
      throw Error("transpose: the kept shape is of another matrix");
    DeviceCsr t;
    t.rows = a.cols, t.cols = a.rows, t.nnz = a.nnz;
    t.row_ptr = device_copy(*shape->row_ptr, "transpose", s);
    t.col_idx = device_copy(*shape->col_idx, "transpose", s);
    t.values = DeviceArray<double>(static_cast<size_t>(a.nnz), "transpose");
    if (a.nnz > 0) {
      gather_kernel<<<row_blocks(a.nnz), kThreads, 0, s>>>(a.nnz, shape->order->data(), a.values.data(), t.values.data());
      CHECK_LAUNCH("transpose-values");
    }
    CHECK_CUDA(cudaStreamSynchronize(s));
    return t;
  }
  DeviceCsr t = empty_csr(a.cols, a.rows, a.nnz, "transpose");
  ThrustPoolAllocator scratch;
  const auto policy = thrust::cuda::par(scratch).on(s);
  if (a.nnz == 0) {
    CHECK_CUDA(cudaMemsetAsync(t.row_ptr.data(), 0, t.row_ptr.bytes(), s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return t;
  }
  // The entries' positions sorted by column (a stable radix sort on the bits a column index needs: 20 for a
  // million columns, three passes instead of four), then one gather of their rows and values: each column's
  // entries keep their row order, so the transpose's rows come out sorted. Measured against sorting the
  // (column, row, value) triples themselves: see docs/perf-notes.md ("R = P' by sorting positions").
  const int nnz = static_cast<int>(a.nnz);
  int end_bit = 1;
  while (end_bit < 31 && (int64_t{1} << end_bit) < a.cols) ++end_bit;
  DeviceArray<int32_t> key(static_cast<size_t>(nnz), "transpose keys"), order(static_cast<size_t>(nnz), "transpose order"),
      sorted(static_cast<size_t>(nnz), "transpose sorted order"), row_of(static_cast<size_t>(nnz), "transpose rows");
  thrust::sequence(policy, thrust::device_pointer_cast(order.data()), thrust::device_pointer_cast(order.data()) + nnz);
  size_t temp_bytes = 0;
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, a.col_idx.data(), key.data(), order.data(), sorted.data(),
                                             nnz, 0, end_bit, s));
  DeviceArray<char> temp(std::max<size_t>(temp_bytes, 1), "transpose sort scratch");
  CHECK_CUDA(cub::DeviceRadixSort::SortPairs(temp.data(), temp_bytes, a.col_idx.data(), key.data(), order.data(),
                                             sorted.data(), nnz, 0, end_bit, s));
  expand_rows_kernel<<<row_blocks(a.rows), kThreads, 0, s>>>(a.rows, a.row_ptr.data(), row_of.data());
  CHECK_LAUNCH("transpose-rows");
  transpose_gather_kernel<<<row_blocks(nnz), kThreads, 0, s>>>(nnz, sorted.data(), row_of.data(), a.values.data(),
                                                               t.col_idx.data(), t.values.data());
  CHECK_LAUNCH("transpose-gather");
  auto k = thrust::device_pointer_cast(key.data());
  thrust::lower_bound(policy, k, k + nnz, thrust::counting_iterator<int32_t>(0),
                      thrust::counting_iterator<int32_t>(a.cols + 1), thrust::device_pointer_cast(t.row_ptr.data()));
  if (shape && room_to_keep(sorted.bytes() + t.col_idx.bytes() + t.row_ptr.bytes())) {
    shape->row_ptr = std::make_shared<const DeviceArray<int32_t>>(device_copy(t.row_ptr, "transpose shape", s));
    shape->col_idx = std::make_shared<const DeviceArray<int32_t>>(device_copy(t.col_idx, "transpose shape", s));
    shape->order = std::make_shared<const DeviceArray<int32_t>>(std::move(sorted));
  }
  CHECK_CUDA(cudaStreamSynchronize(s));
  return t;
}

namespace {

// One product with cuSPARSE's algorithm `alg`; false when the algorithm ran out of resources (ALG1 estimates its
// memory and can fall short on large products: the caller then retries with ALG2, which counts exactly).
bool spgemm_with(const DeviceCsr& a, const DeviceCsr& b, cusparseSpGEMMAlg_t alg, cudaStream_t s, DeviceCsr& c) {
  const cusparseHandle_t h = spgemm_handle().h;
  std::lock_guard<std::mutex> lock(spgemm_mutex);
  CHECK_CUSPARSE(cusparseSetStream(h, s));
  SpMat ma, mb, mc;
  describe(a, ma);
  describe(b, mb);
  CHECK_CUSPARSE(cusparseCreateCsr(&mc.d, a.rows, b.cols, 0, nullptr, nullptr, nullptr, CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
  SpgemmDescr desc;
  const double one = 1, zero = 0;
  const auto op = CUSPARSE_OPERATION_NON_TRANSPOSE;
  auto ok = [](cusparseStatus_t st, const char* call) {
    if (st == CUSPARSE_STATUS_INSUFFICIENT_RESOURCES) return false;
    if (st != CUSPARSE_STATUS_SUCCESS) throw_cuda_error("cuSPARSE", call, cusparseGetErrorString(st), __FILE__, __LINE__);
    return true;
  };
  size_t bytes1 = 0, bytes2 = 0;
  if (!ok(cusparseSpGEMM_workEstimation(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, &bytes1, nullptr),
          "cusparseSpGEMM_workEstimation"))
    return false;
  DeviceArray<uint8_t> buffer1(bytes1, "SpGEMM work estimation buffer");
  if (!ok(cusparseSpGEMM_workEstimation(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, &bytes1,
                                        buffer1.data()),
          "cusparseSpGEMM_workEstimation"))
    return false;
  if (alg != CUSPARSE_SPGEMM_DEFAULT) {  // ALG2 / ALG3: the compute buffer's size from an exact estimate
    size_t bytes3 = 0;
    CHECK_CUSPARSE(cusparseSpGEMM_estimateMemory(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, 0.2f,
                                                 &bytes3, nullptr, nullptr));
    DeviceArray<uint8_t> buffer3(bytes3, "SpGEMM memory estimate buffer");
    CHECK_CUSPARSE(cusparseSpGEMM_estimateMemory(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, 0.2f,
                                                 &bytes3, buffer3.data(), &bytes2));
  } else if (!ok(cusparseSpGEMM_compute(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, &bytes2, nullptr),
                 "cusparseSpGEMM_compute")) {
    return false;
  }
  DeviceArray<uint8_t> buffer2(bytes2, "SpGEMM compute buffer");
  if (!ok(cusparseSpGEMM_compute(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d, &bytes2,
                                 buffer2.data()),
          "cusparseSpGEMM_compute"))
    return false;
  int64_t rows = 0, cols = 0, nnz = 0;
  CHECK_CUSPARSE(cusparseSpMatGetSize(mc.d, &rows, &cols, &nnz));
  if (nnz > INT32_MAX) throw Error("spgemm: the product has more than 2^31 nonzeros");
  c = empty_csr(a.rows, b.cols, nnz, "SpGEMM product");
  CHECK_CUSPARSE(cusparseCsrSetPointers(mc.d, c.row_ptr.data(), c.col_idx.data(), c.values.data()));
  CHECK_CUSPARSE(cusparseSpGEMM_copy(h, op, op, &one, ma.d, mb.d, &zero, mc.d, CUDA_R_64F, alg, desc.d));
  CHECK_CUDA(cudaStreamSynchronize(s));  // the buffers are freed on return
  return true;
}

}  // namespace

DeviceCsr spgemm(const DeviceCsr& a, const DeviceCsr& b, cudaStream_t s) {
  if (a.cols != b.rows) throw Error("spgemm: inner dimensions differ");
  DeviceCsr c;
  if (a.nnz == 0 || b.nnz == 0) {
    c = empty_csr(a.rows, b.cols, 0, "SpGEMM product");
    CHECK_CUDA(cudaMemsetAsync(c.row_ptr.data(), 0, c.row_ptr.bytes(), s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    return c;
  }
  // ALG1 (the default) and ALG2 are both bit-wise deterministic (cuSPARSE's documentation of cusparseSpGEMM)
  if (spgemm_with(a, b, CUSPARSE_SPGEMM_DEFAULT, s, c)) return c;
  if (spgemm_with(a, b, CUSPARSE_SPGEMM_ALG2, s, c)) return c;
  throw DeviceMemoryError("spgemm: cuSPARSE ran out of resources for a " + std::to_string(a.rows) + " x " +
                          std::to_string(a.cols) + " (" + std::to_string(a.nnz) + " nonzeros) times " +
                          std::to_string(b.rows) + " x " + std::to_string(b.cols) + " (" + std::to_string(b.nnz) +
                          " nonzeros) product");
}

void launch_csr_to_dense(const DeviceCsr& a, double* out, cudaStream_t s) {
  const int32_t n = a.rows;
  if (n == 0) return;
  CHECK_CUDA(cudaMemsetAsync(out, 0, sizeof(double) * n * n, s));
  csr_to_dense_kernel<<<row_blocks(n), kThreads, 0, s>>>(n, a.row_ptr.data(), a.col_idx.data(), a.values.data(), out);
  CHECK_LAUNCH("csr-to-dense");
}

void launch_dense_apply(int32_t n, int k, const double* m, const double* r, double* z, cudaStream_t s) {
  if (n == 0 || k == 0) return;
  const int64_t threads = int64_t{n} * 32;
  dense_apply_kernel<<<static_cast<int>((threads + kThreads - 1) / kThreads), kThreads, 0, s>>>(n, k, m, r, z);
  CHECK_LAUNCH("dense-apply");
}

CsrMatrix download_csr(const DeviceCsr& a) {
  CsrMatrix h;
  h.rows = a.rows, h.cols = a.cols;
  h.row_ptr = download_row_offsets(a);
  h.col_idx = a.col_idx.download<decltype(h.col_idx)>();
  h.values = a.values.download<decltype(h.values)>();
  if (h.row_ptr.empty()) h.row_ptr.assign(1, 0);
  return h;
}

std::shared_ptr<DeviceCsr> upload_csr_shared(const CsrMatrix& a) {
  auto d = std::make_shared<DeviceCsr>(empty_csr(a.rows, a.cols, a.nnz(), "uploaded CSR"));
  upload_row_offsets(*d, a.row_ptr, "uploaded CSR");
  d->col_idx.upload(a.col_idx);
  d->values.upload(a.values);
  return d;
}

}  // namespace spcg

SPCG_KERNEL_MODULE(amg_kernels)
