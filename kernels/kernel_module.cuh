#pragma once
// A module's anchor for KernelPreload (kernels/kernel_preload.hpp): an empty kernel, never launched, whose symbol
// leads the driver to the translation unit's module, and the function kernel_preload.hpp declares for it.
#define SPCG_KERNEL_MODULE(name)                                                  \
  namespace spcg {                                                                \
  __global__ void name##_module_anchor() {}                                       \
  const void* name##_module() { return reinterpret_cast<const void*>(&name##_module_anchor); } \
  }
