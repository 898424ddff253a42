// cusparse-*: the baseline, never our answer. CSR cusparseSpMV (ALG1 or ALG2) with cusparseSpMV_preprocess
// for k = 1, cusparseSpMM (CSR ALG1/ALG2/ALG3, row-major dense blocks) with cusparseSpMM_preprocess for k > 1.
// Descriptors and work buffers are created once per block width and reused. The column-major SpMM baseline
// (CusparseColumnMajorSpmm, a benchmark probe) is at the end.
#include <map>
#include <mutex>

#include "kernels/bench/bench_probes.hpp"
#include "kernels/device_formats.hpp"
#include "kernels/kernel_factories.hpp"

namespace spcg {
namespace {

class CusparseOperator final : public LinearOperator {
 public:
  CusparseOperator(const MatrixSetup& m, std::string name, cusparseSpMVAlg_t mv_alg, cusparseSpMMAlg_t mm_alg)
      : LinearOperator(m), name_(std::move(name)), mv_alg_(mv_alg), mm_alg_(mm_alg) {
    csr_ = shared_csr(m, info_);
    info_.format = "csr (cuSPARSE)";
    CHECK_CUSPARSE(cusparseCreate(&handle_));
    // cuSPARSE only reads the matrix in SpMV/SpMM; the descriptor type is not const-qualified
    CHECK_CUSPARSE(cusparseCreateCsr(&mat_, m.rows(), m.cols(), m.nnz(), const_cast<int32_t*>(csr_->row_ptr.data()),
                                     const_cast<int32_t*>(csr_->col_idx.data()), const_cast<double*>(csr_->values.data()),
                                     CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I,
                                     CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
  }
  ~CusparseOperator() override {
    for (auto& [k, p] : plans_) {
      if (k == 1) {
        cusparseDestroyDnVec(p.vx);
        cusparseDestroyDnVec(p.vy);
      } else {
        cusparseDestroyDnMat(p.mx);
        cusparseDestroyDnMat(p.my);
      }
    }
    if (mat_) cusparseDestroySpMat(mat_);
    if (handle_) cusparseDestroy(handle_);
  }
  std::string name() const override { return name_; }
  double bytes_per_apply(int k) const override { return 12.0 * nnz_ + 4.0 * (rows_ + 1) + 16.0 * rows_ * k; }
  bool deterministic() const override { return mv_alg_ == CUSPARSE_SPMV_CSR_ALG2; }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK_CUSPARSE(cusparseSetStream(handle_, s));
    Plan& p = plan(k, x, y, alpha, beta);
    if (k == 1) {
      CHECK_CUSPARSE(cusparseDnVecSetValues(p.vx, const_cast<double*>(x)));
      CHECK_CUSPARSE(cusparseDnVecSetValues(p.vy, y));
      CHECK_CUSPARSE(cusparseSpMV(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, mat_, p.vx, &beta, p.vy, CUDA_R_64F,
                                  mv_alg_, p.buffer.data()));
    } else {
      CHECK_CUSPARSE(cusparseDnMatSetValues(p.mx, const_cast<double*>(x)));
      CHECK_CUSPARSE(cusparseDnMatSetValues(p.my, y));
      CHECK_CUSPARSE(cusparseSpMM(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha,
                                  mat_, p.mx, &beta, p.my, CUDA_R_64F, mm_alg_, p.buffer.data()));
    }
  }

 private:
  struct Plan {
    cusparseDnVecDescr_t vx = nullptr, vy = nullptr;
    cusparseDnMatDescr_t mx = nullptr, my = nullptr;
    DeviceArray<char> buffer;
  };
  Plan& plan(int k, const double* x, double* y, double alpha, double beta) const {
    auto it = plans_.find(k);
    if (it != plans_.end()) return it->second;
    Plan& p = plans_[k];
    size_t bytes = 0;
    if (k == 1) {
      CHECK_CUSPARSE(cusparseCreateDnVec(&p.vx, cols_, const_cast<double*>(x), CUDA_R_64F));
      CHECK_CUSPARSE(cusparseCreateDnVec(&p.vy, rows_, y, CUDA_R_64F));
      CHECK_CUSPARSE(cusparseSpMV_bufferSize(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, mat_, p.vx, &beta, p.vy,
                                             CUDA_R_64F, mv_alg_, &bytes));
      p.buffer = DeviceArray<char>(std::max<size_t>(bytes, 16), "cuSPARSE SpMV buffer");
      CHECK_CUSPARSE(cusparseSpMV_preprocess(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, &alpha, mat_, p.vx, &beta, p.vy,
                                             CUDA_R_64F, mv_alg_, p.buffer.data()));
    } else {
      CHECK_CUSPARSE(cusparseCreateDnMat(&p.mx, cols_, k, k, const_cast<double*>(x), CUDA_R_64F, CUSPARSE_ORDER_ROW));
      CHECK_CUSPARSE(cusparseCreateDnMat(&p.my, rows_, k, k, y, CUDA_R_64F, CUSPARSE_ORDER_ROW));
      CHECK_CUSPARSE(cusparseSpMM_bufferSize(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             &alpha, mat_, p.mx, &beta, p.my, CUDA_R_64F, mm_alg_, &bytes));
      p.buffer = DeviceArray<char>(std::max<size_t>(bytes, 16), "cuSPARSE SpMM buffer");
      CHECK_CUSPARSE(cusparseSpMM_preprocess(handle_, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE,
                                             &alpha, mat_, p.mx, &beta, p.my, CUDA_R_64F, mm_alg_, p.buffer.data()));
    }
    return p;
  }

  std::string name_;
  cusparseSpMVAlg_t mv_alg_;
  cusparseSpMMAlg_t mm_alg_;
  std::shared_ptr<const DeviceCsr> csr_;
  cusparseHandle_t handle_ = nullptr;
  cusparseSpMatDescr_t mat_ = nullptr;
  mutable std::map<int, Plan> plans_;
  mutable std::mutex mutex_;
};

}  // namespace

std::unique_ptr<LinearOperator> make_cusparse_alg1(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CusparseOperator>(m, "cusparse-alg1", CUSPARSE_SPMV_CSR_ALG1, CUSPARSE_SPMM_CSR_ALG1);
}
std::unique_ptr<LinearOperator> make_cusparse_alg2(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CusparseOperator>(m, "cusparse-alg2", CUSPARSE_SPMV_CSR_ALG2, CUSPARSE_SPMM_CSR_ALG2);
}
std::unique_ptr<LinearOperator> make_cusparse_spmm_alg3(const MatrixSetup& m, const OperatorOptions&) {
  return std::make_unique<CusparseOperator>(m, "cusparse-alg3", CUSPARSE_SPMV_CSR_ALG1, CUSPARSE_SPMM_CSR_ALG3);
}

struct CusparseColumnMajorSpmm::Impl {
  int alg = 1;
  DeviceCsr csr;
  cusparseHandle_t handle = nullptr;
  cusparseSpMatDescr_t mat = nullptr;
  cusparseDnMatDescr_t mx = nullptr, my = nullptr;
  DeviceArray<char> buffer;
  cusparseSpMMAlg_t algorithm() const {
    return alg == 1 ? CUSPARSE_SPMM_CSR_ALG1 : alg == 2 ? CUSPARSE_SPMM_CSR_ALG2 : CUSPARSE_SPMM_CSR_ALG3;
  }
  void drop_blocks() {
    if (mx) cusparseDestroyDnMat(mx);
    if (my) cusparseDestroyDnMat(my);
    mx = my = nullptr;
  }
};

CusparseColumnMajorSpmm::CusparseColumnMajorSpmm(const CsrMatrix& a, int alg) : impl_(std::make_unique<Impl>()) {
  impl_->alg = alg;
  SetupInfo ignored;
  impl_->csr = upload_csr(a, ignored);
  CHECK_CUSPARSE(cusparseCreate(&impl_->handle));
  CHECK_CUSPARSE(cusparseCreateCsr(&impl_->mat, a.rows, a.cols, a.nnz(), impl_->csr.row_ptr.data(),
                                   impl_->csr.col_idx.data(), impl_->csr.values.data(), CUSPARSE_INDEX_32I,
                                   CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
}

CusparseColumnMajorSpmm::~CusparseColumnMajorSpmm() {
  impl_->drop_blocks();
  if (impl_->mat) cusparseDestroySpMat(impl_->mat);
  if (impl_->handle) cusparseDestroy(impl_->handle);
}

std::string CusparseColumnMajorSpmm::name() const { return "cusparse-alg" + std::to_string(impl_->alg) + "-col"; }

bool CusparseColumnMajorSpmm::prepare(int k, const double* x, double* y, std::string& why) {
  Impl& m = *impl_;
  m.drop_blocks();
  const int rows = m.csr.rows, cols = m.csr.cols;
  CHECK_CUSPARSE(cusparseCreateDnMat(&m.mx, cols, k, cols, const_cast<double*>(x), CUDA_R_64F, CUSPARSE_ORDER_COL));
  CHECK_CUSPARSE(cusparseCreateDnMat(&m.my, rows, k, rows, y, CUDA_R_64F, CUSPARSE_ORDER_COL));
  const double one = 1.0, zero = 0.0;
  size_t bytes = 0;
  const cusparseStatus_t st =
      cusparseSpMM_bufferSize(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, m.mat,
                              m.mx, &zero, m.my, CUDA_R_64F, m.algorithm(), &bytes);
  if (st != CUSPARSE_STATUS_SUCCESS) {  // e.g. NOT_SUPPORTED: this algorithm takes row-major blocks only
    why = std::string("cusparseSpMM_bufferSize: ") + cusparseGetErrorString(st);
    return false;
  }
  m.buffer = DeviceArray<char>(std::max<size_t>(bytes, 16), "cuSPARSE SpMM buffer (column-major)");
  const cusparseStatus_t pre =
      cusparseSpMM_preprocess(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, m.mat,
                              m.mx, &zero, m.my, CUDA_R_64F, m.algorithm(), m.buffer.data());
  if (pre != CUSPARSE_STATUS_SUCCESS) {
    why = std::string("cusparseSpMM_preprocess: ") + cusparseGetErrorString(pre);
    return false;
  }
  return true;
}

void CusparseColumnMajorSpmm::apply(cudaStream_t s) const {
  const Impl& m = *impl_;
  const double one = 1.0, zero = 0.0;
  CHECK_CUSPARSE(cusparseSetStream(m.handle, s));
  CHECK_CUSPARSE(cusparseSpMM(m.handle, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, m.mat,
                              m.mx, &zero, m.my, CUDA_R_64F, m.algorithm(), const_cast<char*>(m.buffer.data())));
}

}  // namespace spcg
