// Work items of bounded length for the SpMM kernels that balance long rows, and the deterministic second pass
// that adds the pieces of split rows (one thread per (split row, column), pieces in order).
#include <algorithm>

#include "kernels/cuda_check.hpp"
#include "kernels/device_utils.cuh"
#include "kernels/variants/spmm_pieces.hpp"

namespace spcg {
namespace {

constexpr int kCombineThreads = 128;

__global__ void combine_pieces_kernel(int split_rows, int K, int ld, const int3* __restrict__ split,
                                      const double* __restrict__ partial, double alpha, double beta,
                                      double* __restrict__ Y) {
  const int64_t t = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (t >= int64_t{split_rows} * K) return;
  const int r = static_cast<int>(t / K), j = static_cast<int>(t % K);
  const int3 s = split[r];
  double sum = 0;
  for (int q = 0; q < s.z; ++q) sum += partial[int64_t{s.y + q} * K + j];
  dev::store_y(Y + int64_t{s.x} * ld + j, alpha, sum, beta);
}

}  // namespace

RowPieces::RowPieces(const CsrMatrix& a, int max_entries, int max_columns) {
  std::vector<int4> w;
  std::vector<int3> sp;
  for (int32_t i = 0; i < a.rows; ++i) {
    const int b = a.row_ptr[i], e = a.row_ptr[i + 1];
    if (e - b <= max_entries) {
      w.push_back(make_int4(i, b, e, -1));
      continue;
    }
    const int pieces = (e - b + max_entries - 1) / max_entries;
    sp.push_back(make_int3(i, slots, pieces));
    for (int q = 0; q < pieces; ++q)
      w.push_back(make_int4(i, b + q * max_entries, std::min(e, b + (q + 1) * max_entries), slots + q));
    slots += pieces;
  }
  items = static_cast<int>(w.size());
  split_rows = static_cast<int>(sp.size());
  work = DeviceArray<int4>(w, "split work items");
  split = DeviceArray<int3>(sp, "split rows");
  partial = DeviceArray<double>(static_cast<size_t>(slots) * max_columns, "split partial sums");
}

RowPieces setup_row_pieces(const MatrixSetup& m, int max_entries, int max_columns,
                           std::shared_ptr<const DeviceCsr>& csr, SetupInfo& info) {
  const auto t0 = std::chrono::steady_clock::now();
  RowPieces pieces(m.host(), max_entries, max_columns);
  info.convert_ms = ms_since(t0);
  info.reason = std::to_string(pieces.split_rows) + " rows split into " + std::to_string(pieces.slots) + " pieces";
  csr = shared_csr(m, info);
  info.format = "csr+split";
  info.device_bytes += pieces.bytes();
  return pieces;
}

void RowPieces::combine(int K, int ld, double alpha, double beta, double* y, cudaStream_t s) const {
  if (split_rows == 0 || K == 0) return;
  const int64_t blocks = (int64_t{split_rows} * K + kCombineThreads - 1) / kCombineThreads;
  combine_pieces_kernel<<<static_cast<unsigned>(blocks), kCombineThreads, 0, s>>>(split_rows, K, ld, split.data(),
                                                                                 partial.data(), alpha, beta, y);
  CHECK_LAUNCH("spmm-pieces-combine");
}

}  // namespace spcg
