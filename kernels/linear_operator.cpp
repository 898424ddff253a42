#include "kernels/linear_operator.hpp"

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/matrix_setup.hpp"

namespace spcg {

LinearOperator::LinearOperator(const MatrixSetup& m) : rows_(m.rows()), cols_(m.cols()), nnz_(m.nnz()) {}

void LinearOperator::apply(double alpha, const DeviceBlock& X, double beta, DeviceBlock& Y, cudaStream_t s) const {
  if (X.rows != cols_ || Y.rows != rows_ || X.cols != Y.cols)
    throw Error(name() + ": shape mismatch: A is " + std::to_string(rows_) + " x " + std::to_string(cols_) + ", X is " +
                std::to_string(X.rows) + " x " + std::to_string(X.cols) + ", Y is " + std::to_string(Y.rows) + " x " +
                std::to_string(Y.cols));
  apply(alpha, X.data(), beta, Y.data(), X.cols, s);
}

void LinearOperator::apply(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const {
  if (k == 0) return;
  if (collective_) {  // the exchange runs on every rank, whatever its shape
    apply_impl(alpha, x, beta, y, k, s);
    return;
  }
  if (rows_ == 0) return;
  if (nnz_ == 0 || cols_ == 0 || alpha == 0.0) {
    launch_scale(beta, y, static_cast<size_t>(rows_) * k, s);
    return;
  }
  apply_impl(alpha, x, beta, y, k, s);
}

bool apply_with_dot(const LinearOperator& A, const double* x, double* y, const DotSink& sink, cudaStream_t s) {
  if (const auto* f = dynamic_cast<const FusedDotProduct*>(&A)) return f->apply_with_dot(x, y, sink, s);
  A.apply(1.0, x, 0.0, y, 1, s);  // no epilogue: the product alone
  return false;
}

bool offers_smoothing_step(const LinearOperator& A) {
  const auto* f = dynamic_cast<const FusedSmoothing*>(&A);
  return f && A.rows() > 0 && A.rows() == A.cols() && A.nnz() > 0 && f->offers_smoothing_step();
}

bool smoothing_step(const LinearOperator& A, const double* d_in, double* d_out, double* res, const double* res_in,
                    double* x, const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) {
  if (res_in && res_in != res && !reads_residual_in_place(A)) return false;
  return offers_smoothing_step(A) &&
         dynamic_cast<const FusedSmoothing&>(A).smoothing_step(d_in, d_out, res, res_in, x, scale, c1, c2, s, rows_apart);
}

bool reads_residual_in_place(const LinearOperator& A) {
  return offers_smoothing_step(A) && dynamic_cast<const FusedSmoothing&>(A).reads_residual_in_place();
}

bool residual_step(const LinearOperator& A, const double* b, const double* x, double* res, cudaStream_t s) {
  return reads_residual_in_place(A) && dynamic_cast<const FusedSmoothing&>(A).residual_step(b, x, res, s);
}

const PersistentCgMatrix* persistent_cg_layout(const LinearOperator& A) {
  const auto* p = dynamic_cast<const PersistentCgLayout*>(&A);
  return p ? p->persistent_cg_matrix() : nullptr;
}

bool MixedPrecisionOperator::apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const {
  return ::spcg::apply_with_dot(fp64_, x, y, sink, s);
}

const LinearOperator& iteration_operator(const LinearOperator& A) {
  const auto* c = dynamic_cast<const IterationCopy*>(&A);
  return c ? c->iteration_copy() : A;
}

bool iteration_copy_is_inexact(const LinearOperator& A) {
  const auto* c = dynamic_cast<const IterationCopy*>(&A);
  return c && &c->iteration_copy() != &A && !c->copy_is_exact();
}

Communicator* ranks_of(const LinearOperator& A) {
  const auto* r = dynamic_cast<const RankShare*>(&A);
  return r ? &r->communicator() : nullptr;
}

double time_on_stream_ms(cudaStream_t stream, const std::function<void()>& work) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  float ms = 0;
  try {
    CHECK_CUDA(cudaEventRecord(a, stream));
    work();
    CHECK_CUDA(cudaEventRecord(b, stream));
    CHECK_CUDA(cudaEventSynchronize(b));
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
  } catch (...) {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    throw;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms;
}

}  // namespace spcg
