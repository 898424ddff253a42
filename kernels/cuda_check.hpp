#pragma once
// Every CUDA, cuSPARSE, cuBLAS and NCCL call goes through these macros: a failure becomes a spcg::CudaError
// carrying the call, file and line, which the CLI prints as one line.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>
#include <nccl.h>

#include <memory>
#include <string>

#include "spcg/cuda_start.hpp"
#include "spcg/error.hpp"

namespace spcg {

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const std::string& detail, const char* file,
                                   int line);
// A failed CUDA call: DeviceMemoryError when the device is out of memory, else CudaError.
[[noreturn]] void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line);
// After a kernel launch: takes the launch's error (cudaGetLastError, so that a failed launch is reported once,
// not again by every later check), naming the kernel.
void check_launch(const char* kernel, const char* file, int line);

}  // namespace spcg

#define CHECK_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t spcg_err_ = (call);                                                      \
    if (spcg_err_ != cudaSuccess) ::spcg::throw_cuda_error(spcg_err_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: launch-configuration errors (and a launch out of memory) surface here, asynchronous
// ones at the next sync.
#define CHECK_LAUNCH(name) ::spcg::check_launch(name, __FILE__, __LINE__)

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
