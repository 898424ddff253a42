// spmm-vector: CSR-vector (Bell & Garland, SC 2009) carried over to narrow blocks: the lanes of a group split a
// row's entries instead of its columns. Lane l of L takes entries begin + l + L i, U at a time, and accumulates
// all K <= 16 columns of every X row it gathers (8 K bytes: whole 32-byte sectors used); the L lanes then add
// their partial rows by butterfly shuffles and lane l writes columns l, l + L, .... Rows longer than
// piece_entries are cut into pieces (spmm_pieces: partial rows, deterministic second pass), so a power-law tail
// does not serialise a group. Wider blocks go through in panels of 16 columns, each one sweep over A.
// Why: with lanes over columns (spmm-split, GE-SpMM's mapping) K = 4 leaves 2 lanes per row, each waiting on one
// gather after another; H100, power-law 1M, k = 4: 298 us vs 570 us (cuSPARSE ALG1 367 us). On short regular
// rows it loses (7-pt k = 8: 510 vs 248 us): every lane gathers its own X row, so a warp load touches ~4x more
// lines; auto times it against the others. Panels of 16 rather than 8 (one 128-byte X row per gather, one
// sweep over A at k = 16): power-law 1M, k = 12 / 16 / 32 887 / 907 / 1852 -> 735 / 816 / 1642 us (k = 12 now
// level with cuSPARSE ALG3, 737 us); two entries in flight per lane at K = 16 (120 registers) were slower.
#include <algorithm>

#include "kernels/kernel_factories.hpp"
#include "kernels/variants/spmm_common.cuh"
#include "kernels/variants/spmm_pieces.hpp"

namespace spcg {
namespace {

struct VectorTuning {
  static constexpr int lanes = 8;           // per work item; lane l stores columns l, l + 8, ...
  static constexpr int max_columns = 16;    // per launch
  static constexpr int gathered = 16;       // X values per lane in flight: KMAX x entries (at most 4)
  static constexpr int piece_entries = 256;
};

template <int L, int KMAX>
__global__ void __launch_bounds__(SpmmTuning::threads)
    spmm_vector_kernel(int items, int K, int ld, bool vec2, const int4* __restrict__ work, const int* __restrict__ col,
                       const double* __restrict__ val, const double* __restrict__ X, double alpha, double beta,
                       double* __restrict__ Y, double* __restrict__ partial) {
  constexpr int U = VectorTuning::gathered / KMAX > 4 ? 4 : VectorTuning::gathered / KMAX;
  const int item = static_cast<int>((int64_t{blockIdx.x} * blockDim.x + threadIdx.x) / L);
  if (item >= items) return;  // whole groups leave: L divides the block
  const int lane = threadIdx.x & (L - 1);
  const unsigned mask = dev::group_mask<L>();
  const int4 w = work[item];  // {row, begin, end, slot}
  double acc[KMAX] = {};
  for (int p0 = w.y + lane; p0 < w.z; p0 += L * U) {
    double v[U], x[U][KMAX];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int p = p0 + u * L;
      const bool on = p < w.z;
      v[u] = on ? dev::load_stream(val + p) : 0.0;
      const double* xr = X + static_cast<int64_t>(on ? dev::load_stream(col + p) : 0) * ld;
#pragma unroll
      for (int j = 0; j < KMAX; j += 2) {
        if (vec2 && j + 1 < K) {
          const double2 x2 = on ? __ldg(reinterpret_cast<const double2*>(xr + j)) : make_double2(0.0, 0.0);
          x[u][j] = x2.x, x[u][j + 1] = x2.y;
        } else {
          x[u][j] = on && j < K ? __ldg(xr + j) : 0.0;
          x[u][j + 1] = on && j + 1 < K ? __ldg(xr + j + 1) : 0.0;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u)
#pragma unroll
      for (int j = 0; j < KMAX; ++j) acc[j] = fma(v[u], x[u][j], acc[j]);
  }
  // Every lane ends with the whole row; lane l keeps columns l + L i (a select, not an indexed register).
  constexpr int KEEP = KMAX > L ? KMAX / L : 1;
  double mine[KEEP] = {};
#pragma unroll
  for (int j = 0; j < KMAX; ++j) {
    double t = acc[j];
#pragma unroll
    for (int off = L / 2; off > 0; off /= 2) t += __shfl_xor_sync(mask, t, off, L);
    if (j % L == lane) mine[j / L] = t;
  }
#pragma unroll
  for (int i = 0; i < KEEP; ++i) {
    const int c = lane + L * i;
    if (c >= K) break;
    if (w.w < 0) dev::store_y(Y + int64_t{w.x} * ld + c, alpha, mine[i], beta);
    else partial[int64_t{w.w} * K + c] = mine[i];
  }
}

class SpmmVector final : public SpmmOperator {
 public:
  SpmmVector(const MatrixSetup& m) : SpmmOperator(m) {
    pieces_ = setup_row_pieces(m, VectorTuning::piece_entries, VectorTuning::max_columns, csr_, info_);
  }
  std::string name() const override { return "spmm-vector"; }
  double bytes_per_apply(int k) const override {
    const int panels = (k + VectorTuning::max_columns - 1) / VectorTuning::max_columns;
    return panels * (12.0 * nnz_ + 16.0 * pieces_.items + 4.0 * rows_) + 16.0 * rows_ * k +
           16.0 * double(pieces_.slots) * k;
  }

 protected:
  void apply_panel(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const override {
    for (int j0 = 0; j0 < K; j0 += VectorTuning::max_columns)
      apply_narrow(alpha, x + j0, beta, y + j0, std::min(VectorTuning::max_columns, K - j0), ld, s);
  }

 private:
  void apply_narrow(double alpha, const double* x, double beta, double* y, int K, int ld, cudaStream_t s) const {
    constexpr int L = VectorTuning::lanes;
    const bool vec2 = ld % 2 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    double* partial = const_cast<double*>(pieces_.partial.data());
    const int64_t blocks = (int64_t{pieces_.items} * L + SpmmTuning::threads - 1) / SpmmTuning::threads;
    auto launch = [&](auto kmax) {
      spmm_vector_kernel<L, decltype(kmax)::value><<<static_cast<unsigned>(blocks), SpmmTuning::threads, 0, s>>>(
          pieces_.items, K, ld, vec2, pieces_.work.data(), csr_->col_idx.data(), csr_->values.data(), x, alpha, beta, y,
          partial);
    };
    if (K <= 2) launch(std::integral_constant<int, 2>{});
    else if (K <= 4) launch(std::integral_constant<int, 4>{});
    else if (K <= 8) launch(std::integral_constant<int, 8>{});
    else launch(std::integral_constant<int, 16>{});
    CHECK_LAUNCH("spmm-vector");
    pieces_.combine(K, ld, alpha, beta, y, s);
  }

  std::shared_ptr<const DeviceCsr> csr_;
  RowPieces pieces_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_spmm_vector(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<SpmmVector>(m);
}

}  // namespace spcg
