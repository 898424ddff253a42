#pragma once
// Matrix Market I/O (the format SuiteSparse ships): coordinate real/integer/pattern with
// general/symmetric/skew-symmetric storage (expanded to full storage on read), and array format for
// dense right-hand sides and blocks. `.gz` files are read transparently (detected by magic bytes).
// Sparse files are parsed on every core: the text is cut into chunks at line ends, each chunk parsed on its
// own, and the CSR built by count / prefix sum / scatter by row. The result is the same bit for bit, and an
// error names the same line, on every thread count (matrix_market.cpp says how).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg {

// How the parallel read builds the CSR (matrix_market.cpp says why there are two ways): `two` counts rows on a
// first pass over the text and writes entries straight into the CSR on a second; `one` parses into entries
// and scatters them; `automatic` takes two passes on enough threads (one thread always reads in one pass, and
// a file whose chunks spread over too many rows falls back to one).
enum class ReadPasses { automatic, one, two };

// One of `count` equal shares of a file's data lines by bytes, each cut at a line end (a line belongs to the part
// its first byte falls in): how several ranks parse a file once between them (spcg/distributed.hpp, file_share).
struct FilePart {
  int index = 0, count = 1;
  bool whole() const { return count == 1; }
};

struct ReadOptions {
  int threads = 0;                // 0: every hardware thread
  size_t chunk_bytes = 0;         // 0: automatic (a few chunks per thread); tests use tiny chunks
  uint64_t memory_available = 0;  // 0: what the OS says (MemAvailable); tests set it
  ReadPasses passes = ReadPasses::automatic;
  // A part: the matrix holds every row and column but only the part's entries (and their mirrors), duplicates
  // within the part summed; errors name the file's true line; the entry count is the whole file's to check
  // (MatrixMarketInfo::part_entries, check_part_entries).
  FilePart part;
};

// How a read went, for reports and `spcg bench read`.
struct ReadProfile {
  int threads = 1;
  int64_t chunks = 0;
  uint64_t file_bytes = 0;   // on disk
  uint64_t text_bytes = 0;   // after decompression
  std::string access;        // read | memory | libdeflate | zlib
  std::string method;        // "one pass" (entries, then the CSR) | "two passes" (counts, then the CSR)
  double load_ms = 0;        // open, or read and decompress
  double parse_ms = 0;       // the header and the chunks (two passes: both)
  double build_ms = 0;       // CSR: row pointers, scatter by row, row sort and duplicate merge; of which
  double count_ms = 0;       //   row lengths and their prefix sum (two passes: and each chunk's slots),
  double allocate_ms = 0;    //   waiting for the CSR arrays (populated beside the parse),
  double scatter_ms = 0;     //   entries to their rows (two passes: in pass 2), rows sorted, duplicates merged
};

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
  int64_t part_entries = 0;       // entries the data lines read held (a whole file: declared_entries)
  ReadProfile read;
};

struct MatrixFile {
  CsrMatrix matrix;
  MatrixMarketInfo info;
};

struct DenseFile {
  DenseBlock block;
  MatrixMarketInfo info;
};

// Reads a sparse matrix. Throws InputError(file, line, problem) for every malformed input, and for a header
// whose sizes need more host memory than is available (the message gives both).
MatrixFile read_matrix_market(const std::string& path, const ReadOptions& options = {});
// After every part of a file was read (options.part: one of them): with `entries_before` entries in the earlier
// parts and `total` in all, throws the InputError the whole file's read throws when total differs from the
// declared count and this part holds the entry past it (or is the last part, when entries are missing);
// returns otherwise (exactly one part of a file whose count is wrong throws).
void check_part_entries(const std::string& path, const ReadOptions& options, int64_t entries_before, int64_t total);
// Same, from text already in memory (tests and the fuzzer). `source` names it in messages.
MatrixFile parse_matrix_market(std::string_view text, const std::string& source, const ReadOptions& options = {});

// Host bytes spcg needs to hold a rows x cols matrix read from `entries` stored entries (`symmetric`: each
// off-diagonal one mirrored) and solve with it: the reader's entries and row cursors, the CSR, the
// statistics' per-row work and a right-hand side and solution. What the reader checks before allocating.
uint64_t host_bytes_for_matrix(int64_t rows, int64_t cols, int64_t entries, bool symmetric);
// MemAvailable from /proc/meminfo (physical pages otherwise).
uint64_t host_memory_available();

// Reads a dense block: array format, or coordinate format scattered into a zero block.
DenseFile read_dense_matrix_market(const std::string& path);
DenseFile parse_dense_matrix_market(std::string_view text, const std::string& source);

enum class MatrixStorage { general, symmetric_lower };
// %.17g: the shortest exact form SciPy's mmwrite also gives (-1, 0.5, 6.0221407599999999e+23); %.16e: 17
// significant digits always, as SuiteSparse files carry them (-1.0000000000000000e+00).
enum class ValueFormat { g17, e16 };
struct WriteOptions {
  MatrixStorage storage = MatrixStorage::general;  // symmetric_lower: the lower triangle of a symmetric A
  ValueFormat values = ValueFormat::g17;
  int threads = 0;                                 // 0: every hardware thread
};
// Writers: 17 significant digits (%.17g) so values round-trip exactly.
void write_matrix_market(const std::string& path, const CsrMatrix& a, const std::vector<std::string>& comments = {},
                         const WriteOptions& options = {});
void write_dense_matrix_market(const std::string& path, const DenseBlock& b,
                               const std::vector<std::string>& comments = {});

// Loads a whole file into memory, gunzipping when it starts with the gzip magic. Refuses
// directories, missing files and decompressed sizes over `max_bytes`.
std::string load_file_text(const std::string& path, uint64_t max_bytes = (uint64_t{1} << 35));
// The inflater `.gz` files go through: "libdeflate" (whole member in memory) or "zlib" (streaming).
const char* gzip_inflater();

}  // namespace spcg
