#pragma once
// One row of the per-kernel table a solve reports (KernelTimer fills it): plain data, no CUDA, so that the
// library's public result carries it.
#include <cstdint>
#include <string>

namespace spcg {

struct KernelStat {
  std::string name;
  int64_t calls = 0;
  double total_ms = 0;
  double bytes_per_call = 0;  // the kernel's bytes model, mean over the calls (block CG's widths shrink)
  double total_bytes = 0;
};

}  // namespace spcg
