#pragma once
// One factory per kernel file; registry.cpp is the only caller besides tests of internals.
#include <memory>

#include "kernels/linear_operator.hpp"
#include "kernels/matrix_setup.hpp"

namespace spcg {
#define SPCG_FACTORY(fn) std::unique_ptr<LinearOperator> fn(const MatrixSetup& m, const OperatorOptions& o)
SPCG_FACTORY(make_csr_scalar);
SPCG_FACTORY(make_csr_vector);
SPCG_FACTORY(make_csr_vector_f32);
SPCG_FACTORY(make_csr_stream);
SPCG_FACTORY(make_csr_stream_f32);
SPCG_FACTORY(make_csr_adaptive);
SPCG_FACTORY(make_csr_merge);
SPCG_FACTORY(make_ell);
SPCG_FACTORY(make_sell);
SPCG_FACTORY(make_sell_f32);
SPCG_FACTORY(make_sell_sorted);
SPCG_FACTORY(make_dia);
SPCG_FACTORY(make_dia_f32);
SPCG_FACTORY(make_coo);
SPCG_FACTORY(make_hyb);
SPCG_FACTORY(make_csr_sym);
SPCG_FACTORY(make_cusparse_alg1);
SPCG_FACTORY(make_cusparse_alg2);
SPCG_FACTORY(make_cusparse_spmm_alg3);
SPCG_FACTORY(make_spmm_naive);
SPCG_FACTORY(make_spmm_crc);
SPCG_FACTORY(make_spmm_cwm);
SPCG_FACTORY(make_spmm_swizzle);
SPCG_FACTORY(make_spmm_split);
SPCG_FACTORY(make_spmm_vector);
SPCG_FACTORY(make_spmm_dia);
SPCG_FACTORY(make_spmm_dia_runs);
#undef SPCG_FACTORY
}  // namespace spcg
