#include "kernels/cuda_check.hpp"

#include <chrono>
#include <thread>

#include "kernels/device_array.hpp"

namespace spcg {

void throw_cuda_error(const char* library, const char* call, const std::string& detail, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw CudaError(std::string(library) + " error: " + detail + " in " + call + " at " + base + ":" + std::to_string(line));
}

void throw_cuda_error(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaErrorMemoryAllocation) {
    const char* base = file;
    for (const char* p = file; *p; ++p)
      if (*p == '/') base = p + 1;
    throw DeviceMemoryError(std::string("GPU out of memory: ") + cudaGetErrorString(error) + " in " + call + " at " + base +
                            ":" + std::to_string(line));
  }
  throw_cuda_error("CUDA", call, cudaGetErrorString(error), file, line);
}

void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw_cuda_error(e, (std::string("the launch of ") + kernel).c_str(), file, line);
}

bool cuda_device_available(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    if (why) *why = e != cudaSuccess ? std::string("no usable CUDA device (") + cudaGetErrorString(e) + ")"
                                     : std::string("no CUDA device found");
    cudaGetLastError();  // clear the sticky-free error so later checks start clean
    return false;
  }
  return true;
}

int cuda_device_count(std::string* why) {
  int count = 0;
  if (!cuda_device_available(why)) return 0;
  CHECK_CUDA(cudaGetDeviceCount(&count));
  return count;
}

struct CudaStart::State {
  std::thread thread;
  bool available = false;
  std::string why;
  double ms = 0;
};

CudaStart::CudaStart() : state_(std::make_unique<State>()) {
  State* st = state_.get();
  st->thread = std::thread([st] {
    const auto t0 = std::chrono::steady_clock::now();
    st->available = cuda_device_available(&st->why);
    if (st->available) {
      const cudaError_t e = cudaFree(nullptr);  // creates the primary context
      if (e != cudaSuccess) {
        st->available = false;
        st->why = std::string("cannot create a CUDA context (") + cudaGetErrorString(e) + ")";
      } else {
        start_device_pool();
      }
    }
    st->ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  });
}

CudaStart::~CudaStart() {
  if (state_->thread.joinable()) state_->thread.join();
}

bool CudaStart::wait(std::string* why) {
  if (state_->thread.joinable()) state_->thread.join();
  ms_ = state_->ms;
  if (why) *why = state_->why;
  return state_->available;
}

}  // namespace spcg
