// Persistent CG: the whole iteration loop in one cooperative kernel, two grid-wide barriers per iteration.
// Work mapping: phase A gives each row to a group of W lanes (W = power of two <= mean row length, as in
// csr-vector) that forms p_new = z + beta p_old on the fly for every gathered column, so the p update costs no
// pass of its own (p is double-buffered: p_old is only read, p_new only written, in phase A); the group writes
// q = A p_new and p_new for its row and accumulates p_new . q. Phase B is one thread per row: x += alpha p,
// r -= alpha q, r.r and r.z. Block sums go to per-block partials; after the barrier every block reduces the
// partials in the same fixed order, so all blocks hold bitwise-identical scalars and take the same branch
// (deterministic, no atomics). Rows longer than the view's long_row_entries skip the group walk; their pieces
// go to whole warps, which leave piece sums; after the barrier every block adds the pieces of each long row and
// that row's share of the dot product in the same fixed order (no extra pass, no arrival counters).
// The single-kernel CG with grid-wide barriers follows NVIDIA's cuda-samples
// conjugateGradientMultiBlockCG; the row walk is csr-vector's (Bell & Garland 2009).
#include <cooperative_groups.h>

#include <algorithm>
#include <climits>

#include "cg_persistent.hpp"
#include "cuda_check.hpp"
#include "device_utils.cuh"

namespace spcg {
namespace {

namespace cgx = cooperative_groups;

struct PersistentCgTuning {
  static constexpr int threads = 256;
  static constexpr int32_t max_rows = 65536;      // beyond this bandwidth dominates: use the graph path
  static constexpr int64_t max_nnz = 4 << 20;
  static constexpr int max_blocks_per_sm = 4;     // enough groups for one row each up to ~16k rows
  static constexpr int max_partials_per_thread = 4;  // grid_total: blocks <= threads * this
  static constexpr int max_trips = 4;             // rows per group: held in registers between the phases
  static constexpr int entries_per_lane = 2;      // group width: mean row length / this, rounded down to 2^m
  static constexpr int max_long_pieces = 1024;    // long-row piece sums staged in shared memory per barrier
  static constexpr int max_long_rows = 256;
};

// Sums of a[0..count) and (if b) b[0..count) in a fixed order, identical in every block; every thread gets
// them. All loads of both arrays are issued before any add (one L2 round trip), then a fixed shuffle tree.
__device__ void grid_totals(const double* a, const double* b, int count, double& ta, double& tb) {
  constexpr int U = PersistentCgTuning::max_partials_per_thread;
  __shared__ double s_tot[2];
  double va[U], vb[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int i = threadIdx.x + u * blockDim.x;
    va[u] = i < count ? __ldcg(a + i) : 0.0;
    vb[u] = b && i < count ? __ldcg(b + i) : 0.0;
  }
  double sa = 0, sb = 0;
#pragma unroll
  for (int u = 0; u < U; ++u) sa += va[u], sb += vb[u];
  sa = dev::block_sum(sa);
  if (b) sb = dev::block_sum(sb);
  if (threadIdx.x == 0) s_tot[0] = sa, s_tot[1] = sb;
  __syncthreads();
  ta = s_tot[0];
  if (b) tb = s_tot[1];
  __syncthreads();
}

template <int W, bool Jacobi>
__global__ void __launch_bounds__(PersistentCgTuning::threads, 2)
    persistent_cg_kernel(PersistentCgProblem P, int start, int iterations) {
  constexpr int T = PersistentCgTuning::max_trips;
  cgx::grid_group grid = cgx::this_grid();
  const int32_t n = P.a.rows;
  const bool single = gridDim.x == 1;  // one block: __syncthreads, block sums, L1-cached vectors
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, nthreads = int64_t{gridDim.x} * blockDim.x;
  const int lane = threadIdx.x % W;
  const int64_t groups = nthreads / W;
  const int64_t warp_first_group = (tid - threadIdx.x % 32) / W, group_in_warp = (threadIdx.x % 32) / W;
  double* pq_part = P.partials;
  double* rr_part = P.partials + gridDim.x;
  double* rz_part = P.partials + 2 * gridDim.x;
  double* piece_sums = P.partials + 3 * gridDim.x;
  CgScalars& S = *P.state;
  const double tol2 = S.tol2;
  const int max_iterations = S.max_iterations;
  const int32_t long_entries = P.a.long_row_entries > 0 ? P.a.long_row_entries : INT_MAX;
  int it = 0;
  double rr = 0, rz = 0, beta = 0;

  // The owner of row base_t + group_in_warp (lane 0 of its group, trip t) keeps r, p, q of that row in
  // registers from phase to phase; memory copies exist for the other rows' gathers.
  double r_own[T], p_own[T], q_own[T], d_own[T], x_own[T];
  bool long_own[T];
  int slot_own[T];  // long rows: the slot of the row in long_slots
  auto row_of = [&](int t) { return warp_first_group + t * groups + group_in_warp; };
  auto owns = [&](int t) { return lane == 0 && row_of(t) < n; };
  // Vectors written by other threads: through L2 (__ldcg) across blocks, plain (L1) loads within one block.
  auto load_vec = [&](const double* v, int64_t j) { return single ? v[j] : __ldcg(v + j); };
  auto z_of = [&](int64_t j) {
    const double rj = load_vec(P.r, j);
    return Jacobi ? __ldg(P.dinv + j) * rj : rj;
  };
  auto barrier = [&] {
    if (single) __syncthreads();
    else grid.sync();
  };
  // Grid-wide sums of one or two per-thread values (part_b null: one), identical in every block.
  auto total2 = [&](double a, double b, double* part_a, double* part_b, double& ta, double& tb) {
    __shared__ double s_tot[2];
    a = dev::block_sum(a);
    if (part_b) b = dev::block_sum(b);
    if (single) {
      if (threadIdx.x == 0) s_tot[0] = a, s_tot[1] = b;
      __syncthreads();
      ta = s_tot[0], tb = s_tot[1];
      __syncthreads();
      return;
    }
    if (threadIdx.x == 0) {
      part_a[blockIdx.x] = a;
      if (part_b) part_b[blockIdx.x] = b;
    }
    grid.sync();
    grid_totals(part_a, part_b, gridDim.x, ta, tb);
  };
  auto record = [&](int status) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      S.iteration = it, S.rr = rr, S.rz = rz, S.beta = beta, S.status = status, S.done = status != kRunning;
    }
  };
  auto status_now = [&]() {
    if (blockIdx.x == 0 && threadIdx.x == 0 && S.history && it < S.history_capacity) S.history[it] = rr;
    if (!isfinite(rr)) return int{kNonFinite};
    if (rr <= tol2) return int{kConverged};
    if (it >= max_iterations) return int{kMaxIterations};
    return int{kRunning};
  };
  // finish(t, sum_k val[k] * gather(col[k])) for every short row, by its owner; every lane of a warp runs the
  // same trips (rows past n add 0), so the shuffles are full. Long rows: piece sums over whole warps, added up
  // after the next barrier by long_rows().
  auto for_each_row = [&](auto&& gather, auto&& finish) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (warp_first_group + t * groups >= n) break;
      const int64_t row = row_of(t);
      double sum = 0;
      if (row < n && !long_own[t]) {
        const int32_t end = __ldg(P.a.row_ptr + row + 1);
        for (int32_t k = __ldg(P.a.row_ptr + row) + lane; k < end; k += W)
          sum += __ldg(P.a.val + k) * gather(__ldg(P.a.col + k));
      }
      sum = dev::warp_sum<W>(sum);
      if (owns(t) && !long_own[t]) finish(t, sum);
    }
    // a warp per piece (pieces of 128 entries: 4 per lane), so all of a long row's pieces run at once
    const int64_t warp = tid / 32, warps = nthreads / 32;
    for (int64_t piece = warp; piece < P.a.long_piece_count; piece += warps) {
      const int4 pc = P.a.long_pieces[piece];  // row, begin, end, slot
      double sum = 0;
      for (int32_t k = pc.y + threadIdx.x % 32; k < pc.z; k += 32) sum += __ldg(P.a.val + k) * gather(__ldg(P.a.col + k));
      sum = dev::warp_sum(sum);
      if (threadIdx.x % 32 == 0) piece_sums[piece] = sum;
    }
  };
  // After a barrier: s_long[s] = sum of long row s's pieces (thread s), and the two sums over long rows of
  // term(row_s, s_long[s]) (a double2), by a fixed block reduction: the same in every block. The slot table is
  // staged in shared memory once.
  __shared__ double s_pieces[PersistentCgTuning::max_long_pieces], s_long[PersistentCgTuning::max_long_rows];
  __shared__ int s_slot_first[PersistentCgTuning::max_long_rows], s_slot_count[PersistentCgTuning::max_long_rows],
      s_slot_row[PersistentCgTuning::max_long_rows];
  __shared__ double s_extra[2];
  const int long_slots = P.a.long_slot_count;
  for (int sl = threadIdx.x; sl < long_slots; sl += blockDim.x) {
    const int2 slot = P.a.long_slots[sl];
    s_slot_first[sl] = slot.x, s_slot_count[sl] = slot.y, s_slot_row[sl] = P.a.long_pieces[slot.x].x;
  }
  __syncthreads();
  auto long_rows = [&](auto&& term) {
    for (int i = threadIdx.x; i < P.a.long_piece_count; i += blockDim.x) s_pieces[i] = __ldcg(piece_sums + i);
    __syncthreads();
    double2 mine = make_double2(0.0, 0.0);
    for (int sl = threadIdx.x; sl < long_slots; sl += blockDim.x) {
      double total = 0;
      for (int q = 0; q < s_slot_count[sl]; ++q) total += s_pieces[s_slot_first[sl] + q];
      s_long[sl] = total;
      const double2 t = term(int64_t{s_slot_row[sl]}, total);
      mine.x += t.x, mine.y += t.y;
    }
    const double a = dev::block_sum(mine.x), b = dev::block_sum(mine.y);
    if (threadIdx.x == 0) s_extra[0] = a, s_extra[1] = b;
    __syncthreads();
    const double2 extra = make_double2(s_extra[0], s_extra[1]);
    __syncthreads();
    return extra;
  };

#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int64_t row = row_of(t);
    long_own[t] = row < n && __ldg(P.a.row_ptr + row + 1) - __ldg(P.a.row_ptr + row) > long_entries;
    slot_own[t] = 0;
    if (long_own[t])
      for (int sl = 0; sl < long_slots; ++sl)
        if (s_slot_row[sl] == row) slot_own[t] = sl;
    d_own[t] = Jacobi && row < n ? __ldg(P.dinv + row) : 1.0;
    r_own[t] = p_own[t] = q_own[t] = 0;
    x_own[t] = owns(t) ? P.x[row] : 0.0;  // x lives in registers too: phase B never waits for a load
  }
  auto z_own = [&](int t) { return Jacobi ? d_own[t] * r_own[t] : r_own[t]; };

  if (start) {  // r = b - A x; rr = r.r, rz = r.z
    double vrr = 0, vrz = 0;
    for_each_row([&](int32_t j) { return __ldcg(P.x + j); },
                 [&](int t, double ax) {
                   const int64_t row = row_of(t);
                   r_own[t] = P.b[row] - ax;
                   P.r[row] = r_own[t];
                   vrr += r_own[t] * r_own[t];
                   vrz += r_own[t] * z_own(t);
                 });
    total2(vrr, vrz, rr_part, Jacobi ? rz_part : nullptr, rr, rz);
    if (long_slots > 0) {
      const double2 extra = long_rows([&](int64_t row, double ax) {
        const double ri = P.b[row] - ax;
        return make_double2(ri * ri, ri * (Jacobi ? __ldg(P.dinv + row) * ri : ri));
      });
      rr += extra.x, rz += extra.y;
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (owns(t) && long_own[t]) {
          r_own[t] = P.b[row_of(t)] - s_long[slot_own[t]];
          P.r[row_of(t)] = r_own[t];
        }
      barrier();  // long rows' r in memory before anyone gathers it
    }
    if (!Jacobi) rz = rr;
    const int st = status_now();
    if (st != kRunning) return record(st);
  } else {
    if (S.done) return;
    it = S.iteration, rr = S.rr, rz = S.rz, beta = S.beta;
    // resuming: the owners take their rows' r and p from memory
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (owns(t)) {
        r_own[t] = __ldcg(P.r + row_of(t));
        if (it > 0) p_own[t] = __ldcg(P.p[it & 1] + row_of(t));
      }
  }

  for (int step = 0; step < iterations; ++step) {
    const double* p_old = P.p[it & 1];
    double* p_new = P.p[(it + 1) & 1];
    const bool first = it == 0;  // p_0 = z_0 (p_old holds nothing yet)
    // Phase A: p = z + beta p; q = A p; p'q
    double vpq = 0;
#pragma unroll
    for (int t = 0; t < T; ++t)  // long rows: the owner forms p now; the row sum comes from the pieces
      if (owns(t) && long_own[t]) {
        p_own[t] = first ? z_own(t) : fma(beta, p_own[t], z_own(t));
        p_new[row_of(t)] = p_own[t];
      }
    for_each_row([&](int32_t j) { return first ? z_of(j) : fma(beta, load_vec(p_old, j), z_of(j)); },
                 [&](int t, double ap) {
                   p_own[t] = first ? z_own(t) : fma(beta, p_own[t], z_own(t));
                   q_own[t] = ap;
                   p_new[row_of(t)] = p_own[t];
                   vpq += p_own[t] * ap;
                 });
    double pq = 0, unused = 0;
    total2(vpq, 0.0, pq_part, nullptr, pq, unused);
    if (long_slots > 0) {
      pq += long_rows([&](int64_t row, double ap) { return make_double2(__ldcg(p_new + row) * ap, 0.0); }).x;
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (owns(t) && long_own[t]) q_own[t] = s_long[slot_own[t]];
    }
    const double alpha = rz / pq;  // alpha = r'z / p'Ap
    if (!(pq > 0) || !isfinite(alpha)) return record(isfinite(pq) ? kBreakdown : kNonFinite);
    // Phase B, by the owners: x += alpha p; r -= alpha q; r.r, r.z
    double vrr = 0, vrz = 0;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (!owns(t)) continue;
      const int64_t row = row_of(t);
      x_own[t] = fma(alpha, p_own[t], x_own[t]);
      P.x[row] = x_own[t];
      r_own[t] = fma(-alpha, q_own[t], r_own[t]);
      P.r[row] = r_own[t];
      vrr += r_own[t] * r_own[t];
      vrz += r_own[t] * z_own(t);
    }
    double rz_new = 0;
    total2(vrr, vrz, rr_part, Jacobi ? rz_part : nullptr, rr, rz_new);
    if (!Jacobi) rz_new = rr;  // z = r
    beta = rz_new / rz;  // beta = r_new'z_new / r'z
    rz = rz_new;
    ++it;
    const int st = status_now();
    if (st != kRunning) return record(st);
  }
  record(kRunning);
}

template <bool Jacobi>
void* kernel_for_width(int w) {
  switch (w) {
    case 1: return reinterpret_cast<void*>(persistent_cg_kernel<1, Jacobi>);
    case 2: return reinterpret_cast<void*>(persistent_cg_kernel<2, Jacobi>);
    case 4: return reinterpret_cast<void*>(persistent_cg_kernel<4, Jacobi>);
    case 8: return reinterpret_cast<void*>(persistent_cg_kernel<8, Jacobi>);
    case 16: return reinterpret_cast<void*>(persistent_cg_kernel<16, Jacobi>);
    default: return reinterpret_cast<void*>(persistent_cg_kernel<32, Jacobi>);
  }
}

// Lanes per row: a power of two <= mean row length / entries_per_lane. The row walk is a chain of L2 round trips,
// so wide groups pay even though they need more blocks (measured on H200 with mean/1, /2, /4, /8, /16: /2 best
// overall; /8 and /16 up to 4x slower on bcsstk13).
int group_width(int32_t rows, int64_t nnz) {
  const double mean = rows > 0 ? double(nnz) / rows : 1.0;
  int w = 1;
  while (w < 32 && PersistentCgTuning::entries_per_lane * w <= mean) w *= 2;
  return w;
}
int group_width(const CsrView& a) { return group_width(a.rows, a.nnz); }

}  // namespace

int32_t persistent_cg_long_row_threshold(int32_t rows, int64_t nnz) { return std::max(64, 16 * group_width(rows, nnz)); }

bool persistent_cg_suits(const CsrView& a, bool jacobi) {
  if (!a || a.rows != a.cols || a.rows == 0) return false;
  if (a.rows > PersistentCgTuning::max_rows || a.nnz > PersistentCgTuning::max_nnz) return false;
  // every row needs an owner: rows <= groups * max_trips on a grid that is resident at once
  const int64_t groups = int64_t{persistent_cg_blocks(a, jacobi)} * PersistentCgTuning::threads / group_width(a);
  if (a.rows > groups * PersistentCgTuning::max_trips) return false;
  if (a.long_piece_count > PersistentCgTuning::max_long_pieces || a.long_slot_count > PersistentCgTuning::max_long_rows)
    return false;
  static const bool cooperative = [] {
    int dev = 0, ok = 0;
    CHECK_CUDA(cudaGetDevice(&dev));
    CHECK_CUDA(cudaDeviceGetAttribute(&ok, cudaDevAttrCooperativeLaunch, dev));
    return ok != 0;
  }();
  return cooperative;
}

int persistent_cg_blocks(const CsrView& a, bool jacobi) {
  const int w = group_width(a);
  int per_sm = 0;  // every block must be resident at once: ask the occupancy calculator, not the tuning table
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, jacobi ? kernel_for_width<true>(w) : kernel_for_width<false>(w), PersistentCgTuning::threads, 0));
  const int rows_per_block = PersistentCgTuning::threads / w;
  // One block when it covers every row within max_trips: no grid barriers at all, vectors from L1.
  if (a.rows <= int64_t{rows_per_block} * PersistentCgTuning::max_trips) return 1;
  const int needed = static_cast<int>((int64_t{a.rows} + rows_per_block - 1) / rows_per_block);
  const int cap = std::min(device_sm_count() * std::min(per_sm, PersistentCgTuning::max_blocks_per_sm),
                           PersistentCgTuning::threads * PersistentCgTuning::max_partials_per_thread);
  return std::max(1, std::min(needed, cap));
}

void launch_persistent_cg(const PersistentCgProblem& problem, bool start, int iterations, cudaStream_t stream) {
  const int w = group_width(problem.a);
  void* kernel = problem.dinv ? kernel_for_width<true>(w) : kernel_for_width<false>(w);
  const int blocks = persistent_cg_blocks(problem.a, problem.dinv != nullptr);
  PersistentCgProblem p = problem;
  int start_flag = start ? 1 : 0;
  void* args[] = {&p, &start_flag, &iterations};
  CHECK_CUDA(cudaLaunchCooperativeKernel(kernel, blocks, PersistentCgTuning::threads, args, 0, stream));
}

}  // namespace spcg
