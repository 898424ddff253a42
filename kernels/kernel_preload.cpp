#include "kernels/kernel_preload.hpp"

#include <cuda.h>  // the driver's types and entry points' signatures (reached through the runtime, not linked)
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>

namespace spcg {
namespace {

template <class F>
F driver_entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12040, cudaEnableDefault, &found) != cudaSuccess ||
      found != cudaDriverEntryPointSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return reinterpret_cast<F>(fn);
}

struct DriverModules {
  decltype(&cuFuncGetModule) get_module = driver_entry<decltype(&cuFuncGetModule)>("cuFuncGetModule");
  decltype(&cuModuleGetFunctionCount) count = driver_entry<decltype(&cuModuleGetFunctionCount)>("cuModuleGetFunctionCount");
  decltype(&cuModuleEnumerateFunctions) enumerate =
      driver_entry<decltype(&cuModuleEnumerateFunctions)>("cuModuleEnumerateFunctions");
  decltype(&cuFuncLoad) load = driver_entry<decltype(&cuFuncLoad)>("cuFuncLoad");
  bool usable() const { return get_module && count && enumerate && load; }
};

// Loads every kernel of the module of `anchor`; the number loaded (0 on any failure).
int load_module_of(const DriverModules& d, const void* anchor) {
  cudaFunction_t f = nullptr;
  if (cudaGetFuncBySymbol(&f, anchor) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  CUmodule m = nullptr;
  unsigned count = 0;
  if (d.get_module(&m, reinterpret_cast<CUfunction>(f)) != CUDA_SUCCESS || d.count(&count, m) != CUDA_SUCCESS) return 0;
  std::vector<CUfunction> functions(count);
  if (count == 0 || d.enumerate(functions.data(), count, m) != CUDA_SUCCESS) return 0;
  int loaded = 0;
  for (CUfunction g : functions) loaded += d.load(g) == CUDA_SUCCESS;
  return loaded;
}

}  // namespace

KernelPreload::KernelPreload(std::vector<const void*> anchors) {
  int device = 0;
  if (anchors.empty() || cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  thread_ = std::thread([this, device, anchors = std::move(anchors)] {
    const auto t0 = std::chrono::steady_clock::now();
    if (cudaSetDevice(device) != cudaSuccess) {  // (a thread starts on device 0)
      cudaGetLastError();
      return;
    }
    const DriverModules d;
    if (!d.usable()) return;
    for (const void* anchor : anchors) {
      const int n = load_module_of(d, anchor);
      totals_.kernels += n;
      totals_.modules += n > 0;
    }
    totals_.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  });
}

KernelPreload::~KernelPreload() { join(); }

PreloadTotals KernelPreload::join() {
  if (thread_.joinable()) thread_.join();
  return totals_;
}

}  // namespace spcg
