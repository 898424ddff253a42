// spcg-cuda-floor: a process that only starts CUDA (cudaFree(0) creates device 0's context) and exits. Its wall
// time is the floor under any GPU program's time to solution; scripts/time_to_solution.py runs it beside
// spcg solve and the SciPy + CuPy peer.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  const cudaError_t e = cudaFree(nullptr);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "spcg-cuda-floor: %s\n", cudaGetErrorString(e));
    return 1;
  }
  return 0;
}
