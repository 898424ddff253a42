// Persistent CG: the whole iteration loop in one cooperative kernel, ONE grid-wide barrier per iteration.
// Iteration i (one phase): the owner of a row (lane 0 of the row's group of W lanes, W a power of two from the
// mean row length, as in csr-vector) advances its row from iteration i-1 in registers: x += alpha p,
// r -= alpha q, p = z + beta p; meanwhile the group forms p_i of every gathered column on the fly from the
// stored r, q, p of iteration i-1 with the same operations (bitwise the same p), and computes q = A p_i for
// its row. Each block adds its rows' shares of r.r, r.z, p.q, z.q and q.Dq (D = M^-1); after the one barrier
// every block reduces the per-block partials in the same fixed order (deterministic, no atomics, identical
// branches), gets alpha = r.z / p.q and the next r.z without another reduction:
//   r_{i+1}.z_{i+1} = r.z - 2 alpha z.q + alpha^2 q.Dq      (r_{i+1} = r - alpha q; z = D r)
// so beta needs no second barrier. z.q is summed, not replaced by p.q through conjugacy (the unstable form of
// this single-reduction CG: D'Azevedo, Eijkhout & Romine 1993); r.z is summed exactly every iteration for
// alpha and the stopping test uses the exact r.r. (Chronopoulos & Gear's variant, also one reduction, was
// measured: 10-25% more iterations on bcsstk03/06/08, see docs/perf-notes.md.) r, p and q are
// double-buffered by iteration parity (the gathers read i-1 while the owners write i), and so are the partials.
// Long rows (the view's long_slot_of_row >= 0) skip the group walk; their pieces go to whole warps, which
// leave piece sums; after the barrier every block adds the pieces of each long row into shared memory, where
// the owner and every gather of the next iteration take that row's q from (it is not read from memory).
// The grid barrier is one release-add per block on a counter and an acquire spin, the counter zeroed before
// each launch (cooperative groups' grid.sync adds two full fences per block); cooperative launch keeps every
// block resident. The single-kernel CG follows NVIDIA's cuda-samples conjugateGradientMultiBlockCG; the row
// walk is csr-vector's (Bell & Garland 2009).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "kernels/solver_ops/cg_persistent.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"

namespace spcg {
namespace {

struct PersistentCgTuning {
  static constexpr int threads = 256;
  static constexpr int max_blocks_per_sm = 4;     // enough groups for one row each up to ~16k rows
  static constexpr int max_partials_per_thread = 4;  // totals(): blocks <= threads * this
  static constexpr int max_trips = 4;             // rows per group: held in registers between the phases
  static constexpr int entries_per_lane = 2;      // group width: mean row length / this, rounded down to 2^m
  static constexpr int loads_in_flight = 4;       // row entries per lane whose gathers are issued together
  static constexpr int warp_summed_pieces = 8;    // long rows of more pieces are added up by a warp
  static constexpr int max_long_pieces = 1024;    // long-row piece sums staged in shared memory per barrier
  static constexpr int max_long_rows = 256;
};
// After a barrier one thread loads up to max_partials_per_thread per-block partials and piece sums and one
// long row's staged values, all issued together.
static_assert(PersistentCgTuning::max_long_rows <= PersistentCgTuning::threads, "one long row per thread");
static_assert(PersistentCgTuning::max_long_pieces <= PersistentCgTuning::threads * PersistentCgTuning::max_partials_per_thread,
              "piece sums per thread");

enum SumIndex { kRR, kRZ, kPQ, kZQ, kQDQ, kSumCount };

// Block-wide sums of S values (fixed shuffle tree, then warp 0 over the warp sums); every thread gets them.
template <int S>
__device__ void block_sums(double (&v)[S]) {
  __shared__ double s_part[S][32], s_out[S];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
#pragma unroll
  for (int k = 0; k < S; ++k) v[k] = dev::warp_sum(v[k]);
  if (lane == 0)
#pragma unroll
    for (int k = 0; k < S; ++k) s_part[k][warp] = v[k];
  __syncthreads();
  if (warp == 0)
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const double t = dev::warp_sum(lane < warps ? s_part[k][lane] : 0.0);
      if (lane == 0) s_out[k] = t;
    }
  __syncthreads();
#pragma unroll
  for (int k = 0; k < S; ++k) v[k] = s_out[k];
}

// sum_k val[k] * gather(col[k]) over this lane's entries begin + lane, begin + lane + step, ... < end, in that
// order. The gathers are L2 round trips: U of them are issued before the first is used (a plain loop waits
// for each in turn).
template <int Step, class Gather>
__device__ __forceinline__ double lane_row_dot(const PersistentCgView& a, int32_t begin, int32_t end, int lane, Gather&& gather) {
  constexpr int U = PersistentCgTuning::loads_in_flight;
  double sum = 0;
  if constexpr (Step == 1) {  // one lane per row (mean row length < 2): the predicated chunk ran 2.6x slower on bcsstm05
    for (int32_t k = begin + lane; k < end; ++k) sum += __ldg(a.val + k) * gather(__ldg(a.col + k));
  } else {
    for (int32_t k0 = begin + lane; k0 < end; k0 += U * Step) {
      int32_t c[U];
      double v[U], g[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int32_t k = k0 + u * Step;
        c[u] = k < end ? __ldg(a.col + k) : -1;
        v[u] = k < end ? __ldg(a.val + k) : 0.0;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) g[u] = c[u] >= 0 ? gather(c[u]) : 0.0;
#pragma unroll
      for (int u = 0; u < U; ++u) sum = fma(v[u], g[u], sum);
    }
  }
  return sum;
}

// One row of iteration i from iteration i-1's r, q, p: the owner and every gather run exactly these
// operations, so all copies of p_i agree bitwise. Returns p_i; r becomes r_i.
template <bool Jacobi>
__device__ __forceinline__ double advance_row(double& r, double q, double p_old, double d, double alpha, double beta,
                                              bool first) {
  if (first) return Jacobi ? d * r : r;  // p_0 = z_0
  r = fma(-alpha, q, r);
  return fma(beta, p_old, Jacobi ? d * r : r);
}

template <int W, bool Jacobi>
__global__ void __launch_bounds__(PersistentCgTuning::threads, 2)
    persistent_cg_kernel(PersistentCgProblem P, int start, int iterations) {
  constexpr int T = PersistentCgTuning::max_trips;
  constexpr int S = kSumCount;
  const int32_t n = P.a.rows;
  const bool single = gridDim.x == 1;  // one block: __syncthreads, block sums, L1-cached vectors
  const int64_t tid = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, nthreads = int64_t{gridDim.x} * blockDim.x;
  const int lane = threadIdx.x % W;
  const int64_t groups = nthreads / W;
  const int64_t warp_first_group = (tid - threadIdx.x % 32) / W, group_in_warp = (threadIdx.x % 32) / W;
  const int64_t stride = gridDim.x;
  const int pieces = P.a.long_piece_count;
  const int long_slots = P.a.long_slot_count;
  const bool has_long = long_slots > 0;
  // buffers by iteration parity, selected (not indexed: a runtime index would put the arrays in local memory)
  auto pick = [](auto* const(&pair)[2], int parity) { return parity ? pair[1] : pair[0]; };
  auto partials = [&](int parity) { return P.partials + parity * S * stride; };
  auto piece_sums = [&](int parity) { return P.partials + 2 * S * stride + parity * pieces; };
  auto long_pr = [&](int parity) {  // the owners' p and r of each long row, staged for the other blocks
    return reinterpret_cast<double2*>(P.partials + 2 * (S * stride + pieces)) + parity * long_slots;
  };
  CgScalars& St = *P.state;
  const double tol2 = St.tol2;
  const int max_iterations = St.max_iterations;
  unsigned barrier_target = 0;

  // The owner of row base_t + group_in_warp (lane 0 of its group, trip t) keeps r, p, q of that row in
  // registers; memory copies exist for the other rows' gathers. x is only touched by the owner (in memory: its
  // load is off the critical path, and registers are short).
  double r_own[T], p_own[T], q_own[T];
  int slot_own[T];  // -1: short row; else the row's long-row slot
  auto row_of = [&](int t) { return warp_first_group + t * groups + group_in_warp; };
  auto owns = [&](int t) { return lane == 0 && row_of(t) < n; };
  auto d_of = [&](int64_t row) { return Jacobi ? __ldg(P.dinv + row) : 1.0; };  // L1 hits: not worth registers
  // Vectors written by other threads: through L2 (__ldcg) across blocks, plain (L1) loads within one block.
  auto load_vec = [&](const double* v, int64_t j) { return single ? v[j] : __ldcg(v + j); };
  auto barrier = [&] {
    if (single) {
      __syncthreads();
    } else {
      // every block adds 1 once per barrier: the barrier is passed when the counter reaches blocks x barriers
      __syncthreads();
      barrier_target += gridDim.x;
      if (threadIdx.x == 0) {
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(P.barrier) : "memory");
        unsigned seen;
        do {
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(P.barrier) : "memory");
        } while (static_cast<int>(seen - barrier_target) < 0);
      }
      __syncthreads();
    }
  };
  // Long rows' tables: staged once per launch. After each barrier s_pieces holds the piece sums, s_long_pr the
  // owners' p and r of each long row, and s_long (filled by long_row_sums) the rows' sums.
  __shared__ double s_pieces[PersistentCgTuning::max_long_pieces], s_long[PersistentCgTuning::max_long_rows],
      s_slot_d[PersistentCgTuning::max_long_rows];
  __shared__ double2 s_long_pr[PersistentCgTuning::max_long_rows];
  // Grid totals of S per-thread values, identical in every block (part: this iteration's partials), and the
  // long rows' piece sums and staged p, r into shared memory: every load after the barrier is issued before
  // the first is used (one L2 round trip).
  auto totals = [&](double(&v)[S], double* part, const double* piece_in, const double2* pr_in) {
    constexpr int U = PersistentCgTuning::max_partials_per_thread;
    block_sums<S>(v);
    if (!single) {
      if (threadIdx.x == 0)
#pragma unroll
        for (int k = 0; k < S; ++k) part[k * stride + blockIdx.x] = v[k];
      barrier();
    }
    double pv[S][U], pc[U];
    double2 pr = make_double2(0.0, 0.0);
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int i = threadIdx.x + u * blockDim.x;
#pragma unroll
      for (int k = 0; k < S; ++k) pv[k][u] = !single && i < gridDim.x ? __ldcg(part + k * stride + i) : 0.0;
      pc[u] = i < pieces ? __ldcg(piece_in + i) : 0.0;
    }
    if (threadIdx.x < long_slots) pr = __ldcg(pr_in + threadIdx.x);
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (threadIdx.x + u * blockDim.x < pieces) s_pieces[threadIdx.x + u * blockDim.x] = pc[u];
    if (threadIdx.x < long_slots) s_long_pr[threadIdx.x] = pr;
    if (!single) {
#pragma unroll
      for (int k = 0; k < S; ++k) v[k] = (pv[k][0] + pv[k][1]) + (pv[k][2] + pv[k][3]);
      block_sums<S>(v);  // its barriers also publish s_pieces, s_long_pr
    } else if (has_long) {
      __syncthreads();
    }
  };
  int it = 0;  // the iterate checked last (x_it, r_it)
  double rr = 0, rz = 0, alpha = 0, beta = 0;
  auto record = [&](int status, int cur) {
#pragma unroll
    for (int t = 0; t < T; ++t)  // a resumed launch reads long rows' q from memory
      if (owns(t) && slot_own[t] >= 0) pick(P.q, cur)[row_of(t)] = q_own[t];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      St.iteration = it, St.rr = rr, St.rz = rz, St.alpha = alpha, St.beta = beta, St.status = status;
      St.done = status != kRunning;
    }
  };
  auto status_now = [&]() {
    if (blockIdx.x == 0 && threadIdx.x == 0 && St.history && it < St.history_capacity) St.history[it] = rr;
    if (!isfinite(rr)) return int{kNonFinite};
    if (rr <= tol2) return int{kConverged};
    if (it >= max_iterations) return int{kMaxIterations};
    return int{kRunning};
  };

  __shared__ int s_slot_first[PersistentCgTuning::max_long_rows], s_slot_count[PersistentCgTuning::max_long_rows],
      s_slot_row[PersistentCgTuning::max_long_rows];
  __shared__ int s_big_slot[PersistentCgTuning::max_long_rows], s_big_count;
  for (int sl = threadIdx.x; sl < long_slots; sl += blockDim.x) {
    const int2 slot = P.a.long_slots[sl];
    s_slot_first[sl] = slot.x, s_slot_count[sl] = slot.y, s_slot_row[sl] = P.a.long_pieces[slot.x].x;
    s_slot_d[sl] = d_of(s_slot_row[sl]);
  }
  __syncthreads();
  if (threadIdx.x == 0) {  // once per launch: the slots a warp adds up, in slot order
    int count = 0;
    for (int sl = 0; sl < long_slots; ++sl)
      if (s_slot_count[sl] > PersistentCgTuning::warp_summed_pieces) s_big_slot[count++] = sl;
    s_big_count = count;
  }
  __syncthreads();
  const int big_slots = s_big_count;
  // finish(t, sum_k val[k] * gather(col[k])) for every short row, by its owner; every lane of a warp runs the
  // same trips (rows past n add 0), so the shuffles are full. Long rows: piece sums over whole warps into
  // piece_out, added up after the next barrier by long_row_sums().
  auto for_each_row = [&](auto&& gather, auto&& finish, double* piece_out) {
#pragma unroll
    for (int t = 0; t < T; ++t) {
      if (warp_first_group + t * groups >= n) break;
      const int64_t row = row_of(t);
      double sum = 0;
      if (row < n && slot_own[t] < 0)
        sum = lane_row_dot<W>(P.a, __ldg(P.a.row_ptr + row), __ldg(P.a.row_ptr + row + 1), lane, gather);
      sum = dev::warp_sum<W>(sum);
      if (owns(t) && slot_own[t] < 0) finish(t, sum);
    }
    // a warp per piece (pieces of 128 entries: 4 per lane), so all of a long row's pieces run at once
    const int64_t warp = tid / 32, warps = nthreads / 32;
    for (int64_t piece = warp; piece < pieces; piece += warps) {
      const int4 pc = P.a.long_pieces[piece];  // row, begin, end, slot
      const double sum = dev::warp_sum(lane_row_dot<32>(P.a, pc.y, pc.z, threadIdx.x % 32, gather));
      if (threadIdx.x % 32 == 0) piece_out[piece] = sum;
    }
  };
  // After totals(): s_long[s] = the sum of long row s's pieces, and the sums over long rows of
  // term(slot, s_long[s]) (3 values), by a fixed block reduction: the same in every block. Rows of few pieces:
  // a thread each; of many: a warp each.
  auto long_row_sums = [&](auto&& term, double(&extra)[3]) {
    extra[0] = extra[1] = extra[2] = 0;
    for (int sl = threadIdx.x; sl < long_slots; sl += blockDim.x) {
      if (s_slot_count[sl] > PersistentCgTuning::warp_summed_pieces) continue;
      double total = 0;
      for (int q = 0; q < s_slot_count[sl]; ++q) total += s_pieces[s_slot_first[sl] + q];
      s_long[sl] = total;
      term(sl, total, extra);
    }
    for (int b = threadIdx.x / 32; b < big_slots; b += blockDim.x / 32) {
      const int sl = s_big_slot[b];
      double total = 0;
      for (int q = threadIdx.x % 32; q < s_slot_count[sl]; q += 32) total += s_pieces[s_slot_first[sl] + q];
      total = dev::warp_sum(total);
      if (threadIdx.x % 32 == 0) {
        s_long[sl] = total;
        term(sl, total, extra);
      }
    }
    block_sums<3>(extra);  // its barriers also publish s_long to the block
  };

#pragma unroll
  for (int t = 0; t < T; ++t) {
    const int64_t row = row_of(t);
    slot_own[t] = has_long && row < n ? __ldg(P.a.long_slot_of_row + row) : -1;
    r_own[t] = p_own[t] = q_own[t] = 0;
  }

  if (start) {  // r_0 = b - A x_0 (into the buffer that iteration 0 gathers from); r.r
    double v[S] = {0, 0, 0, 0, 0};
    for_each_row([&](int32_t j) { return __ldcg(P.x + j); },
                 [&](int t, double ax) {
                   r_own[t] = P.b[row_of(t)] - ax;
                   P.r[1][row_of(t)] = r_own[t];
                   v[kRR] += r_own[t] * r_own[t];
                 },
                 piece_sums(1));
    totals(v, partials(1), piece_sums(1), long_pr(1));
    rr = v[kRR];
    if (has_long) {
      double extra[3];
      long_row_sums(
          [&](int sl, double ax, double(&e)[3]) {
            const double ri = P.b[s_slot_row[sl]] - ax;
            e[0] += ri * ri;
          },
          extra);
      rr += extra[0];
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (owns(t) && slot_own[t] >= 0) {
          r_own[t] = P.b[row_of(t)] - s_long[slot_own[t]];
          P.r[1][row_of(t)] = r_own[t];
        }
      barrier();  // long rows' r in memory before anyone gathers it
    }
    const int st = status_now();
    if (st != kRunning) return record(st, 1);
  } else {
    if (St.done) return;
    it = St.iteration, rr = St.rr, rz = St.rz, alpha = St.alpha, beta = St.beta;
    // resuming after iteration it: the owners take their rows from memory, every block its long rows' q
    const int cur = it & 1;
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (owns(t)) {
        r_own[t] = __ldcg(pick(P.r, cur) + row_of(t));
        p_own[t] = __ldcg(pick(P.p, cur) + row_of(t));
        q_own[t] = __ldcg(pick(P.q, cur) + row_of(t));
      }
    for (int sl = threadIdx.x; sl < long_slots; sl += blockDim.x) s_long[sl] = __ldcg(pick(P.q, cur) + s_slot_row[sl]);
    __syncthreads();
    ++it;
  }

  // `it` is now the iteration to form; alpha, beta are the previous iteration's (unused when it == 0).
  for (int step = 0; step < iterations; ++step, ++it) {
    const bool first = it == 0;
    const int cur = it & 1, prev = cur ^ 1;
    const double* r_prev = pick(P.r, prev);
    const double* p_prev = pick(P.p, prev);
    const double* q_prev = pick(P.q, prev);
    double* r_cur = pick(P.r, cur);
    double* p_cur = pick(P.p, cur);
    double* q_cur = pick(P.q, cur);
    // Owners: x_it = x + alpha p; r_it = r - alpha q; p_it = z_it + beta p
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (owns(t)) {
        const int64_t row = row_of(t);
        if (!first) P.x[row] = fma(alpha, p_own[t], P.x[row]);
        p_own[t] = advance_row<Jacobi>(r_own[t], q_own[t], p_own[t], d_of(row), alpha, beta, first);
        r_cur[row] = r_own[t];
        p_cur[row] = p_own[t];
        if (slot_own[t] >= 0) long_pr(cur)[slot_own[t]] = make_double2(p_own[t], r_own[t]);
      }
    // q = A p_it, p_it of every gathered column formed from iteration it-1's stored r, q, p
    double v[S] = {0, 0, 0, 0, 0};
    for_each_row(
        [&](int32_t j) {
          double rj = load_vec(r_prev, j);
          if (first) return advance_row<Jacobi>(rj, 0.0, 0.0, d_of(j), 0.0, 0.0, true);
          double qj = load_vec(q_prev, j);
          const double pj = load_vec(p_prev, j);
          if (has_long) {
            const int sl = __ldg(P.a.long_slot_of_row + j);
            if (sl >= 0) qj = s_long[sl];
          }
          return advance_row<Jacobi>(rj, qj, pj, d_of(j), alpha, beta, false);
        },
        [&](int t, double ap) {
          q_own[t] = ap;
          q_cur[row_of(t)] = ap;
          const double d = d_of(row_of(t));
          v[kPQ] += p_own[t] * ap;
          v[kZQ] += d * r_own[t] * ap;
          v[kQDQ] += ap * d * ap;
        },
        piece_sums(cur));
#pragma unroll
    for (int t = 0; t < T; ++t)
      if (owns(t)) v[kRR] += r_own[t] * r_own[t], v[kRZ] += r_own[t] * d_of(row_of(t)) * r_own[t];
    totals(v, partials(cur), piece_sums(cur), long_pr(cur));
    if (has_long) {  // q of the long rows, and their shares of p.q, z.q, q.Dq
      double extra[3];
      long_row_sums(
          [&](int sl, double aq, double(&e)[3]) {
            const double d = s_slot_d[sl];
            e[0] += s_long_pr[sl].x * aq;
            e[1] += d * s_long_pr[sl].y * aq;
            e[2] += aq * d * aq;
          },
          extra);
      v[kPQ] += extra[0], v[kZQ] += extra[1], v[kQDQ] += extra[2];
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (owns(t) && slot_own[t] >= 0) q_own[t] = s_long[slot_own[t]];
    }
    rr = v[kRR], rz = Jacobi ? v[kRZ] : v[kRR];
    const double pq = v[kPQ];
    int st = status_now();
    if (st == kRunning) {
      alpha = rz / pq;  // alpha = r'z / p'Ap
      if (!(pq > 0) || !isfinite(alpha)) st = isfinite(pq) ? kBreakdown : kNonFinite;
    }
    if (st != kRunning) return record(st, cur);
    // beta = r_{it+1}'z_{it+1} / r'z with r_{it+1} = r - alpha q, expanded (no second reduction)
    const double rz_next = fma(alpha, fma(alpha, v[kQDQ], -2.0 * v[kZQ]), rz);
    beta = fmax(rz_next, 0.0) / rz;
    if (step + 1 == iterations) return record(kRunning, cur);
  }
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

// Lanes per row: a power of two <= mean row length / entries_per_lane (measured on H200 with mean/1, /2, /4,
// /8, /16 when the row walk waited for each gather: /2 best overall).
int mean_rule_width(int32_t rows, int64_t nnz) {
  const double mean = rows > 0 ? double(nnz) / rows : 1.0;
  int w = 1;
  while (w < 32 && PersistentCgTuning::entries_per_lane * w <= mean) w *= 2;
  return w;
}
int group_width(const PersistentCgView& a) { return a.lanes_per_row > 0 ? a.lanes_per_row : mean_rule_width(a.rows, a.nnz); }

// Long rows of a row-length table at a threshold: how many, in how many pieces.
std::pair<int64_t, int64_t> long_rows_above(const RowOffset* row_ptr, int32_t rows, int32_t threshold) {
  int64_t count = 0, pieces = 0;
  for (int32_t i = 0; i < rows; ++i) {
    const int32_t len = static_cast<int32_t>(row_ptr[i + 1] - row_ptr[i]);
    if (len > threshold) ++count, pieces += (len + kPersistentCgPieceEntries - 1) / kPersistentCgPieceEntries;
  }
  return {count, pieces};
}
bool tables_hold(std::pair<int64_t, int64_t> long_rows) {
  return long_rows.first <= PersistentCgTuning::max_long_rows && long_rows.second <= PersistentCgTuning::max_long_pieces;
}

}  // namespace

// Width: the mean rule, halved (not below 2 lanes) while one row per group would need more blocks than SMs, as
// long as no more rows then need more than two chunks of loads_in_flight entries per lane: a second block on an
// SM adds to every barrier and grid reduction (H100: fv1 9.2 us per iteration with 150 blocks of 4-lane
// groups, 6.9 us with 76 blocks of 2-lane groups), while one lane per row loses coalescing (bodyy4 13.9 us at
// 1 lane, 6.8 at 2) and long rows cost (bcsstk18 13.2 us at 4 lanes with its 33-64-entry rows as pieces,
// 7.9 us at 8 lanes with none).
// Long rows: more than two chunks would keep a group waiting for three or more gather round trips while a warp
// per 128-entry piece needs one after its own row, so longer rows become pieces as long as the tables hold them
// (else the threshold doubles).
PersistentCgPlan persistent_cg_plan(const RowOffset* row_ptr, int32_t rows) {
  if (rows <= 0) return {1, 0};
  constexpr int U = PersistentCgTuning::loads_in_flight;
  int w = mean_rule_width(rows, static_cast<int64_t>(row_ptr[rows] - row_ptr[0]));
  const int64_t sms = device_sm_count();
  auto blocks_for = [&](int width) {
    const int64_t rows_per_block = PersistentCgTuning::threads / width;
    return (int64_t{rows} + rows_per_block - 1) / rows_per_block;
  };
  while (w > 2 && blocks_for(w) > sms &&
         long_rows_above(row_ptr, rows, 2 * (w / 2) * U).first <= long_rows_above(row_ptr, rows, 2 * w * U).first)
    w /= 2;
  int32_t threshold = 2 * w * U;
  while (!tables_hold(long_rows_above(row_ptr, rows, threshold))) threshold *= 2;
  return {w, threshold};
}

bool persistent_cg_suits(const PersistentCgView& a, bool jacobi) {
  if (!a || a.rows != a.cols || a.rows == 0) return false;
  if (a.rows > PersistentCgLimits::max_rows || a.nnz > PersistentCgLimits::max_nnz) return false;
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

int persistent_cg_blocks(const PersistentCgView& a, bool jacobi) {
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

int64_t persistent_cg_partials(const PersistentCgView& a, bool jacobi) {
  return 2 * (int64_t{kSumCount} * persistent_cg_blocks(a, jacobi) + a.long_piece_count + 2 * a.long_slot_count);
}

std::unique_ptr<PersistentCgMatrix> PersistentCgMatrix::make(const MatrixSetup& a) {
  if (a.rows() <= 0 || a.rows() != a.cols() || a.rows() > PersistentCgLimits::max_rows ||
      a.nnz() > PersistentCgLimits::max_nnz)
    return nullptr;
  // The CSR is the setup's shared one; the long-row tables come from the row pointers (at most max_rows rows:
  // well under a millisecond on the host).
  std::unique_ptr<PersistentCgMatrix> m(new PersistentCgMatrix());
  m->csr_ = a.device_csr();
  m->csr_->require_narrow("persistent CG");
  const CsrMatrix& h = a.host();
  std::vector<int4> pieces;
  std::vector<int2> slots;
  std::vector<int32_t> slot_of_row(static_cast<size_t>(h.rows), -1);
  const PersistentCgPlan plan = persistent_cg_plan(h.row_ptr.data(), h.rows);
  m->lanes_per_row_ = plan.lanes_per_row;
  for (int32_t i = 0; i < h.rows; ++i) {
    if (h.row_length(i) <= plan.long_row_entries) continue;
    const int first = static_cast<int>(pieces.size());
    slot_of_row[static_cast<size_t>(i)] = static_cast<int32_t>(slots.size());
    const int32_t end = static_cast<int32_t>(h.row_ptr[i + 1]);
    for (int32_t b = static_cast<int32_t>(h.row_ptr[i]); b < end; b += kPersistentCgPieceEntries)
      pieces.push_back({i, b, std::min(b + kPersistentCgPieceEntries, end), static_cast<int>(slots.size())});
    slots.push_back({first, static_cast<int>(pieces.size()) - first});
  }
  m->long_pieces_ = DeviceArray<int4>(pieces, "persistent CG long-row pieces");
  m->long_slots_ = DeviceArray<int2>(slots, "persistent CG long rows");
  if (!slots.empty()) m->long_slot_of_row_ = DeviceArray<int32_t>(slot_of_row, "persistent CG long-row slots");
  return m;
}

PersistentCgView PersistentCgMatrix::view() const {
  const DeviceCsr& c = *csr_;
  PersistentCgView v{c.rows, c.cols, c.nnz, c.row_ptr.data(), c.col_idx.data(), c.values.data()};
  v.lanes_per_row = lanes_per_row_;
  v.long_pieces = long_pieces_.data(), v.long_piece_count = static_cast<int32_t>(long_pieces_.size());
  v.long_slots = long_slots_.data(), v.long_slot_count = static_cast<int32_t>(long_slots_.size());
  v.long_slot_of_row = long_slot_of_row_.data();
  return v;
}

int64_t PersistentCgMatrix::device_bytes() const {
  return static_cast<int64_t>(long_pieces_.bytes() + long_slots_.bytes() + long_slot_of_row_.bytes());
}

void launch_persistent_cg(const PersistentCgProblem& problem, bool start, int iterations, cudaStream_t stream) {
  const int w = group_width(problem.a);
  void* kernel = problem.dinv ? kernel_for_width<true>(w) : kernel_for_width<false>(w);
  const int blocks = persistent_cg_blocks(problem.a, problem.dinv != nullptr);
  PersistentCgProblem p = problem;
  if (blocks > 1) {
    if (!p.barrier) throw std::invalid_argument("persistent CG: a multi-block launch needs a barrier counter");
    CHECK_CUDA(cudaMemsetAsync(p.barrier, 0, sizeof(unsigned int), stream));
  }
  int start_flag = start ? 1 : 0;
  void* args[] = {&p, &start_flag, &iterations};
  CHECK_CUDA(cudaLaunchCooperativeKernel(kernel, blocks, PersistentCgTuning::threads, args, 0, stream));
}

}  // namespace spcg
