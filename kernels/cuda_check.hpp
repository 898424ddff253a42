#pragma once
// Every CUDA, cuSPARSE, cuBLAS and NCCL call goes through these macros: a failure becomes a spcg::CudaError
// carrying the call, file and line, which the CLI prints as one line.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "cuda_start.hpp"
#include "error.hpp"

namespace spcg {

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const std::string& detail, const char* file,
                                   int line);

}  // namespace spcg

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t spcg_err_ = (call);                                                      \
    if (spcg_err_ != cudaSuccess)                                                              \
      ::spcg::throw_cuda_error("CUDA", #call, cudaGetErrorString(spcg_err_), __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors surface here, asynchronous ones at the next sync.
#define CHECK_LAUNCH(name) CHECK_CUDA(cudaPeekAtLastError())

#define CHECK_CUSPARSE(call)                                                                           \
  do {                                                                                                 \
    const cusparseStatus_t spcg_st_ = (call);                                                          \
    if (spcg_st_ != CUSPARSE_STATUS_SUCCESS)                                                           \
      ::spcg::throw_cuda_error("cuSPARSE", #call, cusparseGetErrorString(spcg_st_), __FILE__, __LINE__); \
  } while (0)

#define CHECK_CUBLAS(call)                                                                            \
  do {                                                                                                \
    const cublasStatus_t spcg_st_ = (call);                                                           \
    if (spcg_st_ != CUBLAS_STATUS_SUCCESS)                                                            \
      ::spcg::throw_cuda_error("cuBLAS", #call, cublasGetStatusString(spcg_st_), __FILE__, __LINE__); \
  } while (0)

#define CHECK_NCCL(call)                                                                         \
  do {                                                                                           \
    const ncclResult_t spcg_nr_ = (call);                                                        \
    if (spcg_nr_ != ncclSuccess)                                                                 \
      ::spcg::throw_cuda_error("NCCL", #call, ncclGetErrorString(spcg_nr_), __FILE__, __LINE__); \
  } while (0)
