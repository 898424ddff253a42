#pragma once
// Every CUDA, cuSPARSE and cuBLAS call goes through these macros: a failure becomes a spcg::CudaError
// carrying the call, file and line, which the CLI prints as one line.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cusparse.h>

#include <memory>
#include <string>

#include "error.hpp"

namespace spcg {

class CudaError : public Error {
 public:
  using Error::Error;
};

// Not enough device memory: says how much was asked for and how much is free.
class DeviceMemoryError : public CudaError {
 public:
  using CudaError::CudaError;
};

[[noreturn]] void throw_cuda_error(const char* library, const char* call, const std::string& detail, const char* file,
                                   int line);

// True when a CUDA device is usable; `why` says why not.
bool cuda_device_available(std::string* why = nullptr);

// Starts CUDA (driver, device 0's context) on a thread of its own, so that it overlaps what the caller does
// meanwhile: about 220 ms on the H100 machine, as long as reading a 150 MB file. wait() joins and says whether
// a device is usable; the context is the process's, shared by every thread.
class CudaStart {
 public:
  CudaStart();
  ~CudaStart();
  CudaStart(const CudaStart&) = delete;
  CudaStart& operator=(const CudaStart&) = delete;
  bool wait(std::string* why = nullptr);
  double ms() const { return ms_; }  // how long starting took (valid after wait)

 private:
  struct State;
  std::unique_ptr<State> state_;
  double ms_ = 0;
};

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
