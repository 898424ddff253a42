#pragma once
// A small column-major dense matrix on the host: the k x k data of block CG (solver/small_dense.hpp computes on it;
// kernels/solver_ops/block_steps.hpp moves it to and from the device).
#include <cstddef>
#include <vector>

namespace spcg {

struct Small {
  int rows = 0, cols = 0;
  std::vector<double> a;
  Small(int r = 0, int c = 0) : rows(r), cols(c), a(static_cast<size_t>(r) * c, 0.0) {}
  double& operator()(int i, int j) { return a[static_cast<size_t>(j) * rows + i]; }
  double operator()(int i, int j) const { return a[static_cast<size_t>(j) * rows + i]; }
};

}  // namespace spcg
