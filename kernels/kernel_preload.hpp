#pragma once
// CUDA loads a kernel at its first launch (lazy loading, CUDA's default): on a 2M-row AMG setup that was ~10 ms of
// its ~30, spent on the setup's own thread between its launches (CUDA_MODULE_LOADING=EAGER against lazy,
// docs/perf-notes.md). Loading everything at the start instead (EAGER) made the start 33-47 ms longer. A
// KernelPreload loads the kernels of a few modules -- the translation units a setup is about to run -- on a thread
// of its own, while the setup's thread uploads the matrix (an H100 test: 64 kernels loaded beside a 176 MB upload
// left the upload's time unchanged).
//
// A module is named by its anchor: an empty kernel each listed .cu defines with SPCG_KERNEL_MODULE
// (kernels/kernel_module.cuh), so that one symbol leads to the module (cudaGetFuncBySymbol, cuFuncGetModule) and
// the module to its every kernel (cuModuleEnumerateFunctions, cuFuncLoad). Best effort: without those driver entry
// points (a driver before CUDA 12.4) or on any error, nothing is loaded early and each kernel loads at its first
// launch, as without a preload.
#include <thread>
#include <vector>

namespace spcg {

// The anchors of the modules that can be preloaded (each defined by SPCG_KERNEL_MODULE in the .cu named).
const void* setup_kernels_module();    // kernels/setup_kernels.cu: statistics, layouts (every setup)
const void* vector_ops_module();       // kernels/solver_ops/vector_ops.cu
const void* cg_ops_module();           // kernels/solver_ops/cg_ops.cu
const void* lanczos_ops_module();      // kernels/solver_ops/lanczos_ops.cu
const void* precond_ops_module();      // kernels/precond/precond_ops.cu
const void* amg_kernels_module();      // kernels/precond/amg_kernels.cu
const void* csr_vector_module();       // kernels/variants/spmv_csr_vector.cu
const void* csr_stream_module();       // kernels/variants/spmv_csr_stream.cu
const void* sell_module();             // kernels/variants/spmv_sell.cu
const void* dia_module();              // kernels/variants/spmv_dia.cu

// What a preload did (joined): kernels loaded, of how many modules, in how long.
struct PreloadTotals {
  int modules = 0;
  int kernels = 0;
  double ms = 0;
};

class KernelPreload {
 public:
  // Starts loading the modules of `anchors` on a thread of its own, on the calling thread's current device.
  explicit KernelPreload(std::vector<const void*> anchors);
  ~KernelPreload();  // joins
  KernelPreload(const KernelPreload&) = delete;
  KernelPreload& operator=(const KernelPreload&) = delete;
  PreloadTotals join();

 private:
  std::thread thread_;
  PreloadTotals totals_;
};

}  // namespace spcg
