// cuSPARSE, cuBLAS and NCCL loaded on first use (dlopen), not at process start.
// Linked the usual way, cuSPARSE and cuBLAS (and cublasLt and nvJitLink behind them, 850 MB of shared objects)
// are mapped and their constructors run in every process: 0.37 s and 255 MB of RSS for a program that calls
// nothing (dev machine, `int main() {}` linked with -lcublas -lcusparse), against 0.00 s unlinked. Our kernels
// need none of them; the cuSPARSE baseline, the reference CG, block CG beyond 32 columns and the multi-GPU
// solvers (NCCL) do. So the functions we call are defined here with the libraries' own prototypes (hidden, so a
// loaded library never binds to them), and each forwards to the symbol looked up in the library, which is
// opened the first time any of its functions is called. A library that cannot be opened is a CudaError naming
// it and the loader's reason.
#include "kernels/cuda_libraries.hpp"

#include <dlfcn.h>

#include <atomic>
#include <mutex>
#include <string>

#include "kernels/cuda_check.hpp"

namespace spcg {
namespace {

std::atomic<bool> cusparse_loaded{false}, cublas_loaded{false}, nccl_loaded{false};

class SharedLibrary {
 public:
  SharedLibrary(const char* what, std::string soname, std::atomic<bool>& loaded) : what_(what), loaded_(loaded) {
    // The soname first (LD_LIBRARY_PATH, the loader cache), then the toolkit we were built with.
    handle_ = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
    std::string first_error = handle_ ? "" : dlerror();
#ifdef SPCG_CUDA_LIBRARY_DIR
    if (!handle_) handle_ = dlopen((std::string(SPCG_CUDA_LIBRARY_DIR) + "/" + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    if (!handle_)
      throw CudaError(std::string(what_) + " is needed here but could not be loaded: " + first_error);
    loaded_ = true;
  }
  void* symbol(const char* name) const {
    void* p = dlsym(handle_, name);
    if (!p) throw CudaError(std::string(what_) + ": symbol " + name + " not found (library version mismatch?)");
    return p;
  }

 private:
  const char* what_;
  std::atomic<bool>& loaded_;
  void* handle_ = nullptr;  // never closed: the library's handles may outlive any owner of ours
};

const SharedLibrary& cusparse_library() {
  static const SharedLibrary lib("cuSPARSE", "libcusparse.so." + std::to_string(CUSPARSE_VER_MAJOR), cusparse_loaded);
  return lib;
}
const SharedLibrary& nccl_library() {
  static const SharedLibrary lib("NCCL", "libnccl.so." + std::to_string(NCCL_MAJOR), nccl_loaded);
  return lib;
}
const SharedLibrary& cublas_library() {
  static const SharedLibrary lib("cuBLAS", "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), cublas_loaded);
  return lib;
}

template <typename Fn>
Fn lookup(const SharedLibrary& lib, const char* name) {
  return reinterpret_cast<Fn>(lib.symbol(name));
}

}  // namespace

bool cusparse_is_loaded() { return cusparse_loaded; }
bool cublas_is_loaded() { return cublas_loaded; }
bool nccl_is_loaded() { return nccl_loaded; }

}  // namespace spcg

// The forwarding definitions. Each looks its symbol up once (a thread-safe static) and calls it.
#define SPCG_FORWARD(library, fn) \
  static const auto real = ::spcg::lookup<decltype(&::fn)>(::spcg::library(), #fn); \
  return real
#define SPCG_HIDDEN extern "C" __attribute__((visibility("hidden")))

// ---- cuSPARSE ----
SPCG_HIDDEN cusparseStatus_t cusparseCreate(cusparseHandle_t* handle) {
  SPCG_FORWARD(cusparse_library, cusparseCreate)(handle);
}
SPCG_HIDDEN cusparseStatus_t cusparseDestroy(cusparseHandle_t handle) {
  SPCG_FORWARD(cusparse_library, cusparseDestroy)(handle);
}
SPCG_HIDDEN cusparseStatus_t cusparseSetStream(cusparseHandle_t handle, cudaStream_t stream) {
  SPCG_FORWARD(cusparse_library, cusparseSetStream)(handle, stream);
}
SPCG_HIDDEN const char* cusparseGetErrorString(cusparseStatus_t status) {
  SPCG_FORWARD(cusparse_library, cusparseGetErrorString)(status);
}
SPCG_HIDDEN cusparseStatus_t cusparseCreateCsr(cusparseSpMatDescr_t* mat, int64_t rows, int64_t cols, int64_t nnz,
                                               void* row_offsets, void* col_ind, void* values,
                                               cusparseIndexType_t row_type, cusparseIndexType_t col_type,
                                               cusparseIndexBase_t base, cudaDataType value_type) {
  SPCG_FORWARD(cusparse_library, cusparseCreateCsr)(mat, rows, cols, nnz, row_offsets, col_ind, values, row_type,
                                                    col_type, base, value_type);
}
SPCG_HIDDEN cusparseStatus_t cusparseDestroySpMat(cusparseConstSpMatDescr_t mat) {
  SPCG_FORWARD(cusparse_library, cusparseDestroySpMat)(mat);
}
SPCG_HIDDEN cusparseStatus_t cusparseCreateDnVec(cusparseDnVecDescr_t* vec, int64_t size, void* values,
                                                 cudaDataType value_type) {
  SPCG_FORWARD(cusparse_library, cusparseCreateDnVec)(vec, size, values, value_type);
}
SPCG_HIDDEN cusparseStatus_t cusparseDestroyDnVec(cusparseConstDnVecDescr_t vec) {
  SPCG_FORWARD(cusparse_library, cusparseDestroyDnVec)(vec);
}
SPCG_HIDDEN cusparseStatus_t cusparseDnVecSetValues(cusparseDnVecDescr_t vec, void* values) {
  SPCG_FORWARD(cusparse_library, cusparseDnVecSetValues)(vec, values);
}
SPCG_HIDDEN cusparseStatus_t cusparseCreateDnMat(cusparseDnMatDescr_t* mat, int64_t rows, int64_t cols, int64_t ld,
                                                 void* values, cudaDataType value_type, cusparseOrder_t order) {
  SPCG_FORWARD(cusparse_library, cusparseCreateDnMat)(mat, rows, cols, ld, values, value_type, order);
}
SPCG_HIDDEN cusparseStatus_t cusparseDestroyDnMat(cusparseConstDnMatDescr_t mat) {
  SPCG_FORWARD(cusparse_library, cusparseDestroyDnMat)(mat);
}
SPCG_HIDDEN cusparseStatus_t cusparseDnMatSetValues(cusparseDnMatDescr_t mat, void* values) {
  SPCG_FORWARD(cusparse_library, cusparseDnMatSetValues)(mat, values);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMV_bufferSize(cusparseHandle_t handle, cusparseOperation_t op, const void* alpha,
                                                     cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                                     const void* beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                                     cusparseSpMVAlg_t alg, size_t* bytes) {
  SPCG_FORWARD(cusparse_library, cusparseSpMV_bufferSize)(handle, op, alpha, a, x, beta, y, compute, alg, bytes);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMV_preprocess(cusparseHandle_t handle, cusparseOperation_t op, const void* alpha,
                                                     cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x,
                                                     const void* beta, cusparseDnVecDescr_t y, cudaDataType compute,
                                                     cusparseSpMVAlg_t alg, void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpMV_preprocess)(handle, op, alpha, a, x, beta, y, compute, alg, buffer);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMV(cusparseHandle_t handle, cusparseOperation_t op, const void* alpha,
                                          cusparseConstSpMatDescr_t a, cusparseConstDnVecDescr_t x, const void* beta,
                                          cusparseDnVecDescr_t y, cudaDataType compute, cusparseSpMVAlg_t alg,
                                          void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpMV)(handle, op, alpha, a, x, beta, y, compute, alg, buffer);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMM_bufferSize(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                     cusparseOperation_t op_b, const void* alpha,
                                                     cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                                     const void* beta, cusparseDnMatDescr_t c, cudaDataType compute,
                                                     cusparseSpMMAlg_t alg, size_t* bytes) {
  SPCG_FORWARD(cusparse_library, cusparseSpMM_bufferSize)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg,
                                                          bytes);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMM_preprocess(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                     cusparseOperation_t op_b, const void* alpha,
                                                     cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                                     const void* beta, cusparseDnMatDescr_t c, cudaDataType compute,
                                                     cusparseSpMMAlg_t alg, void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpMM_preprocess)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg,
                                                          buffer);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMM(cusparseHandle_t handle, cusparseOperation_t op_a, cusparseOperation_t op_b,
                                          const void* alpha, cusparseConstSpMatDescr_t a, cusparseConstDnMatDescr_t b,
                                          const void* beta, cusparseDnMatDescr_t c, cudaDataType compute,
                                          cusparseSpMMAlg_t alg, void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpMM)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg, buffer);
}

// SpGEMM (the AMG setup's Galerkin products)
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_createDescr(cusparseSpGEMMDescr_t* descr) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_createDescr)(descr);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_destroyDescr(cusparseSpGEMMDescr_t descr) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_destroyDescr)(descr);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_workEstimation(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                           cusparseOperation_t op_b, const void* alpha,
                                                           cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b,
                                                           const void* beta, cusparseSpMatDescr_t c,
                                                           cudaDataType compute, cusparseSpGEMMAlg_t alg,
                                                           cusparseSpGEMMDescr_t descr, size_t* bytes, void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_workEstimation)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg,
                                                                descr, bytes, buffer);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_compute(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                    cusparseOperation_t op_b, const void* alpha,
                                                    cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b,
                                                    const void* beta, cusparseSpMatDescr_t c, cudaDataType compute,
                                                    cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t descr, size_t* bytes,
                                                    void* buffer) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_compute)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg, descr,
                                                         bytes, buffer);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_copy(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                 cusparseOperation_t op_b, const void* alpha,
                                                 cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b,
                                                 const void* beta, cusparseSpMatDescr_t c, cudaDataType compute,
                                                 cusparseSpGEMMAlg_t alg, cusparseSpGEMMDescr_t descr) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_copy)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg, descr);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpGEMM_estimateMemory(cusparseHandle_t handle, cusparseOperation_t op_a,
                                                           cusparseOperation_t op_b, const void* alpha,
                                                           cusparseConstSpMatDescr_t a, cusparseConstSpMatDescr_t b,
                                                           const void* beta, cusparseSpMatDescr_t c,
                                                           cudaDataType compute, cusparseSpGEMMAlg_t alg,
                                                           cusparseSpGEMMDescr_t descr, float chunk_fraction,
                                                           size_t* bytes3, void* buffer3, size_t* bytes2) {
  SPCG_FORWARD(cusparse_library, cusparseSpGEMM_estimateMemory)(handle, op_a, op_b, alpha, a, b, beta, c, compute, alg,
                                                                descr, chunk_fraction, bytes3, buffer3, bytes2);
}
SPCG_HIDDEN cusparseStatus_t cusparseSpMatGetSize(cusparseConstSpMatDescr_t mat, int64_t* rows, int64_t* cols,
                                                  int64_t* nnz) {
  SPCG_FORWARD(cusparse_library, cusparseSpMatGetSize)(mat, rows, cols, nnz);
}
SPCG_HIDDEN cusparseStatus_t cusparseCsrSetPointers(cusparseSpMatDescr_t mat, void* row_offsets, void* col_ind,
                                                    void* values) {
  SPCG_FORWARD(cusparse_library, cusparseCsrSetPointers)(mat, row_offsets, col_ind, values);
}

// ---- cuBLAS ----
SPCG_HIDDEN cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  SPCG_FORWARD(cublas_library, cublasCreate_v2)(handle);
}
SPCG_HIDDEN cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  SPCG_FORWARD(cublas_library, cublasDestroy_v2)(handle);
}
SPCG_HIDDEN cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  SPCG_FORWARD(cublas_library, cublasSetStream_v2)(handle, stream);
}
SPCG_HIDDEN cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t handle, cublasPointerMode_t mode) {
  SPCG_FORWARD(cublas_library, cublasSetPointerMode_v2)(handle, mode);
}
SPCG_HIDDEN const char* cublasGetStatusString(cublasStatus_t status) {
  SPCG_FORWARD(cublas_library, cublasGetStatusString)(status);
}
SPCG_HIDDEN cublasStatus_t cublasDgemm_v2(cublasHandle_t handle, cublasOperation_t ta, cublasOperation_t tb, int m,
                                          int n, int k, const double* alpha, const double* a, int lda, const double* b,
                                          int ldb, const double* beta, double* c, int ldc) {
  SPCG_FORWARD(cublas_library, cublasDgemm_v2)(handle, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
SPCG_HIDDEN cublasStatus_t cublasDdot_v2(cublasHandle_t handle, int n, const double* x, int incx, const double* y,
                                         int incy, double* result) {
  SPCG_FORWARD(cublas_library, cublasDdot_v2)(handle, n, x, incx, y, incy, result);
}
SPCG_HIDDEN cublasStatus_t cublasDaxpy_v2(cublasHandle_t handle, int n, const double* alpha, const double* x, int incx,
                                          double* y, int incy) {
  SPCG_FORWARD(cublas_library, cublasDaxpy_v2)(handle, n, alpha, x, incx, y, incy);
}
SPCG_HIDDEN cublasStatus_t cublasDscal_v2(cublasHandle_t handle, int n, const double* alpha, double* x, int incx) {
  SPCG_FORWARD(cublas_library, cublasDscal_v2)(handle, n, alpha, x, incx);
}

// ---- NCCL (the multi-GPU solvers' communication; a single-GPU process never maps it) ----
SPCG_HIDDEN ncclResult_t ncclGetUniqueId(ncclUniqueId* id) { SPCG_FORWARD(nccl_library, ncclGetUniqueId)(id); }
SPCG_HIDDEN ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  SPCG_FORWARD(nccl_library, ncclCommInitRank)(comm, nranks, id, rank);
}
SPCG_HIDDEN ncclResult_t ncclCommDestroy(ncclComm_t comm) { SPCG_FORWARD(nccl_library, ncclCommDestroy)(comm); }
SPCG_HIDDEN ncclResult_t ncclCommAbort(ncclComm_t comm) { SPCG_FORWARD(nccl_library, ncclCommAbort)(comm); }
SPCG_HIDDEN ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* error) {
  SPCG_FORWARD(nccl_library, ncclCommGetAsyncError)(comm, error);
}
SPCG_HIDDEN const char* ncclGetErrorString(ncclResult_t result) {
  SPCG_FORWARD(nccl_library, ncclGetErrorString)(result);
}
SPCG_HIDDEN ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                                       ncclComm_t comm, cudaStream_t stream) {
  SPCG_FORWARD(nccl_library, ncclAllGather)(sendbuff, recvbuff, count, datatype, comm, stream);
}
SPCG_HIDDEN ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream) {
  SPCG_FORWARD(nccl_library, ncclSend)(sendbuff, count, datatype, peer, comm, stream);
}
SPCG_HIDDEN ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                                  cudaStream_t stream) {
  SPCG_FORWARD(nccl_library, ncclRecv)(recvbuff, count, datatype, peer, comm, stream);
}
SPCG_HIDDEN ncclResult_t ncclGroupStart() { SPCG_FORWARD(nccl_library, ncclGroupStart)(); }
SPCG_HIDDEN ncclResult_t ncclGroupEnd() { SPCG_FORWARD(nccl_library, ncclGroupEnd)(); }
