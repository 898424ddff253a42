#include "solver/bench/reference_cg.hpp"

#include <chrono>
#include <cmath>
#include <memory>
#include <type_traits>

#include "kernels/device_array.hpp"

namespace spcg {
namespace {
// Library handles released on every path out (a failed call throws); a destroy cannot fail usefully here.
template <typename H, auto Destroy>
using Owned = std::unique_ptr<std::remove_pointer_t<H>, std::integral_constant<decltype(Destroy), Destroy>>;
}  // namespace

ReferenceCgResult reference_cusparse_cublas_cg(const CsrMatrix& a, double rtol, int maxit) {
  const int n = a.rows;
  DeviceArray<int32_t> rp(row_offsets32(a), "reference CSR"), ci(a.col_idx, "reference CSR");
  DeviceArray<double> va(a.values, "reference CSR"), x(std::vector<double>(n, 0.0)), r(std::vector<double>(n, 1.0)),
      p(std::vector<double>(n, 1.0)), q(n);
  cusparseHandle_t sp = nullptr;
  cublasHandle_t bl = nullptr;
  cusparseSpMatDescr_t A = nullptr;
  cusparseDnVecDescr_t vp = nullptr, vq = nullptr;
  CHECK_CUSPARSE(cusparseCreate(&sp));
  const Owned<cusparseHandle_t, cusparseDestroy> own_sp(sp);
  CHECK_CUBLAS(cublasCreate(&bl));
  const Owned<cublasHandle_t, cublasDestroy> own_bl(bl);
  CHECK_CUSPARSE(cusparseCreateCsr(&A, n, n, a.nnz(), rp.data(), ci.data(), va.data(), CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
  const Owned<cusparseSpMatDescr_t, cusparseDestroySpMat> own_a(A);
  CHECK_CUSPARSE(cusparseCreateDnVec(&vp, n, p.data(), CUDA_R_64F));
  const Owned<cusparseDnVecDescr_t, cusparseDestroyDnVec> own_vp(vp);
  CHECK_CUSPARSE(cusparseCreateDnVec(&vq, n, q.data(), CUDA_R_64F));
  const Owned<cusparseDnVecDescr_t, cusparseDestroyDnVec> own_vq(vq);
  const double one = 1, zero = 0;
  size_t bytes = 0;
  CHECK_CUSPARSE(cusparseSpMV_bufferSize(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vq, CUDA_R_64F,
                                         CUSPARSE_SPMV_CSR_ALG1, &bytes));
  DeviceArray<char> buf(std::max<size_t>(bytes, 16), "reference SpMV buffer");
  CHECK_CUSPARSE(cusparseSpMV_preprocess(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vq, CUDA_R_64F,
                                         CUSPARSE_SPMV_CSR_ALG1, buf.data()));
  ReferenceCgResult res;
  double rr = 0;
  CHECK_CUBLAS(cublasDdot(bl, n, r.data(), 1, r.data(), 1, &rr));  // b = ones, x0 = 0, r = p = b
  const double tol2 = rtol * rtol * rr;
  CHECK_CUDA(cudaDeviceSynchronize());
  const auto t0 = std::chrono::steady_clock::now();
  int it = 0;
  while (it < maxit && rr > tol2) {
    CHECK_CUSPARSE(cusparseSpMV(sp, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, A, vp, &zero, vq, CUDA_R_64F,
                                CUSPARSE_SPMV_CSR_ALG1, buf.data()));
    double pq = 0;
    CHECK_CUBLAS(cublasDdot(bl, n, p.data(), 1, q.data(), 1, &pq));
    const double alpha = rr / pq, neg = -alpha;
    CHECK_CUBLAS(cublasDaxpy(bl, n, &alpha, p.data(), 1, x.data(), 1));
    CHECK_CUBLAS(cublasDaxpy(bl, n, &neg, q.data(), 1, r.data(), 1));
    double rr_new = 0;
    CHECK_CUBLAS(cublasDdot(bl, n, r.data(), 1, r.data(), 1, &rr_new));
    const double beta = rr_new / rr;
    CHECK_CUBLAS(cublasDscal(bl, n, &beta, p.data(), 1));
    CHECK_CUBLAS(cublasDaxpy(bl, n, &one, r.data(), 1, p.data(), 1));
    rr = rr_new;
    ++it;
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  res.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  res.iterations = it;
  res.relative_residual = std::sqrt(rr / (tol2 / (rtol * rtol)));
  return res;
}

}  // namespace spcg
