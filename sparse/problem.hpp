#pragma once
// Loading the system: a Matrix Market file or a generator spec, its statistics, and right-hand sides.
#include <string>

#include "spcg/csr_matrix.hpp"
#include "spcg/matrix_market.hpp"
#include "spcg/stats.hpp"

namespace spcg {

struct Problem {
  std::string source;       // path or generator spec
  std::string name, kind;   // SuiteSparse header fields, or the generator
  CsrMatrix a;
  MatrixStats stats;
  ReadProfile read;  // files: how the reader went (threads, inflater, load / parse / build split)
  int64_t duplicates_summed = 0;
  double read_ms = 0, stats_ms = 0;
};

// Reads or generates A; with_stats: the host statistics too (info, the host backend; solve computes them on
// the device).
Problem load_problem(const std::string& matrix_or_spec, const ReadOptions& read = {}, bool with_stats = true);
// "ones", "random" (seeded), or a Matrix Market file (array or coordinate) with n rows and k columns.
DenseBlock make_rhs(const std::string& spec, int32_t n, int32_t k, uint64_t seed);
// Refuses NaN/Inf entries with a message naming `what` and the entry.
void require_finite(const DenseBlock& b, const std::string& what);

}  // namespace spcg
