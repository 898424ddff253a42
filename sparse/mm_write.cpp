// The writers: coordinate (general, or the lower triangle of a symmetric matrix) formatted on every thread,
// and array format for dense blocks.
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <memory>

#include "spcg/error.hpp"
#include "spcg/matrix_market.hpp"
#include "sparse/parallel.hpp"

namespace spcg {

namespace {
std::unique_ptr<FILE, int (*)(FILE*)> open_for_write(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw InputError(path, 0, std::string("cannot open for writing: ") + std::strerror(errno));
  return {f, &std::fclose};
}
void write_comments(FILE* f, const std::vector<std::string>& comments) {
  for (const auto& c : comments) std::fprintf(f, "%%%s\n", c.c_str());
}
void finish(FILE* f, const std::string& path) {
  if (std::ferror(f) || std::fflush(f) != 0) throw InputError(path, 0, "write failed");
}
}  // namespace

void write_matrix_market(const std::string& path, const CsrMatrix& a, const std::vector<std::string>& comments,
                         const WriteOptions& options) {
  const bool lower = options.storage == MatrixStorage::symmetric_lower;
  if (lower && a.rows != a.cols)
    throw Error(path + ": symmetric storage needs a square matrix, this one is " + std::to_string(a.rows) + " x " +
                std::to_string(a.cols));
  auto kept = [&](int32_t i, int32_t j) { return !lower || j <= i; };
  int64_t entries = a.nnz();
  if (lower) {
    entries = 0;
    for (int32_t i = 0; i < a.rows; ++i)
      for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) entries += kept(i, a.col_idx[p]);
  }
  auto f = open_for_write(path);
  std::fprintf(f.get(), "%%%%MatrixMarket matrix coordinate real %s\n", lower ? "symmetric" : "general");
  write_comments(f.get(), comments);
  std::fprintf(f.get(), "%d %d %lld\n", a.rows, a.cols, static_cast<long long>(entries));
  // Rows in blocks formatted on every thread (std::to_chars: the same digits as printf's %.17g / %.16e),
  // written in order.
  constexpr int32_t kRowsPerBlock = 1 << 15;
  const int threads = resolve_threads(options.threads);
  const int64_t blocks = (int64_t{a.rows} + kRowsPerBlock - 1) / kRowsPerBlock;
  const int64_t round = 2 * int64_t{threads};
  std::vector<std::string> text(static_cast<size_t>(round));
  for (int64_t first = 0; first < blocks; first += round) {
    const int64_t count = std::min(round, blocks - first);
    parallel_for(count, threads, [&](int64_t b) {
      std::string& out = text[static_cast<size_t>(b)];
      out.clear();
      char line[96];
      const int32_t lo = static_cast<int32_t>((first + b) * kRowsPerBlock);
      const int32_t hi = static_cast<int32_t>(std::min<int64_t>(a.rows, int64_t{lo} + kRowsPerBlock));
      for (int32_t i = lo; i < hi; ++i)
        for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
          if (!kept(i, a.col_idx[p])) continue;
          char* e = std::to_chars(line, line + 12, i + 1).ptr;
          *e++ = ' ';
          e = std::to_chars(e, e + 12, a.col_idx[p] + 1).ptr;
          *e++ = ' ';
          e = options.values == ValueFormat::g17
                  ? std::to_chars(e, line + sizeof line, a.values[p], std::chars_format::general, 17).ptr
                  : std::to_chars(e, line + sizeof line, a.values[p], std::chars_format::scientific, 16).ptr;
          *e++ = '\n';
          out.append(line, static_cast<size_t>(e - line));
        }
    });
    for (int64_t b = 0; b < count; ++b) std::fwrite(text[b].data(), 1, text[b].size(), f.get());
  }
  finish(f.get(), path);
}

void write_dense_matrix_market(const std::string& path, const DenseBlock& b, const std::vector<std::string>& comments) {
  auto f = open_for_write(path);
  std::fprintf(f.get(), "%%%%MatrixMarket matrix array real general\n");
  write_comments(f.get(), comments);
  std::fprintf(f.get(), "%d %d\n", b.rows, b.cols);
  for (int32_t j = 0; j < b.cols; ++j)
    for (int32_t i = 0; i < b.rows; ++i) std::fprintf(f.get(), "%.17g\n", b.at(i, j));
  finish(f.get(), path);
}

}  // namespace spcg
