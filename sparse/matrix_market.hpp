#pragma once
// Matrix Market I/O (the format SuiteSparse ships): coordinate real/integer/pattern with
// general/symmetric/skew-symmetric storage (expanded to full storage on read), and array format for
// dense right-hand sides and blocks. `.gz` files are read transparently (detected by magic bytes).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "csr_matrix.hpp"

namespace spcg {

struct MatrixMarketInfo {
  std::string source;     // path or name used in messages
  std::string format;     // coordinate | array
  std::string field;      // real | integer | pattern
  std::string symmetry;   // general | symmetric | skew-symmetric
  std::vector<std::string> comments;  // header comment lines without the leading '%'
  std::string name;       // SuiteSparse "name:" (group/name) if present
  std::string kind;       // SuiteSparse "kind:" if present
  int64_t declared_entries = 0;   // entries on the size line
  int64_t duplicates_summed = 0;  // entries merged into an earlier one with the same (i, j)
  int64_t explicit_zeros = 0;     // stored entries whose value is exactly zero (kept)
};

struct MatrixFile {
  CsrMatrix matrix;
  MatrixMarketInfo info;
};

struct DenseFile {
  DenseBlock block;
  MatrixMarketInfo info;
};

// Reads a sparse matrix. Throws InputError(file, line, problem) for every malformed input.
MatrixFile read_matrix_market(const std::string& path);
// Same, from text already in memory (tests and the fuzzer). `source` names it in messages.
MatrixFile parse_matrix_market(std::string_view text, const std::string& source);

// Reads a dense block: array format, or coordinate format scattered into a zero block.
DenseFile read_dense_matrix_market(const std::string& path);
DenseFile parse_dense_matrix_market(std::string_view text, const std::string& source);

// Writers: 17 significant digits so values round-trip exactly.
void write_matrix_market(const std::string& path, const CsrMatrix& a,
                         const std::vector<std::string>& comments = {});
void write_dense_matrix_market(const std::string& path, const DenseBlock& b,
                               const std::vector<std::string>& comments = {});

// Loads a whole file into memory, gunzipping when it starts with the gzip magic. Refuses
// directories, missing files and decompressed sizes over `max_bytes`.
std::string load_file_text(const std::string& path, uint64_t max_bytes = (uint64_t{1} << 35));

}  // namespace spcg
