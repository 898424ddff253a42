#pragma once
// The one home of wall-clock helpers (host timing of setup phases; device work is timed with CUDA events).
#include <chrono>

namespace spcg {

// Milliseconds of wall time since t0.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace spcg
