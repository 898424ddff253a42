#pragma once
// Benchmark probes: device passes that are not operators but bound what operators can reach.
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

#include "spcg/csr_matrix.hpp"

namespace spcg {

// The gather floor of a CSR matrix (kernels/bench/gather_floor.cu): sum of val[k] * x[col[k]] over all nonzeros,
// streamed without row structure. partials: gather_floor_partials(nnz) doubles.
int64_t gather_floor_partials(int64_t nnz);
void launch_gather_floor(int64_t nnz, const double* val, const int32_t* col, const double* x, double* partials,
                         cudaStream_t stream);

// cuSPARSE SpMM on column-major blocks (cusparseSpMM CSR ALG1/2/3 with CUSPARSE_ORDER_COL), the other half of
// the baseline: our operators take row-major blocks, so this is timed on its own column-major copies of X and Y
// (no transposes in the timed call). Y = A X with X cols x k and Y rows x k, leading dimensions cols and rows.
class CusparseColumnMajorSpmm {
 public:
  CusparseColumnMajorSpmm(const CsrMatrix& a, int alg);  // alg: 1, 2 or 3
  ~CusparseColumnMajorSpmm();
  std::string name() const;  // cusparse-algN-col
  // Descriptors, work buffer and cusparseSpMM_preprocess for these buffers; false (with cuSPARSE's status) when
  // cuSPARSE does not take this algorithm with column-major blocks.
  bool prepare(int k, const double* x, double* y, std::string& why);
  void apply(cudaStream_t s) const;  // the prepared product

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace spcg
