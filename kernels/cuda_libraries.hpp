#pragma once
// cuSPARSE, cuBLAS and NCCL are opened on the first call of one of their functions (cuda_libraries.cpp says why and
// how): a process that uses neither never loads them. These say whether one has been loaded, for tests and
// for the report.
namespace spcg {
bool cusparse_is_loaded();
bool cublas_is_loaded();
bool nccl_is_loaded();
}  // namespace spcg
