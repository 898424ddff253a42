#pragma once
// The plane march of a symmetric DIA matrix whose diagonals are a box stencil's (spmv_dia_box.cu): the launch
// the dia operator takes where find_dia_box (dia_box.hpp) reads its offsets so.
#include <cuda_runtime.h>

#include "kernels/linear_operator.hpp"
#include "kernels/variants/dia_box.hpp"
#include "kernels/variants/dia_common.cuh"

namespace spcg {

// y = alpha A x + beta y by the plane march (x and y with row stride ld); with a sink, x'y into it as well;
// with a smoother, its epilogue instead of y (dia::SmoothingEpilogue: alpha -1, beta 1 on its residual).
// False, launching nothing, where a fused dot's sink holds no partial sum.
template <class V>
bool launch_dia_box(const DiaBox& box, int32_t rows, int64_t stride, const V* values, const double* x, int ld,
                    double alpha, double beta, double* y, const DotSink* sink, const dia::SmoothingEpilogue* smooth,
                    cudaStream_t s);

}  // namespace spcg
