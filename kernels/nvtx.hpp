#pragma once
// RAII NVTX range; the names match the report's so Nsight shows what the report counts.
#ifdef SPCG_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace spcg {
class NvtxRange {
 public:
#ifdef SPCG_NVTX
  explicit NvtxRange(const char* name) { nvtxRangePushA(name); }
  ~NvtxRange() { nvtxRangePop(); }
#else
  explicit NvtxRange(const char*) {}
#endif
  NvtxRange(const NvtxRange&) = delete;
  NvtxRange& operator=(const NvtxRange&) = delete;
};
}  // namespace spcg
