#include "sparse/problem.hpp"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "spcg/error.hpp"
#include "spcg/generators.hpp"
#include "sparse/timing.hpp"

namespace spcg {

Problem load_problem(const std::string& src, const ReadOptions& read, bool with_stats) {
  Problem p;
  p.source = src;
  auto t0 = std::chrono::steady_clock::now();
  int64_t dups = 0;
  if (looks_like_generator(src)) {
    p.a = generate(src);
    p.name = src;
    p.kind = "generated";
  } else {
    MatrixFile f = read_matrix_market(src, read);
    p.read = f.info.read;
    p.a = std::move(f.matrix);
    p.name = f.info.name.empty() ? std::filesystem::path(src).filename().string() : f.info.name;
    p.kind = f.info.kind;
    dups = f.info.duplicates_summed;
    p.duplicates_summed = dups;
  }
  p.read_ms = ms_since(t0);
  if (with_stats) {
    t0 = std::chrono::steady_clock::now();
    p.stats = compute_stats(p.a, dups, read.threads);
    p.stats_ms = ms_since(t0);
  }
  return p;
}

DenseBlock make_rhs(const std::string& spec, int32_t n, int32_t k, uint64_t seed) {
  if (spec == "ones") return DenseBlock(n, k, 1.0);
  if (spec == "random") return random_block(n, k, seed);
  DenseFile f = read_dense_matrix_market(spec);
  if (f.block.rows != n)
    throw InputError(spec, 0, "right-hand side has " + std::to_string(f.block.rows) + " rows, the matrix has " +
                                  std::to_string(n));
  require_finite(f.block, spec);
  return std::move(f.block);
}

void require_finite(const DenseBlock& b, const std::string& what) {
  for (int32_t i = 0; i < b.rows; ++i)
    for (int32_t j = 0; j < b.cols; ++j)
      if (!std::isfinite(b.at(i, j)))
        throw InputError(what, 0, "entry (" + std::to_string(i + 1) + ", " + std::to_string(j + 1) + ") is NaN or Inf");
}

}  // namespace spcg
