// spcg --version: what this binary is (apps/build_info.cmake writes build_info.hpp at every build).
#include <string>

#include "build_info.hpp"
#include "apps/commands.hpp"

std::string spcg::version_text() {
  return std::string("spcg ") + SPCG_VERSION + "\n" +
         "commit             " + SPCG_GIT_COMMIT + "\n" +
         "CUDA               " + SPCG_CUDA_VERSION + " (built with)\n" +
         "GPU architectures  " + SPCG_CUDA_ARCHITECTURES + " (CMAKE_CUDA_ARCHITECTURES)\n";
}
