// The device half of block CG (solver/block_cg.cpp): its n x m dense passes on our streaming kernels
// (block_ops.cu) up to kBlockOpsMaxColumns right-hand sides, cuBLAS beyond.
#include "kernels/solver_ops/block_steps.hpp"

#include <algorithm>

#include "kernels/cuda_check.hpp"

namespace spcg {

// cuBLAS on the solver's stream. Row-major blocks are column-major transposes: U (n x a) is Uc (a x n, ld a).
class DenseSteps::Blas {
 public:
  explicit Blas(cudaStream_t s) {
    CHECK_CUBLAS(cublasCreate(&h_));
    CHECK_CUBLAS(cublasSetStream(h_, s));
    CHECK_CUBLAS(cublasSetPointerMode(h_, CUBLAS_POINTER_MODE_HOST));
  }
  ~Blas() { cublasDestroy(h_); }
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  // C (a x b, col-major, leading dimension ldc, device) = U' V for U n x a, V n x b.
  void gram(const double* U, int a, const double* V, int b, int64_t n, double* C, int ldc) {
    if (a == 0 || b == 0) return;
    const double one = 1, zero = 0;
    CHECK_CUBLAS(cublasDgemm(h_, CUBLAS_OP_N, CUBLAS_OP_T, a, b, static_cast<int>(n), &one, U, a, V, b, &zero, C, ldc));
  }
  // Y (n x b) = beta Y + U (n x a) * M (a x b, device col-major).
  void update(double* Y, int b, const double* U, int a, const double* M, double beta, int64_t n) {
    const double one = 1;
    // Yc (b x n) = M' (b x a) Uc (a x n) + beta Yc
    CHECK_CUBLAS(cublasDgemm(h_, CUBLAS_OP_T, CUBLAS_OP_N, b, static_cast<int>(n), a, &one, M, a, U, a, &beta, Y, b));
  }

 private:
  cublasHandle_t h_ = nullptr;
};

DenseSteps::DenseSteps(int k, int64_t n, cudaStream_t s, Communicator* ranks)
    : s_(s), n_(n), ranks_(ranks), own_(k <= kBlockOpsMaxColumns), small_(static_cast<size_t>(6) * k * k, "block-cg small"),
      readback_(static_cast<size_t>(6) * k * k, "block-cg readback"), sel_(k, "block-cg column map") {
  if (own_) {
    ws_ = std::make_unique<BlockOpsWorkspace>(k);
  } else {
    blas_ = std::make_unique<Blas>(s);
    scratch_ = DeviceArray<double>(static_cast<size_t>(n) * k, "block-cg scratch");
  }
}

Small DenseSteps::gram(const GramInputs& g) {
  const int a = g.a1 + g.a2, b = g.b1 + g.b2 + g.b3;
  Small G(a, b);
  if (a == 0 || b == 0) return G;
  if (own_) {
    launch_block_gram(n_, g, small_.data(), *ws_, s_);
  } else {
    double* out = small_.data();
    const double* U2 = g.U2;
    if (g.a2 && g.u2_row_scale) {
      launch_row_scale(n_, g.a2, g.u2_row_scale, g.U2, scratch_.data(), s_);
      U2 = scratch_.data();
    }
    const std::pair<const double*, int> right[] = {{g.V1, g.b1}, {g.V2, g.b2}, {g.V3, g.b3}};
    size_t col = 0;
    for (const auto& [Vb, bb] : right) {
      blas_->gram(g.U1, g.a1, Vb, bb, n_, out + col * a, a);
      blas_->gram(U2, g.a2, Vb, bb, n_, out + col * a + g.a1, a);
      col += bb;
    }
  }
  read_back(small_.data(), G.a);
  return G;
}

void DenseSteps::combine(double* Y, int b, const double* U, int a, const Small& M, const double* C, int ldc,
                         const std::vector<int>& cols, const double* d, double* X, int k, const Small* A2) {
  if (own_) {
    upload(M);
    if (X) upload(*A2, static_cast<size_t>(M.rows) * std::max(M.cols, 1));  // after M in the staging buffer
    bool first_columns = true;  // C(:, cols) is C's first b columns: read as rows, no column map
    for (size_t c = 0; c < cols.size(); ++c) first_columns &= cols[c] == static_cast<int>(c);
    if (C && !first_columns)
      CHECK_CUDA(cudaMemcpyAsync(sel_.data(), cols.data(), cols.size() * sizeof(int), cudaMemcpyHostToDevice, s_));
    launch_block_combine(n_, Y, b, U, a, small_.data(), C, ldc, C && !first_columns ? sel_.data() : nullptr, C ? d : nullptr, s_, X, k,
                         X ? small_.data() + static_cast<size_t>(M.rows) * std::max(M.cols, 1) : nullptr);
  } else {
    if (X) {
      upload(*A2);
      blas_->update(X, k, U, a, small_.data(), 1.0, n_);
      CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused
      if (b == 0) return;
    }
    double beta = 0.0;
    if (C) {  // cuBLAS: scale, gather by a selection product, then accumulate
      const double* Z = C;
      if (d) {
        launch_row_scale(n_, ldc, d, C, scratch_.data(), s_);
        Z = scratch_.data();
      }
      Small S(ldc, b);
      for (int c = 0; c < b; ++c) S(cols[c], c) = 1.0;
      upload(S);
      blas_->update(Y, b, Z, ldc, small_.data(), 0.0, n_);
      CHECK_CUDA(cudaStreamSynchronize(s_));  // the staging buffer is reused
      beta = 1.0;
    }
    if (a > 0) {
      upload(M);
      blas_->update(Y, b, U, a, small_.data(), beta, n_);
    } else if (!C) {
      CHECK_CUDA(cudaMemsetAsync(Y, 0, static_cast<size_t>(n_) * b * sizeof(double), s_));
    }
  }
  // The uploads above come from pageable memory, which the driver copies out before returning, and the
  // kernels that read the staging buffer run in stream order: no wait here (the next Gram read-back waits).
  if (!own_) CHECK_CUDA(cudaStreamSynchronize(s_));
}

std::vector<double> DenseSteps::step(double* X, double* R, int k, const double* W, const double* V, int m, const Small& Ta,
                                     const Small& Tb, const std::vector<int>& act, const double* d, double* Wn,
                                     DeviceArray<double>& norms) {
  std::vector<double> rr(k);
  std::vector<int> pos(k, -1);
  bool in_order = static_cast<int>(act.size()) == k;
  for (size_t c = 0; c < act.size(); ++c) {
    pos[act[c]] = static_cast<int>(c);
    in_order &= act[c] == static_cast<int>(c);
  }
  upload(Ta);
  upload(Tb, Ta.a.size());
  CHECK_CUDA(cudaMemcpyAsync(sel_.data(), pos.data(), pos.size() * sizeof(int), cudaMemcpyHostToDevice, s_));
  launch_block_step(n_, m, k, W, V, R, X, d, small_.data(), small_.data() + Ta.a.size(), sel_.data(),
                    static_cast<int>(act.size()), in_order, Wn, norms.data(), *ws_, s_);
  read_back(norms.data(), rr);
  return rr;
}

std::vector<double> DenseSteps::update_xr(double* X, double* R, int k, const double* W, const double* V, int m,
                                          const Small& A, DeviceArray<double>& norms, const ReductionWorkspace& rws) {
  std::vector<double> rr(k);
  upload(A);
  if (own_) {
    launch_block_update_xr(n_, k, m, X, R, W, V, small_.data(), norms.data(), *ws_, s_);
  } else {
    if (X) blas_->update(X, k, W, m, small_.data(), 1.0, n_);
    Small neg = A;
    for (double& v : neg.a) v = -v;
    CHECK_CUDA(cudaStreamSynchronize(s_));
    upload(neg);
    blas_->update(R, k, V, m, small_.data(), 1.0, n_);
    launch_column_dots(n_, k, R, R, rws, norms.data(), s_);
  }
  read_back(norms.data(), rr);
  return rr;
}

void DenseSteps::upload(const Small& M, size_t offset) {
  CHECK_CUDA(cudaMemcpyAsync(small_.data() + offset, M.a.data(), M.a.size() * sizeof(double), cudaMemcpyHostToDevice, s_));
}

void DenseSteps::read_back(const double* src, std::vector<double>& dst) {
  if (dst.size() > readback_.size()) throw Error("block-cg: read-back larger than its buffer");
  if (dst.empty()) return;
  if (ranks_) ranks_->allreduce_sum(const_cast<double*>(src), dst.size(), s_);
  CHECK_CUDA(cudaMemcpyAsync(readback_.data(), src, dst.size() * sizeof(double), cudaMemcpyDeviceToHost, s_));
  wait_for_stream(s_, ranks_);
  std::copy(readback_.data(), readback_.data() + dst.size(), dst.begin());
}

DenseSteps::~DenseSteps() = default;

}  // namespace spcg
