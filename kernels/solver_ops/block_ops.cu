// Block CG's dense n x m work without cuBLAS. cuBLAS GEMM on these shapes (m = 16, inner dimension n or 16)
// ran at 30-55% of the copy bandwidth (H200, k = 16: 190 us for a Gram of two 268 MB blocks, 345-460 us for
// Y = Y + U M); these are streaming kernels that read each block once.
// Work mapping:
//  gram:    the result is cut into 8 x 8 tiles accumulated by FP64 tensor-core MMAs (m8n8k4, the K
//           dimension = 4 rows): a lane loads one entry per operand tile straight from global memory (8 lanes
//           read 64 contiguous bytes of a row), and that load serves 8 multiply-adds. A warp owns 2 x 2 or 4 x 4
//           tiles (the whole result up to 32 x 32), slices of warps take turns over quads of rows, slice sums are added
//           in a fixed order. (Measured and dropped: a 4 x 4 register tile per thread over rows staged in shared
//           memory was bound by shared-memory reads, 4 KB per row; a cp.async-staged MMA version reached only
//           ~1 TB/s; a kernel for [W, D^-1 V]' [W, V, R] loading each fragment once for both operand roles,
//           441 -> 310 us at 128^3, k = 16, was dropped when block CG moved to [W, D^-1 V]' [V, R] in commit
//           b803103 (H100, 2026-11-22; docs/perf-notes.md, "Pivoting on W'AW (an A-orthonormal P), kept").)
//  combine, update: G threads per row (G = next power of two of max(columns) / 4), 4 adjacent columns per
//           thread, 32 / G rows per warp; a thread loads 4 entries of each input row and the G threads of a row
//           exchange them by shuffles, so the row product with the small matrix (in shared memory) needs no
//           staging or barrier. Output rows are written once, coalesced; a thread's 4 columns are two 16-byte
//           accesses where the rows are aligned.
//  step:    block CG's update and next search block in one pass (m, k <= 16) on FP64 tensor cores: a warp per
//           8 rows, the small matrices held as MMA fragments in registers (block_step_kernel).
#include <algorithm>
#include <cstdint>

#include "kernels/solver_ops/block_ops.hpp"
#include "kernels/device_utils.cuh"

namespace spcg {
namespace {

struct BlockOpsTuning {
  static constexpr int threads = 256;
  // gram: results of up to 4 MMA tiles (16 x 16): a warp owns 2 x 2 tiles, all of it, and loads 4 quads of
  // rows per step; larger: 4 x 4 tiles per warp (one warp per result up to 32 x 32) and 1 quad, as the
  // accumulators take the registers. Measured on 32 x 32 (H100, k = 16): 4 warps of 2 x 2 tiles with 4 quads,
  // one warp with 2 quads (spilling) and one with 1 quad all took 218-223 us; the simplest stays.
  static constexpr int gram_small_tiles = 2, gram_small_quads = 4, gram_small_blocks_per_sm = 2;
  static constexpr int gram_wide_tiles = 4, gram_wide_quads = 1, gram_wide_blocks_per_sm = 2;
  static constexpr int columns_per_thread = 4;   // combine/update: adjacent output columns per thread
  static constexpr int stream_blocks_per_sm = 8;
  static constexpr int combine_rows = 4;         // combine: rows per thread sharing each read of M
  static constexpr int combine_rows_with_x = 2;  // ... when it also updates X (registers: U, Y and X rows)
  static constexpr int update_rows_with_x = 1;   // update: rows per thread (x2 blocks W and V) per read of A
  static constexpr int update_rows = 4;          // ... R only (block CG): one read of A serves 4 rows
  static constexpr int step_blocks_per_sm = 2;   // block_step: 3 (85 registers) spilled
};

int ceil_div(int a, int b) { return (a + b - 1) / b; }
int next_pow2(int v) {
  int p = 1;
  while (p < v) p *= 2;
  return p;
}

// out[i] = sum over blocks b (in order) of partials[b * count + i]: one warp per entry, lanes stride the
// blocks, a fixed shuffle tree (deterministic, and parallel, unlike a last-block combine of ~1000 blocks).
__global__ void reduce_partials_kernel(const double* __restrict__ partials, int blocks, int count, double* out) {
  const int i = blockIdx.x, lane = threadIdx.x;
  double v[4] = {0, 0, 0, 0};
  for (int b0 = lane; b0 < blocks; b0 += 4 * 32) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int b = b0 + u * 32;
      v[u] += b < blocks ? partials[int64_t{b} * count + i] : 0.0;
    }
  }
  const double s = dev::warp_sum((v[0] + v[1]) + (v[2] + v[3]));
  if (lane == 0) out[i] = s;
}

// D (8 x 8, two entries per lane) += A (8 x 4, one per lane) B (4 x 8, one per lane): the FP64 tensor-core MMA.
// Lane = 4 g + t holds A[g][t], B[t][g] and D[g][2t], D[g][2t + 1].
__device__ __forceinline__ void dmma_8x8x4(double (&d)[2], double a, double b) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%0, %1};\n"
               : "+d"(d[0]), "+d"(d[1])
               : "d"(a), "d"(b));
}

// Column j of [M1 M2 M3] (row-major blocks of w1, w2 and w3 columns): entry (row, j) is at p[row * ld].
struct BlockColumn {
  const double* p;
  int ld;
};
__device__ __forceinline__ BlockColumn block_column(int j, const double* m1, int w1, const double* m2, int w2,
                                                    const double* m3 = nullptr, int w3 = 0) {
  if (j < w1) return BlockColumn{m1 + j, w1};
  if (j < w1 + w2) return BlockColumn{m2 + (j - w1), w2};
  return BlockColumn{m3 + (j - w1 - w2), w3};
}

// TW x TW tiles per warp, QU quads of rows per warp and step (loads in flight), MinBlocks blocks per SM.
template <int TW, int QU, int MinBlocks>
__global__ void __launch_bounds__(BlockOpsTuning::threads, MinBlocks)
    gram_kernel(int64_t n, GramInputs g, double* partials) {
  extern __shared__ double slice_sums[];  // slices x a x b
  const int a = g.a1 + g.a2, b = g.b1 + g.b2 + g.b3;
  // The result is cut into 8 x 8 MMA tiles; a warp owns a TW x TW block of them, the warps of one slice cover
  // the result, and slices (grid-wide) take turns over quads of rows, QU quads per step.
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int gid = lane >> 2, tig = lane & 3;
  const int blocks_a = (a + 8 * TW - 1) / (8 * TW), blocks_b = (b + 8 * TW - 1) / (8 * TW);
  int group = 1;
  while (group < blocks_a * blocks_b) group *= 2;
  const int slices = warps / group, slice = warp / group, blk = warp % group;
  const bool owner = blk < blocks_a * blocks_b;
  const int ta0 = (blk % blocks_a) * TW, tb0 = (blk / blocks_a) * TW;
  const int tiles_a = min(TW, (a + 7) / 8 - ta0), tiles_b = min(TW, (b + 7) / 8 - tb0);
  double acc[TW][TW][2] = {};
  if (owner) {
    // This lane's A column (l = 8 ta + gid) and B column (c = 8 tb + gid) of each tile, clamped in range (the
    // products of clamped columns land in entries never written out).
    BlockColumn uc[TW], vc[TW];
    bool usc[TW];
#pragma unroll
    for (int x = 0; x < TW; ++x) {
      const int l = min(8 * (ta0 + x) + gid, a - 1), c = min(8 * (tb0 + x) + gid, b - 1);
      uc[x] = block_column(l, g.U1, g.a1, g.U2, g.a2);
      vc[x] = block_column(c, g.V1, g.b1, g.V2, g.b2, g.V3, g.b3);
      usc[x] = l >= g.a1 && g.u2_row_scale != nullptr;
    }
    const int64_t quads = (n + 3) / 4, full_quads = n / 4, step = int64_t{gridDim.x} * slices * QU;
    // One step: QU quads from q0. Unchecked steps (every row in range) load through precomputed column
    // pointers, one address add per load; loads of tiles past the result read a clamped, valid column.
    auto quads_step = [&](int64_t q0, bool checked) {
      double af[QU][TW], bf[QU][TW];
      const int64_t row0 = 4 * q0 + tig;  // the K index of the MMA: this lane's row of each quad
      const double* pa[TW];
      const double* pb[TW];
#pragma unroll
      for (int x = 0; x < TW; ++x) {
        pa[x] = uc[x].p + row0 * uc[x].ld;
        pb[x] = vc[x].p + row0 * vc[x].ld;
      }
#pragma unroll
      for (int u = 0; u < QU; ++u) {
        const bool ok = !checked || row0 + 4 * u < n;
        const double sc = ok && g.u2_row_scale ? __ldg(g.u2_row_scale + row0 + 4 * u) : 1.0;
#pragma unroll
        for (int x = 0; x < TW; ++x) {
          af[u][x] = ok ? __ldg(pa[x] + 4 * u * uc[x].ld) : 0.0;
          if (usc[x]) af[u][x] *= sc;
          bf[u][x] = ok ? __ldg(pb[x] + 4 * u * vc[x].ld) : 0.0;
        }
      }
#pragma unroll
      for (int u = 0; u < QU; ++u)
#pragma unroll
        for (int x = 0; x < TW; ++x)
#pragma unroll
          for (int y = 0; y < TW; ++y)
            if (x < tiles_a && y < tiles_b) dmma_8x8x4(acc[x][y], af[u][x], bf[u][y]);
    };
    int64_t q0 = (int64_t{blockIdx.x} * slices + slice) * QU;
    for (; q0 + QU <= full_quads; q0 += step) quads_step(q0, false);  // warp-uniform
    if (q0 < quads) quads_step(q0, true);  // the last, partial step (q0 + step is past the end)
  }
  // Slice sums: slice s writes its part of the a x b result (column-major) at slice_sums + s * a * b.
  if (owner) {
    double* sums = slice_sums + int64_t{slice} * a * b;
#pragma unroll
    for (int x = 0; x < TW; ++x)
#pragma unroll
      for (int y = 0; y < TW; ++y)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int l = 8 * (ta0 + x) + gid, c = 8 * (tb0 + y) + 2 * tig + h;
          if (x < tiles_a && y < tiles_b && l < a && c < b) sums[l + c * a] = acc[x][y][h];
        }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < a * b; e += blockDim.x) {
    double s = 0;
    for (int sl = 0; sl < slices; ++sl) s += slice_sums[int64_t{sl} * a * b + e];
    partials[int64_t{blockIdx.x} * a * b + e] = s;
  }
}

// The small matrix M (rows x cols, column-major) transposed into shared memory as GC x GC, zero-padded, so a
// thread reads its 4 adjacent columns of row l as two 16-byte words.
template <int GC>
__device__ __forceinline__ void stage_small(double* s, const double* M, int rows, int cols) {
  for (int e = threadIdx.x; e < GC * GC; e += blockDim.x) {
    const int l = e / GC, c = e % GC;
    s[e] = l < rows && c < cols ? M[c * rows + l] : 0.0;
  }
}

// For NR rows at once: acc[q][j] += sum_l row_q(l) * s[l][c0 + j], where row_q(l) is held by thread l / 4 of
// the G-thread row group, in element l % 4 of in[q]. Each 16-byte read of s serves NR rows (shared-memory
// reads, not DRAM, bound these kernels at NR = 1).
template <int G, int NR>
__device__ __forceinline__ void rows_times_small(const double (&in)[NR][4], const double* s, int c0,
                                                 double (&acc)[NR][4]) {
  constexpr int CW = 4, GC = G * CW;
#pragma unroll
  for (int src = 0; src < G; ++src)
#pragma unroll
    for (int j = 0; j < CW; ++j) {
      const double2* m = reinterpret_cast<const double2*>(s + (src * CW + j) * GC + c0);
      const double2 m01 = m[0], m23 = m[1];
#pragma unroll
      for (int q = 0; q < NR; ++q) {
        const double x = __shfl_sync(0xffffffffu, in[q][j], src, G);
        acc[q][0] = fma(x, m01.x, acc[q][0]);
        acc[q][1] = fma(x, m01.y, acc[q][1]);
        acc[q][2] = fma(x, m23.x, acc[q][2]);
        acc[q][3] = fma(x, m23.y, acc[q][3]);
      }
    }
}

// Entries c0 .. c0 + 3 of a row (zero at and past lim). Vec: the row starts 16 bytes aligned (even row
// length, aligned block; c0 is a multiple of 4), so a full group is two 16-byte accesses instead of four 8-byte
// ones whose lanes sit 32 bytes apart (ncu, H100: the update kernel had L1 96% busy at 82% of DRAM).
template <bool ReadOnly>
__device__ __forceinline__ void load_row4(const double* row, int c0, int lim, bool vec, double (&v)[4]) {
  if (vec && c0 + 4 <= lim) {
    const double2* p = reinterpret_cast<const double2*>(row + c0);
    const double2 lo = ReadOnly ? __ldg(p) : p[0], hi = ReadOnly ? __ldg(p + 1) : p[1];
    v[0] = lo.x, v[1] = lo.y, v[2] = hi.x, v[3] = hi.y;
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j) v[j] = c0 + j < lim ? (ReadOnly ? __ldg(row + c0 + j) : row[c0 + j]) : 0.0;
}
__device__ __forceinline__ void store_row4(double* row, int c0, int lim, bool vec, const double (&v)[4]) {
  if (vec && c0 + 4 <= lim) {
    double2* p = reinterpret_cast<double2*>(row + c0);
    p[0] = make_double2(v[0], v[1]), p[1] = make_double2(v[2], v[3]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (c0 + j < lim) row[c0 + j] = v[j];
}
bool rows_aligned(const void* p, int ld) { return ld % 2 == 0 && reinterpret_cast<uintptr_t>(p) % 16 == 0; }
// Bits of the vec argument of the combine and update kernels: which blocks take 16-byte accesses.
enum VecBits { kVecU = 1, kVecC = 2, kVecX = 4, kVecY = 8 };

// WithX: also X (n x k) += U A2 (a x k), the previous iteration's deferred X update, from the same reads of U.
template <int G, bool WithX>
__global__ void __launch_bounds__(BlockOpsTuning::threads)
    combine_kernel(int64_t n, double* __restrict__ Y, int b, const double* __restrict__ U, int a,
                   const double* __restrict__ M, const double* __restrict__ C, int ldc, const int* __restrict__ sel,
                   const double* __restrict__ d, double* __restrict__ X, int k, const double* __restrict__ A2,
                   int vec) {
  constexpr int CW = BlockOpsTuning::columns_per_thread, GC = G * CW, RPG = 32 / G;
  constexpr int RB = WithX ? BlockOpsTuning::combine_rows_with_x : BlockOpsTuning::combine_rows;
  // row group g of a warp takes rows base + g + q * RPG: each load instruction still covers RPG consecutive rows
  __shared__ __align__(16) double s_m[GC * GC];
  __shared__ __align__(16) double s_a2[WithX ? GC * GC : 2];
  __shared__ int s_sel[GC];
  stage_small<GC>(s_m, M, a, b);
  if (WithX) stage_small<GC>(s_a2, A2, a, k);
  for (int c = threadIdx.x; c < GC; c += blockDim.x) s_sel[c] = C && c < b ? (sel ? sel[c] : c) : 0;
  __syncthreads();
  const int lane = threadIdx.x & 31, c0 = CW * (lane % G);
  const bool vec_u = vec & kVecU, vec_c = vec & kVecC, vec_x = vec & kVecX, vec_y = vec & kVecY;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5, warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  for (int64_t base = warp * RPG * RB; base < n; base += warps * RPG * RB) {  // warp-uniform: every lane shuffles
    double u[RB][CW], y[RB][CW], x[WithX ? RB : 1][CW];
#pragma unroll
    for (int q = 0; q < RB; ++q) {
      const int64_t row = base + lane / G + q * RPG;
      const bool valid = row < n;
      const double dr = valid && C && d ? d[row] : 1.0;
      load_row4<true>(U + row * a, c0, valid ? a : 0, vec_u, u[q]);
      if (C && !sel) {  // the first b columns of C (every column active)
        load_row4<true>(C + row * ldc, c0, valid ? b : 0, vec_c, y[q]);
#pragma unroll
        for (int j = 0; j < CW; ++j) y[q][j] *= dr;
      } else {
#pragma unroll
        for (int j = 0; j < CW; ++j) {
          const int c = c0 + j;
          y[q][j] = valid && C && c < b ? dr * __ldg(C + row * ldc + s_sel[c]) : 0.0;
        }
      }
      if (WithX) load_row4<false>(X + row * k, c0, valid ? k : 0, vec_x, x[q]);
    }
    if (a > 0) rows_times_small<G, RB>(u, s_m, c0, y);
    if constexpr (WithX)
      if (a > 0) rows_times_small<G, RB>(u, s_a2, c0, x);
#pragma unroll
    for (int q = 0; q < RB; ++q) {
      const int64_t row = base + lane / G + q * RPG;
      if (row >= n) continue;
      store_row4(Y + row * b, c0, b, vec_y, y[q]);
      if (WithX) store_row4(X + row * k, c0, k, vec_x, x[q]);
    }
  }
}

// WithX: X += W A as well as R -= V A (without it, block CG defers the X update into the next combine).
template <int G, bool WithX>
__global__ void __launch_bounds__(BlockOpsTuning::threads)
    update_xr_kernel(int64_t n, int k, int m, double* __restrict__ X, double* __restrict__ R,
                     const double* __restrict__ W, const double* __restrict__ V, const double* __restrict__ A,
                     double* __restrict__ partials, int vec) {
  constexpr int CW = BlockOpsTuning::columns_per_thread, GC = G * CW, RPG = 32 / G;
  constexpr int RB = WithX ? BlockOpsTuning::update_rows_with_x : BlockOpsTuning::update_rows;
  constexpr int NX = WithX ? RB : 0;  // in/acc rows 0..NX-1: W -> dX; rows NX..NX+RB-1: V -> dR
  __shared__ __align__(16) double s_a[GC * GC];
  __shared__ double s_sq[BlockOpsTuning::threads * CW];
  stage_small<GC>(s_a, A, m, k);
  __syncthreads();
  const int lane = threadIdx.x & 31, c0 = CW * (lane % G);
  const bool vec_wv = vec & kVecU, vec_xr = vec & kVecX;
  const int64_t warp = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5, warps = (int64_t{gridDim.x} * blockDim.x) >> 5;
  double sq[CW] = {};
  for (int64_t base = warp * RPG * RB; base < n; base += warps * RPG * RB) {
    // One read of A serves both products. X and R are loaded with W and V, before the products, so all loads
    // of a step are in flight together.
    double in[NX + RB][CW], acc[NX + RB][CW] = {}, x[WithX ? RB : 1][CW], r[RB][CW];
#pragma unroll
    for (int q = 0; q < RB; ++q) {
      const int64_t row = base + lane / G + q * RPG;
      const bool valid = row < n;
      if (WithX) load_row4<true>(W + row * m, c0, valid ? m : 0, vec_wv, in[q]);
      load_row4<true>(V + row * m, c0, valid ? m : 0, vec_wv, in[NX + q]);
      if (WithX) load_row4<false>(X + row * k, c0, valid ? k : 0, vec_xr, x[q]);
      load_row4<false>(R + row * k, c0, valid ? k : 0, vec_xr, r[q]);
    }
    rows_times_small<G, NX + RB>(in, s_a, c0, acc);
#pragma unroll
    for (int q = 0; q < RB; ++q) {
      const int64_t row = base + lane / G + q * RPG;
      if (row >= n) continue;
      double rn[CW];
#pragma unroll
      for (int j = 0; j < CW; ++j) {
        rn[j] = r[q][j] - acc[NX + q][j];  // zero past k: r and acc are zero there
        sq[j] = fma(rn[j], rn[j], sq[j]);
        if (WithX) x[q][j] += acc[q][j];
      }
      store_row4(R + row * k, c0, k, vec_xr, rn);
      if (WithX) store_row4(X + row * k, c0, k, vec_xr, x[q]);
    }
  }
#pragma unroll
  for (int j = 0; j < CW; ++j) s_sq[threadIdx.x * CW + j] = sq[j];
  __syncthreads();
  if (threadIdx.x < k) {  // per-column block sums in a fixed order: the threads t == c / CW (mod G)
    const int c = threadIdx.x;
    double s = 0;
    for (int t = c / CW; t < static_cast<int>(blockDim.x); t += G) s += s_sq[t * CW + c % CW];
    partials[int64_t{blockIdx.x} * k + c] = s;
  }
}

// Entries c0, c0 + 1 of a row (zero at and past lim); one 16-byte access when vec (c0 even, rows aligned).
__device__ __forceinline__ void load_row2(const double* row, int c0, int lim, bool vec, double (&v)[2]) {
  if (vec && c0 + 2 <= lim) {
    const double2 p = *reinterpret_cast<const double2*>(row + c0);
    v[0] = p.x, v[1] = p.y;
    return;
  }
  v[0] = c0 < lim ? row[c0] : 0.0;
  v[1] = c0 + 1 < lim ? row[c0 + 1] : 0.0;
}
__device__ __forceinline__ void store_row2(double* row, int c0, int lim, bool vec, const double (&v)[2]) {
  if (vec && c0 + 2 <= lim) {
    *reinterpret_cast<double2*>(row + c0) = make_double2(v[0], v[1]);
    return;
  }
  if (c0 < lim) row[c0] = v[0];
  if (c0 + 1 < lim) row[c0 + 1] = v[1];
}

// One pass for block CG's update and next search block (m, k <= 16), on FP64 tensor cores:
//   X += W Ta;  R -= V Ta;  rr(c) = ||R(:, c)||^2;  Wn(:, pos[c]) = diag(d) R(:, c) + W Tb(:, c) where pos[c] >= 0.
// A warp takes 8 rows per step (m8n8k4: lane 4 g + t owns row g). The inner dimension (the m columns of W and V)
// is permuted so that MMA kk reads columns 4 t + kk: each lane loads its 4 adjacent columns as two 16-byte words,
// with 8 whole rows per warp. R, X and Wn live in accumulator layout (lane: columns 8 nb + 2 t, + 1 of row g), so
// they are loaded and stored in place; Ta and Tb stay in registers as B fragments for the whole kernel. No shared
// memory or shuffles in the loop (the separate update and combine read the small matrices from shared memory
// per row and the X, R and W blocks twice).
__global__ void __launch_bounds__(BlockOpsTuning::threads, BlockOpsTuning::step_blocks_per_sm)
    block_step_kernel(int64_t n, int m, int k, const double* __restrict__ W, const double* __restrict__ V,
                      double* __restrict__ R, double* __restrict__ X, const double* __restrict__ d,
                      const double* __restrict__ Ta, const double* __restrict__ Tb, const int* __restrict__ pos,
                      int b, double* __restrict__ Wn, int vec, double* __restrict__ partials) {
  __shared__ double s_sq[BlockOpsTuning::threads / 32][16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  double bta[4][2], btb[4][2];  // B fragments: entry (4 t + kk, 8 nb + g) of Ta and Tb (m x k, column-major)
  int wpos[2][2];               // where this lane's columns 8 nb + 2 t + h go in Wn (-1: not kept)
#pragma unroll
  for (int kk = 0; kk < 4; ++kk)
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const int l = 4 * t + kk, c = 8 * nb + g;
      const bool ok = l < m && c < k;
      bta[kk][nb] = ok ? Ta[c * m + l] : 0.0;
      btb[kk][nb] = ok ? Tb[c * m + l] : 0.0;
    }
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int c = 8 * nb + 2 * t + h;
      wpos[nb][h] = c < k ? pos[c] : -1;
    }
  const bool vec_wv = vec & kVecU, vec_rx = vec & kVecX, vec_wn = vec & kVecY;
  double sq[2][2] = {};
  const int64_t tiles = (n + 7) / 8;
  for (int64_t tile = int64_t{blockIdx.x} * warps + warp; tile < tiles; tile += int64_t{gridDim.x} * warps) {
    const int64_t row = tile * 8 + g;
    const bool valid = row < n;
    double av[4], aw[4], r[2][2], x[2][2];
    load_row4<true>(V + row * m, 4 * t, valid ? m : 0, vec_wv, av);
    load_row4<true>(W + row * m, 4 * t, valid ? m : 0, vec_wv, aw);
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      load_row2(R + row * k, 8 * nb + 2 * t, valid ? k : 0, vec_rx, r[nb]);
      load_row2(X + row * k, 8 * nb + 2 * t, valid ? k : 0, vec_rx, x[nb]);
    }
    const double dr = valid && d ? d[row] : 1.0;
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        dmma_8x8x4(r[nb], -av[kk], bta[kk][nb]);  // R - V Ta
        dmma_8x8x4(x[nb], aw[kk], bta[kk][nb]);   // X + W Ta
      }
    double wn[2][2];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        sq[nb][h] = fma(r[nb][h], r[nb][h], sq[nb][h]);  // rows past n and columns past k hold zeros
        wn[nb][h] = dr * r[nb][h];
      }
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) dmma_8x8x4(wn[nb], aw[kk], btb[kk][nb]);  // D^-1 R + W Tb
    if (!valid) continue;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      store_row2(R + row * k, 8 * nb + 2 * t, k, vec_rx, r[nb]);
      store_row2(X + row * k, 8 * nb + 2 * t, k, vec_rx, x[nb]);
      if (vec_wn) {  // every column kept, in order
        store_row2(Wn + row * b, 8 * nb + 2 * t, b, true, wn[nb]);
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h)
          if (wpos[nb][h] >= 0) Wn[row * b + wpos[nb][h]] = wn[nb][h];
      }
    }
  }
  // Column sums of squares: over the 8 row lanes of the warp (a fixed butterfly), then over warps in order.
#pragma unroll
  for (int nb = 0; nb < 2; ++nb)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      double v = sq[nb][h];
#pragma unroll
      for (int off = 4; off < 32; off *= 2) v += __shfl_xor_sync(0xffffffffu, v, off);
      if (g == 0) s_sq[warp][8 * nb + 2 * t + h] = v;
    }
  __syncthreads();
  if (threadIdx.x < k) {
    double s = 0;
    for (int w = 0; w < warps; ++w) s += s_sq[w][threadIdx.x];
    partials[int64_t{blockIdx.x} * k + threadIdx.x] = s;
  }
}

int stream_grid(int64_t n, int group, int rows_per_thread) {
  const int64_t threads = std::max<int64_t>((n + rows_per_thread - 1) / rows_per_thread, 1) * group;
  return static_cast<int>(std::min<int64_t>((threads + BlockOpsTuning::threads - 1) / BlockOpsTuning::threads,
                                            int64_t{device_sm_count()} * BlockOpsTuning::stream_blocks_per_sm));
}

int row_group(int columns) {
  const int g = next_pow2(ceil_div(std::max(columns, 1), BlockOpsTuning::columns_per_thread));
  if (g > 8) throw CudaError("block kernels: more than " + std::to_string(kBlockOpsMaxColumns) + " columns");
  return g;
}

// Calls f(std::integral_constant<int, G>) for a row group G from row_group().
template <class F>
void dispatch_row_group(int G, F&& f) {
  switch (G) {
    case 1: f(std::integral_constant<int, 1>{}); break;
    case 2: f(std::integral_constant<int, 2>{}); break;
    case 4: f(std::integral_constant<int, 4>{}); break;
    default: f(std::integral_constant<int, 8>{}); break;
  }
}

}  // namespace

BlockOpsWorkspace::BlockOpsWorkspace(int max_columns)
    : gram_blocks(device_sm_count() * BlockOpsTuning::gram_small_blocks_per_sm),
      update_blocks(device_sm_count() * BlockOpsTuning::stream_blocks_per_sm),
      columns(max_columns) {
  // gram: blocks x (2 columns) x (3 columns); update: blocks x columns
  const size_t gram = static_cast<size_t>(gram_blocks) * 6 * columns * columns,
               update = static_cast<size_t>(update_blocks) * columns;
  partials = DeviceArray<double>(std::max(gram, update), "block-cg partial sums");
}

void launch_block_gram(int64_t n, const GramInputs& g, double* out, BlockOpsWorkspace& ws, cudaStream_t s) {
  const int a = g.a1 + g.a2, b = g.b1 + g.b2 + g.b3;
  if (a == 0 || b == 0) return;
  if (a > kBlockGramMaxColumns || b > kBlockGramMaxColumns) throw CudaError("block gram: more than 64 columns");
  if (a > 2 * ws.columns || b > 3 * ws.columns) throw CudaError("block gram: workspace too small");
  if (n == 0) {  // nothing to stream: a zero result
    CHECK_CUDA(cudaMemsetAsync(out, 0, static_cast<size_t>(a) * b * sizeof(double), s));
    return;
  }
  using T = BlockOpsTuning;
  const int tiles = ceil_div(a, 8) * ceil_div(b, 8);
  const bool small = tiles <= 4;
  const int tw = small ? T::gram_small_tiles : T::gram_wide_tiles;
  const int quads = small ? T::gram_small_quads : T::gram_wide_quads;
  const int per_sm = small ? T::gram_small_blocks_per_sm : T::gram_wide_blocks_per_sm;
  const int group = next_pow2(ceil_div(a, 8 * tw) * ceil_div(b, 8 * tw)), slices = T::threads / 32 / group;
  const size_t smem = static_cast<size_t>(slices) * a * b * sizeof(double);
  const int64_t rows_per_step = int64_t{4} * quads * slices;
  const int blocks = static_cast<int>(std::min<int64_t>({int64_t{device_sm_count()} * per_sm, ws.gram_blocks,
                                                         (n + rows_per_step - 1) / rows_per_step}));
  if (smem > device_max_shared_per_block())  // wide blocks on GPUs with less shared memory than Hopper's
    throw CudaError("block gram: " + std::to_string(a) + " x " + std::to_string(b) + " products need " +
                    std::to_string(smem / 1024) + " KB of shared memory per block, this GPU allows " +
                    std::to_string(device_max_shared_per_block() / 1024) + " KB (use fewer right-hand sides per block)");
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) CHECK_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    kernel<<<blocks, T::threads, smem, s>>>(n, g, ws.partials.data());
  };
  if (small) launch(gram_kernel<T::gram_small_tiles, T::gram_small_quads, T::gram_small_blocks_per_sm>);
  else launch(gram_kernel<T::gram_wide_tiles, T::gram_wide_quads, T::gram_wide_blocks_per_sm>);
  CHECK_LAUNCH("block-gram");
  reduce_partials_kernel<<<a * b, 32, 0, s>>>(ws.partials.data(), blocks, a * b, out);
  CHECK_LAUNCH("block-gram-reduce");
}

void launch_block_combine(int64_t n, double* Y, int b, const double* U, int a, const double* M, const double* C,
                          int ldc, const int* sel, const double* d, cudaStream_t s, double* X, int k,
                          const double* A2) {
  if (n == 0 || (b == 0 && !X)) return;
  if (a > kBlockOpsMaxColumns || b > kBlockOpsMaxColumns || k > kBlockOpsMaxColumns)
    throw CudaError("block combine: more than 32 columns");
  const int G = row_group(std::max({a, b, X ? k : 0}));
  const int rows = X ? BlockOpsTuning::combine_rows_with_x : BlockOpsTuning::combine_rows;
  const int blocks = stream_grid(n, G, rows), threads = BlockOpsTuning::threads;
  const int vec = (rows_aligned(U, a) ? kVecU : 0) | (C && !sel && rows_aligned(C, ldc) ? kVecC : 0) |
                  (X && rows_aligned(X, k) ? kVecX : 0) | (rows_aligned(Y, b) ? kVecY : 0);
  auto launch = [&](auto g) {
    constexpr int Gc = decltype(g)::value;
    if (X) combine_kernel<Gc, true><<<blocks, threads, 0, s>>>(n, Y, b, U, a, M, C, ldc, sel, d, X, k, A2, vec);
    else combine_kernel<Gc, false><<<blocks, threads, 0, s>>>(n, Y, b, U, a, M, C, ldc, sel, d, nullptr, 0, nullptr, vec);
  };
  dispatch_row_group(G, launch);
  CHECK_LAUNCH("block-combine");
}

void launch_block_update_xr(int64_t n, int k, int m, double* X, double* R, const double* W, const double* V,
                            const double* A, double* rr, BlockOpsWorkspace& ws, cudaStream_t s) {
  if (k == 0) return;
  if (k > kBlockOpsMaxColumns || m > kBlockOpsMaxColumns) throw CudaError("block update: more than 32 columns");
  if (k > ws.columns) throw CudaError("block update: workspace too small");
  const int G = row_group(std::max(k, m));
  const int rows = X ? BlockOpsTuning::update_rows_with_x : BlockOpsTuning::update_rows;
  const int blocks = stream_grid(n, G, rows), threads = BlockOpsTuning::threads;
  const int vec = (rows_aligned(V, m) && (!W || rows_aligned(W, m)) ? kVecU : 0) |
                  (rows_aligned(R, k) && (!X || rows_aligned(X, k)) ? kVecX : 0);
  auto launch = [&](auto g) {
    constexpr int Gc = decltype(g)::value;
    if (X) update_xr_kernel<Gc, true><<<blocks, threads, 0, s>>>(n, k, m, X, R, W, V, A, ws.partials.data(), vec);
    else update_xr_kernel<Gc, false><<<blocks, threads, 0, s>>>(n, k, m, nullptr, R, nullptr, V, A, ws.partials.data(), vec);
  };
  dispatch_row_group(G, launch);
  CHECK_LAUNCH("block-update-xr");
  reduce_partials_kernel<<<k, 32, 0, s>>>(ws.partials.data(), blocks, k, rr);
  CHECK_LAUNCH("block-update-reduce");
}

void launch_block_step(int64_t n, int m, int k, const double* W, const double* V, double* R, double* X,
                       const double* d, const double* Ta, const double* Tb, const int* pos, int b, bool kept_in_order,
                       double* Wn, double* rr, BlockOpsWorkspace& ws, cudaStream_t s) {
  if (k == 0) return;
  if (m > kBlockStepMaxColumns || k > kBlockStepMaxColumns || b > k) throw CudaError("block step: more than 16 columns");
  if (k > ws.columns) throw CudaError("block step: workspace too small");
  const int64_t tiles = (n + 7) / 8, warps = BlockOpsTuning::threads / 32;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({int64_t{device_sm_count()} * BlockOpsTuning::step_blocks_per_sm,
                                                                              ws.update_blocks, (tiles + warps - 1) / warps})));
  const int vec = (rows_aligned(V, m) && rows_aligned(W, m) ? kVecU : 0) |
                  (rows_aligned(R, k) && rows_aligned(X, k) ? kVecX : 0) |
                  (kept_in_order && b == k && rows_aligned(Wn, b) ? kVecY : 0);
  block_step_kernel<<<blocks, BlockOpsTuning::threads, 0, s>>>(n, m, k, W, V, R, X, d, Ta, Tb, pos, b, Wn, vec,
                                                               ws.partials.data());
  CHECK_LAUNCH("block-step");
  reduce_partials_kernel<<<k, 32, 0, s>>>(ws.partials.data(), blocks, k, rr);
  CHECK_LAUNCH("block-step-reduce");
}

}  // namespace spcg
