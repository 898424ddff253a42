#pragma once
// Starting CUDA, declared without CUDA headers (the library's public interface exports it): whether a device
// is usable, and CudaStart, which creates the context on a thread of its own while the caller reads a file.
#include <memory>
#include <string>

namespace spcg {

// True when a CUDA device is usable; `why` says why not.
bool cuda_device_available(std::string* why = nullptr);
// How many CUDA devices this process sees (0 with `why` when none is usable).
int cuda_device_count(std::string* why = nullptr);

// Starts CUDA (driver, device 0's context, the device memory pool's first allocation) on a thread of its own, so
// that it overlaps what the caller does meanwhile: about 220 ms on the H100 machine, as long as reading a 150 MB
// file. wait() joins and says whether a device is usable; the context is the process's, shared by every thread.
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
