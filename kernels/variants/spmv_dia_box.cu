// dia, plane march: the symmetric DIA product of a 27-point box stencil, the launch the dia operator takes where
// find_dia_box reads its offsets so.
// Why: spmv_dia.cu's row sweep reads each lower-half entry a second time (stripe d at row - offset) and x 27
// times a row. A row one plane back was streamed by another SM, so those reads come from L2: on the 27-point
// stencil ncu puts L2 at 80 % of its peak and DRAM at 69 %, the sweep at 55-69 % of copy in its own bytes.
// Work mapping: a block owns a tile of DiaBoxTuning::tile_x x tile_y points of a plane, one thread a point, and
// marches it along z through a run of planes (2.5-D blocking, as stencil codes keep planes on chip: Micikevicius,
// "3D finite difference computation on GPUs using CUDA", GPGPU-2 2009); the blocks take (tile, run) items in turn.
// Per plane, the block streams its tile of every stored stripe once and keeps on chip what the lower half reads
// again: the current plane's in-plane stripes, the previous plane's plane-crossing stripes (kept from the last
// step), and x of three planes, each with a one-point rim. Only the rim (the tile's edge neighbours, about a tenth
// of the lower half) is read from L2, by the whole block from a table of rim entries built once.
// Rows are visited in another order than the row sweep's; each row sums in the same order (the lower half by
// descending offset, then the stored diagonals), so y has the row sweep's bits where every x entry is finite.
// The 7-point stencil keeps the row sweep: its march measured slower (poisson3d:200 148 against 143 us, H100),
// the sweep already streaming at 89 % of copy there.
#include <algorithm>
#include <cmath>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/variants/dia_box.cuh"

namespace spcg {
namespace {

struct DiaBoxTuning {
  static constexpr int tile_x = 32;  // one warp along a line: coalesced stripe reads (256 B FP64, 128 B FP32)
  static constexpr int tile_y = 8;   // 8 lines: (31/32)(7/8) of a diagonal neighbour's reads fall inside the tile
  static constexpr int threads = tile_x * tile_y;
  // The FP64 product loads the next plane's stripes during this plane's sums (prefetch: 80 registers, 3 blocks an
  // SM, a few bytes spilled); FP32, half the bytes a step, and the smoothing epilogue, whose own loads (the
  // residual, the scale, x) come after the sums, keep 4 blocks an SM busy instead. Measured on an H100 (27-point,
  // us, with prefetch / without, each at its best run count): FP64 200^3 403 / 448, 256^3 788 / 760; FP32 200^3
  // 268 / 237, 256^3 552 / 474; the FP64 V-cycle on 256^3 with the smoothing fused 9888 / 9066.
  template <class V, bool Smooth>
  static constexpr bool prefetch() { return sizeof(V) == 8 && !Smooth; }
  template <class V, bool Smooth>
  static constexpr int min_blocks_per_sm() { return prefetch<V, Smooth>() ? 3 : 4; }
  // The blocks a march starts, per SM: a run of planes per block and tile, as many runs as make about this many
  // blocks. Fewer fronts keep a tile's neighbours (whose stripes its rim reads from L2) in step: on 256^3 (256
  // tiles a plane) one run read 2.03 GB from DRAM in 768 us, 2 runs 2.25 GB in 857 us (ncu); FP64 200^3, 2 runs
  // (350 blocks) 403 us, 1 run (175 blocks, SMs left idle) 486 us. Without prefetch more bytes must be in flight:
  // 4 an SM (FP32 200^3: 3 runs 237 us, 2 runs 273 us).
  template <class V, bool Smooth>
  static constexpr int blocks_per_sm() { return prefetch<V, Smooth>() ? 2 : 4; }
  static constexpr int min_line = 16;  // shorter lines leave more than half of each warp idle: the row sweep
  static constexpr int min_planes = 2;
};

// The upper half's 14 neighbours in the order of ascending offset: d = 0 the centre, d in [1, 5) the in-plane ones
// (offsets 1, line - 1, line, line + 1), d in [5, 14) those of the next plane (plane + dy * line + dx).
struct Box27 {
  static constexpr int diagonals = 14, first_crossing = 5;
  // the lower-half entries read from the rim: at most tile_x + tile_y - 1 a stripe (118 in-plane and 236 crossing
  // ones on a 32 x 8 tile)
  static constexpr int max_rim = (diagonals - 1) * (DiaBoxTuning::tile_x + DiaBoxTuning::tile_y - 1);
  __host__ __device__ static constexpr int dx(int d) { return d == 0 ? 0 : d == 1 ? 1 : d < 5 ? d - 3 : (d - 5) % 3 - 1; }
  __host__ __device__ static constexpr int dy(int d) { return d < 2 ? 0 : d < 5 ? 1 : (d - 5) / 3 - 1; }
  __host__ __device__ static constexpr int dz(int d) { return d < first_crossing ? 0 : 1; }
  __host__ __device__ static constexpr int64_t offset(int d, int64_t line, int64_t plane) {
    return dz(d) * plane + dy(d) * line + dx(d);
  }
};

// x and the stripes kept on chip carry a one-point rim: point (tx, ty) of the tile is slot [ty + 1][tx + 1].
constexpr int kRimX = DiaBoxTuning::tile_x + 2, kRimY = DiaBoxTuning::tile_y + 2, kRimSlots = kRimX * kRimY;

__device__ __forceinline__ int ring(int z) { return (z + 3) % 3; }  // x's plane buffers, z >= -1

template <class V, bool WithDot, bool Smooth>
__global__ void __launch_bounds__(DiaBoxTuning::threads, DiaBoxTuning::min_blocks_per_sm<V, Smooth>())
    dia_box_kernel(const DiaBox box, int32_t rows, int64_t stride, const V* __restrict__ val,
                   const double* __restrict__ x, int ld, double alpha, double beta, double* __restrict__ y,
                   int tiles_x, int tiles, int planes_per_run, int items, DotSink sink,
                   dia::SmoothingEpilogue smooth) {
  using S = Box27;
  constexpr int TX = DiaBoxTuning::tile_x, TY = DiaBoxTuning::tile_y, D = S::diagonals, C = S::first_crossing;
  constexpr int T = DiaBoxTuning::threads;
  constexpr bool Prefetch = DiaBoxTuning::prefetch<V, Smooth>();
  __shared__ double xs[3][kRimY][kRimX];  // x of planes z - 1, z, z + 1
  // stripe d >= 1 at [d - 1]: this plane's for d < C, the last plane's (which reach this one) for d >= C
  __shared__ V kept[D - 1][kRimY][kRimX];
  // The rim table: entry e fills kept slot rim_slot[e] with stripe rim_stripe[e] at the tile's corner row of plane z
  // plus rim_row[e] (the plane before for a crossing stripe).
  __shared__ int32_t rim_row[S::max_rim];
  __shared__ uint16_t rim_slot[S::max_rim];
  __shared__ uint8_t rim_stripe[S::max_rim];
  __shared__ int rim_count;
  const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
  const int64_t line = box.line, plane = box.plane;
  auto stripe = [&](int d, int64_t j) -> V { return j >= 0 && j < rows ? __ldg(val + d * stride + j) : V(0); };

  // Stripe d's lower-half entry of point (tx, ty) is its neighbour's (tx - dx, ty - dy) of plane z - dz: a rim
  // entry where that neighbour is outside the tile (the order of the entries does not matter).
  if (threadIdx.x == 0) rim_count = 0;
  __syncthreads();
#pragma unroll
  for (int d = 1; d < D; ++d) {
    const int sx = tx - S::dx(d), sy = ty - S::dy(d);
    if (sx >= 0 && sx < TX && sy >= 0 && sy < TY) continue;
    const int e = atomicAdd(&rim_count, 1);
    rim_row[e] = static_cast<int32_t>(sy * line + sx - S::dz(d) * plane);
    rim_slot[e] = static_cast<uint16_t>(((d - 1) * kRimY + sy + 1) * kRimX + sx + 1);
    rim_stripe[e] = static_cast<uint8_t>(d);
  }
  __syncthreads();
  const int rim_entries = rim_count;
  V* const kept_flat = &kept[0][0][0];

  double dot = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {  // (tile, run of planes), a run's tiles consecutive
    const int tile = item % tiles, run = item / tiles;
    const int x0 = (tile % tiles_x) * TX, y0 = (tile / tiles_x) * TY;
    const int z_begin = run * planes_per_run, z_end = min(box.planes, z_begin + planes_per_run);
    const int64_t corner = int64_t{y0} * line + x0;  // the tile's first row within a plane
    // The point's row within its plane. Past the line's end (a tile's last columns) it is the next line's row: the
    // point owns no output then. The first point past the line's end (and past the plane's last line) still loads
    // its stripe entries, which its neighbour's lower half reads (row arithmetic is linear, so (x + 1, y) - 1 is
    // (x, y) even where x + 1 wraps); the points beyond load nothing (another tile streams those rows: on 100^3, a
    // quarter more stripe reads).
    const int64_t at = corner + ty * line + tx;
    const bool owns = x0 + tx < box.line && y0 + ty < box.lines;
    const bool read = x0 + tx <= box.line && y0 + ty <= box.lines;
    // x of plane x_plane and, from rim_plane >= 0, the rim's stripe entries of that plane (its crossing entries
    // read the plane before) into shared memory, every load issued before the first store
    auto stage = [&](int x_plane, int rim_plane) {
      constexpr int passes = (kRimSlots + T - 1) / T, rim_passes = (S::max_rim + T - 1) / T;
      const int64_t x_corner = x_plane * plane + corner - line - 1;
      const int64_t rim_corner = rim_plane * plane + corner;
      const int rim = rim_plane >= 0 ? rim_entries : 0;
      double xv[passes];
      V rv[rim_passes];
#pragma unroll
      for (int k = 0; k < passes; ++k) {
        const int h = threadIdx.x + k * T;
        const int hy = h / kRimX, hx = h % kRimX;
        const int64_t j = x_corner + hy * line + hx;
        const bool used = x0 + hx - 1 <= box.line && y0 + hy - 1 <= box.lines;  // (read's, with the rim)
        xv[k] = h < kRimSlots && used && j >= 0 && j < rows ? dev::load_x(x + j * ld) : 0.0;
      }
#pragma unroll
      for (int k = 0; k < rim_passes; ++k) {
        const int e = threadIdx.x + k * T;
        rv[k] = e < rim ? stripe(rim_stripe[e], rim_corner + rim_row[e]) : V(0);
      }
#pragma unroll
      for (int k = 0; k < passes; ++k) {
        const int h = threadIdx.x + k * T;
        if (h < kRimSlots) xs[ring(x_plane)][h / kRimX][h % kRimX] = xv[k];
      }
#pragma unroll
      for (int k = 0; k < rim_passes; ++k) {
        const int e = threadIdx.x + k * T;
        if (e < rim) kept_flat[rim_slot[e]] = rv[k];
      }
    };

    stage(z_begin - 1, -1);
#pragma unroll
    for (int d = C; d < D; ++d) kept[d - 1][ty + 1][tx + 1] = stripe(d, read ? (z_begin - 1) * plane + at : -1);
    stage(z_begin, -1);
    V v[D];  // this plane's stripes
    if constexpr (Prefetch) {
#pragma unroll
      for (int d = 0; d < D; ++d) v[d] = stripe(d, read ? z_begin * plane + at : -1);
    }
    for (int z = z_begin; z < z_end; ++z) {
      const int64_t i = z * plane + at;
      // 1. this plane's stripes (registers, unless loaded during the last step), the rim's entries and x of the
      // next plane (shared memory)
      if constexpr (!Prefetch) {
#pragma unroll
        for (int d = 0; d < D; ++d) v[d] = stripe(d, read ? i : -1);
      }
      stage(z + 1, z);
#pragma unroll
      for (int d = 1; d < C; ++d) kept[d - 1][ty + 1][tx + 1] = v[d];
      __syncthreads();
      V next[D];  // Prefetch: the next plane's stripes, in flight during this plane's sums
      if constexpr (Prefetch) {
#pragma unroll
        for (int d = 0; d < D; ++d) next[d] = stripe(d, read && z + 1 < z_end ? i + plane : -1);
      }
      // 2. the row's sum: the lower half by descending offset (ascending column), then the stored diagonals
      if (owns && i < rows) {
        double sum = 0;
#pragma unroll
        for (int d = D - 1; d >= 1; --d) {
          const int sx = tx - S::dx(d) + 1, sy = ty - S::dy(d) + 1;
          sum += double(kept[d - 1][sy][sx]) * xs[ring(z - S::dz(d))][sy][sx];
        }
        sum += double(v[0]) * xs[ring(z)][ty + 1][tx + 1];
#pragma unroll
        for (int d = 1; d < D; ++d) {
          const double a = d >= C ? double(v[d]) : double(kept[d - 1][ty + 1][tx + 1]);
          sum += a * xs[ring(z + S::dz(d))][ty + 1 + S::dy(d)][tx + 1 + S::dx(d)];
        }
        const double xi = xs[ring(z)][ty + 1][tx + 1];
        if constexpr (Smooth) {
          smooth(i, xi, sum);
        } else {
          dev::store_y(y + i * ld, alpha, sum, beta);
          if (WithDot) dot += xi * (alpha * sum);
        }
      }
      __syncthreads();  // every read of this step's shared memory is done
      // 3. the crossing stripes of this plane, for the next
#pragma unroll
      for (int d = C; d < D; ++d) kept[d - 1][ty + 1][tx + 1] = v[d];
      if constexpr (Prefetch) {
#pragma unroll
        for (int d = 0; d < D; ++d) v[d] = next[d];
      }
    }
    __syncthreads();  // the next item's prologue overwrites what the last step stored
  }
  if (WithDot) dev::dot_epilogue(sink, dot);
}

// The march's shape: tiles x runs (tile, run) items, the blocks taking them in turn (more items than blocks where
// a fused dot's sink holds fewer partial sums).
struct MarchShape {
  int tiles_x = 0, tiles = 0, planes_per_run = 0, items = 0, blocks = 0;
};
template <class V, bool Smooth>
MarchShape march_shape(const DiaBox& box, int most_blocks) {
  MarchShape m;
  m.tiles_x = (box.line + DiaBoxTuning::tile_x - 1) / DiaBoxTuning::tile_x;
  m.tiles = m.tiles_x * ((box.lines + DiaBoxTuning::tile_y - 1) / DiaBoxTuning::tile_y);
  // (counted in tiles: counting only the rows a tile streams, 100^3's FP32 march took 14 runs and 48 us where 10
  // runs took 42)
  const double wanted = double(DiaBoxTuning::blocks_per_sm<V, Smooth>()) * device_sm_count();
  const int runs = std::clamp(static_cast<int>(std::lround(wanted / m.tiles)), 1, box.planes);
  m.planes_per_run = (box.planes + runs - 1) / runs;
  m.items = m.tiles * ((box.planes + m.planes_per_run - 1) / m.planes_per_run);
  m.blocks = std::min(m.items, most_blocks);
  return m;
}

// At most what is resident at once (one wave), and one partial sum a block for a fused dot; false where no block.
template <class V, bool WithDot, bool Smooth>
bool launch_march(const DiaBox& box, int32_t rows, int64_t stride, const V* values, const double* x, int ld,
                  double alpha, double beta, double* y, const DotSink& sink, const dia::SmoothingEpilogue& smooth,
                  cudaStream_t s) {
  int most = resident_blocks(reinterpret_cast<const void*>(&dia_box_kernel<V, WithDot, Smooth>), DiaBoxTuning::threads);
  if (WithDot) most = std::min(most, sink.capacity);
  const MarchShape m = march_shape<V, Smooth>(box, most);
  if (m.blocks < 1) return false;
  dia_box_kernel<V, WithDot, Smooth><<<m.blocks, DiaBoxTuning::threads, 0, s>>>(
      box, rows, stride, values, x, ld, alpha, beta, y, m.tiles_x, m.tiles, m.planes_per_run, m.items, sink, smooth);
  CHECK_LAUNCH("dia (plane march)");
  return true;
}

}  // namespace

std::optional<DiaBox> find_dia_box(const std::vector<int32_t>& offsets, int32_t rows) {
  if (offsets.size() != static_cast<size_t>(Box27::diagonals)) return std::nullopt;
  DiaBox box;
  box.line = offsets[3], box.plane = offsets[9];
  for (int d = 0; d < Box27::diagonals; ++d)
    if (offsets[static_cast<size_t>(d)] != Box27::offset(d, box.line, box.plane)) return std::nullopt;
  if (box.line < DiaBoxTuning::min_line || box.plane % box.line != 0 || box.plane < 3 * int64_t{box.line} ||
      box.plane * DiaBoxTuning::min_planes > rows)
    return std::nullopt;
  box.lines = static_cast<int32_t>(box.plane / box.line);
  box.planes = static_cast<int32_t>((rows + box.plane - 1) / box.plane);
  return box;
}

template <class V>
bool launch_dia_box(const DiaBox& box, int32_t rows, int64_t stride, const V* values, const double* x, int ld,
                    double alpha, double beta, double* y, const DotSink* sink, const dia::SmoothingEpilogue* smooth,
                    cudaStream_t s) {
  if (sink) return launch_march<V, true, false>(box, rows, stride, values, x, ld, alpha, beta, y, *sink, {}, s);
  if (smooth) return launch_march<V, false, true>(box, rows, stride, values, x, ld, -1.0, 1.0, y, DotSink{}, *smooth, s);
  return launch_march<V, false, false>(box, rows, stride, values, x, ld, alpha, beta, y, DotSink{}, {}, s);
}

template bool launch_dia_box<double>(const DiaBox&, int32_t, int64_t, const double*, const double*, int, double, double,
                                     double*, const DotSink*, const dia::SmoothingEpilogue*, cudaStream_t);
template bool launch_dia_box<float>(const DiaBox&, int32_t, int64_t, const float*, const double*, int, double, double,
                                    double*, const DotSink*, const dia::SmoothingEpilogue*, cudaStream_t);

}  // namespace spcg
