#pragma once
// Launchers that more than one kernel file uses (hyb = ell + coo; coo and csr-merge share the carry fix-up).
#include <cuda_runtime.h>

#include "kernels/device_formats.hpp"

namespace spcg {

// y[carry_row[t]] += alpha * (sum of the run of equal rows starting at t), for the first t of each run;
// rows >= rows_limit are ignored. Runs are summed in order: deterministic, no atomics.
void launch_carry_fixup(const int32_t* carry_row, const double* carry_val, int64_t count, int32_t rows_limit,
                        double alpha, double* y, int ld, cudaStream_t s);

// ELL apply for one column (used by hyb for its regular part).
void launch_ell_column(const DeviceEll& ell, double alpha, const double* x, double beta, double* y, int ld,
                       cudaStream_t s);

// COO segmented-reduction apply for one column: y += alpha * A x (callers scale y by beta first).
// carry_row/carry_val hold one slot per warp interval.
struct CooWorkspace {
  DeviceArray<int32_t> carry_row;
  DeviceArray<double> carry_val;
  int64_t intervals = 0;
};
CooWorkspace make_coo_workspace(int64_t nnz);
void launch_coo_column(const DeviceCoo& coo, const CooWorkspace& ws, double alpha, const double* x, double* y,
                       int ld, cudaStream_t s);

}  // namespace spcg
