#pragma once
// The device half of block CG (solver/block_cg.cpp): its n x m dense passes, X += W Ta, R -= V Ta, the Gram
// products and the combines that form the next search block, on our streaming kernels (block_ops.cu) up to
// kBlockOpsMaxColumns right-hand sides and on cuBLAS beyond (row scalings then go through a scratch block).
// The small matrices travel host <-> device through one staging buffer on the solver's stream; every Gram
// matrix and norm read back is first summed over the ranks when there are several.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/communicator.hpp"
#include "kernels/device_array.hpp"
#include "kernels/solver_ops/block_ops.hpp"
#include "kernels/solver_ops/small_matrix.hpp"
#include "kernels/solver_ops/vector_ops.hpp"

namespace spcg {

class DenseSteps {
 public:
  // k: the widest block; n: the rows (this rank's on several GPUs); ranks: null on one GPU.
  DenseSteps(int k, int64_t n, cudaStream_t s, Communicator* ranks);
  ~DenseSteps();
  DenseSteps(const DenseSteps&) = delete;
  DenseSteps& operator=(const DenseSteps&) = delete;

  // [U1, diag(d) U2]' [V1, V2, V3] as a host matrix.
  Small gram(const GramInputs& g);
  // Y (n x b) = diag(d) C(:, cols) + U (n x a) M; C (ldc columns) and d optional. Y must not overlap U or C.
  // With X and A2 (a x k): also X += U A2, in the same pass over U.
  void combine(double* Y, int b, const double* U, int a, const Small& M, const double* C = nullptr, int ldc = 0,
               const std::vector<int>& cols = {}, const double* d = nullptr, double* X = nullptr, int k = 0,
               const Small* A2 = nullptr);
  // Whether step() takes blocks this wide (the one-pass kernel's tiles).
  bool fuses(int m, int k) const { return own_ && m <= kBlockStepMaxColumns && k <= kBlockStepMaxColumns; }
  // One pass (fuses(m, k)): X += W Ta; R -= V Ta; Wn = diag(d) R(:, act) + W Tb(:, act); returns ||R(:, c)||^2.
  std::vector<double> step(double* X, double* R, int k, const double* W, const double* V, int m, const Small& Ta,
                           const Small& Tb, const std::vector<int>& act, const double* d, double* Wn,
                           DeviceArray<double>& norms);
  // X += W A (unless X is null: the caller owes it); R -= V A; returns ||R(:, c)||^2.
  std::vector<double> update_xr(double* X, double* R, int k, const double* W, const double* V, int m, const Small& A,
                                DeviceArray<double>& norms, const ReductionWorkspace& rws);

 private:
  class Blas;
  void upload(const Small& M, size_t offset = 0);
  // dst (host) = src (device, dst.size() entries) through the page-locked buffer, after the stream's work.
  void read_back(const double* src, std::vector<double>& dst);

  cudaStream_t s_;
  int64_t n_;
  Communicator* ranks_;
  bool own_;
  DeviceArray<double> small_;
  PinnedArray<double> readback_;
  DeviceArray<int> sel_;
  DeviceArray<double> scratch_;
  std::unique_ptr<BlockOpsWorkspace> ws_;
  std::unique_ptr<Blas> blas_;
};

}  // namespace spcg
