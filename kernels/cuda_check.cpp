#include "cuda_check.hpp"

namespace spcg {

void throw_cuda_error(const char* library, const char* call, const std::string& detail, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  throw CudaError(std::string(library) + " error: " + detail + " in " + call + " at " + base + ":" + std::to_string(line));
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

}  // namespace spcg
