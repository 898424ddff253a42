#pragma once
// The Matrix Market reader's parts and what passes between them (internal: not installed; the interface is
// matrix_market.hpp). The read, start to end, is matrix_market.cpp: the text comes from a file or memory
// (mm_input.cpp: pread, gzip), its header and data lines are parsed chunk by chunk (mm_parse.cpp), and the CSR
// is built from them in one pass or two (mm_build.cpp). The writers are mm_write.cpp.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spcg/error.hpp"
#include "spcg/host_memory.hpp"
#include "spcg/matrix_market.hpp"
#include "sparse/timing.hpp"

namespace spcg::mm {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

// The two-pass read's limit on a chunk's window of rows: its estimated entries (twice for mirrored storage)
// plus this many rows. A sorted 7-point 128^3 lower triangle needs about 33K rows per 1.15 MB chunk (16K
// columns plus their band of 16K mirrors); a column-sorted general file would need all rows and reads in one
// pass. The windows then take at most ~4-8 bytes per entry plus 256 KB per chunk, against 16 per entry for
// the one-pass arena.
// Two passes parse the text twice to save the arena's fresh memory: they lose on few threads (development
// machine, 128^3, 2 threads: 195-203 ms vs 153-161 ms) and win from 6 (H100 machine, `bench read --threads`,
// one pass / two passes: 4 threads 234 / 230 ms, 6 186 / 174, 8 168 / 140, 12 130 / 119, 16 132 / 108).
struct TwoPassTuning {
  static constexpr size_t extra_window_rows = 65536;
  static constexpr int min_threads = 6;
};


// ---- The text (mm_input.cpp) ----

// The text of a file, served by byte range: a plain file is read chunk by chunk into each parse thread's
// reusable buffer (pread), a gzip file is inflated into memory first, text given by a caller is used in place.
// Measured on the development VM, 322 MB file, 2 threads: mapping the file cost 120-135 ms just to touch its
// pages; reading all of it into new memory cost more still, the kernel zeroing the new pages (perf: 44% of
// the CPU time in clear_page_erms); pread into a few MB per thread that are reused copies at 7-15 GB/s.
class TextSource {
 public:
  // Text in memory (kept alive by the caller).
  explicit TextSource(std::string_view text) : memory_(text), in_memory_(true), size_(text.size()) {}
  // A file: opened, gzip detected by its magic bytes and inflated.
  TextSource(const std::string& path, uint64_t max_bytes, int threads, ReadProfile& profile);
  ~TextSource();
  TextSource(const TextSource&) = delete;
  TextSource& operator=(const TextSource&) = delete;

  size_t size() const { return size_; }
  // Bytes [a, b): a view of the text in memory, or read into `scratch` (reused, grown as needed).
  std::string_view range(size_t a, size_t b, HostVector<char>& scratch) const {
    if (in_memory_ || a == b) return memory_.substr(std::min(a, memory_.size()), b - a);
    if (scratch.size() < b - a) scratch.resize(b - a);
    read_exactly(path_, scratch.data(), a, b);
    return {scratch.data(), b - a};
  }
  // Where the line holding byte `at` ends: just after the first '\n' at or after `at`, or the end.
  size_t line_end_from(size_t at, HostVector<char>& scratch) const {
    while (at < size_) {
      const size_t stop = std::min(size_, at + 4096);
      const std::string_view piece = range(at, stop, scratch);
      const size_t nl = piece.find('\n');
      if (nl != std::string_view::npos) return at + nl + 1;
      at = stop;
    }
    return size_;
  }
  // Frees an inflated text once the entries are parsed (the CSR is built next).
  void release() {
    if (!inflated_.empty()) HostVector<char>().swap(inflated_), memory_ = {}, size_ = 0;
  }

 private:
  static constexpr size_t kReadSlice = size_t{8} << 20;

  void read_exactly(const std::string& path, char* to, size_t a, size_t b) const;
  void inflate_gzip(const std::string& path, const HostVector<char>& raw, uint64_t max_bytes, ReadProfile& profile);

  std::string path_;
  int fd_ = -1;
  std::string_view memory_;   // text in memory: given, or inflated_
  bool in_memory_ = false;
  HostVector<char> inflated_;
  size_t size_ = 0;
};

// ---- Lines, numbers and the header (mm_parse.cpp) ----

// A short, printable excerpt of a token or line for error messages.
std::string excerpt(std::string_view s, size_t max_len = 40);

// Iterates the lines of a text buffer, tracking 1-based line numbers, stripping CR.
class LineReader {
 public:
  explicit LineReader(std::string_view text) : text_(text) {}
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const size_t end = text_.find('\n', pos_);
    const size_t stop = end == std::string_view::npos ? text_.size() : end;
    line = text_.substr(pos_, stop - pos_);
    last_line_unterminated_ = end == std::string_view::npos;
    pos_ = end == std::string_view::npos ? text_.size() : end + 1;
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++line_no_;
    return true;
  }
  long line_no() const { return line_no_; }
  size_t position() const { return pos_; }
  size_t remaining_bytes() const { return text_.size() - pos_; }
  bool last_line_unterminated() const { return last_line_unterminated_; }

 private:
  std::string_view text_;
  size_t pos_ = 0;
  long line_no_ = 0;
  bool last_line_unterminated_ = false;
};

// Splits on blanks/tabs into at most `max_tokens` views; returns the count (max_tokens + 1 if more).
int tokenize(std::string_view line, std::string_view* tok, int max_tokens);
// Whether a line holds only blanks.
bool blank(std::string_view line);

// Throws the InputError of one line: the file, the line number, the problem.
struct LineError {
  const std::string& source;
  long line;
  [[noreturn]] void operator()(const std::string& problem) const { throw InputError(source, line, problem); }
};

// A token as an integer or a real (a Fortran 'D' exponent read as 'E'); errors name the line through `fail`.
int64_t parse_int(std::string_view t, const char* what, const LineError& fail);
double parse_real(std::string_view t, const LineError& fail);

struct Parser {
  std::string source;
  LineReader reader;
  Parser(std::string_view text, std::string src) : source(std::move(src)), reader(text) {}

  [[noreturn]] void fail(const std::string& problem) const { throw InputError(source, reader.line_no(), problem); }
  int64_t parse_int(std::string_view t, const char* what) const {
    return mm::parse_int(t, what, LineError{source, reader.line_no()});
  }
  double parse_real(std::string_view t) const { return mm::parse_real(t, LineError{source, reader.line_no()}); }

  // Banner + comments + size line. Returns the size line's tokens.
  MatrixMarketInfo read_header(int64_t& rows, int64_t& cols, int64_t& entries);
};

// The fewest bytes one data line can take ("1 1 1\n" = 6, pattern "1 1\n" = 4, array "1\n" = 2).
int64_t min_bytes_per_entry(const MatrixMarketInfo& info);

// ---- The data lines: what they are checked against and where their entries go ----

// A chunk's entries in file order: 0-based row and column, the value (none for pattern files).
struct Entries {
  // A slot of the shared EntryArena, or the chunk's own arrays once it outgrew its slot.
  int32_t* row = nullptr;
  int32_t* col = nullptr;
  double* val = nullptr;
  size_t capacity = 0;
  HostVector<int32_t> own_row, own_col;
  HostVector<double> own_val;
  int64_t count = 0;
  long lines = 0;       // lines begun in the chunk
  bool failed = false;  // the parallel pass met an error here; the serial replay names it
  // The rows the chunk's entries land in, mirrors included: the CSR build skips a chunk for the threads whose
  // rows it misses (a sorted file's chunk covers a narrow band of rows, so each row is scanned about once).
  int32_t first_row = INT32_MAX, last_row = -1;
  bool touches(int32_t lo, int32_t hi) const { return count > 0 && first_row < hi && last_row >= lo; }
};

// What every data line is checked against, from the header.
struct EntryRules {
  std::string source;
  int64_t rows = 0, cols = 0, declared = 0;
  bool pattern = false, integer = false, skew = false, mirrored = false;
  int64_t min_line_bytes = 6;
};

// Where parse_lines puts each entry (0-based row and column, the value).
struct CheckOnly {  // the serial replay: the lines are only checked
  void operator()(int32_t, int32_t, double) {}
};

// Into the chunk's slot of the arena, keeping the rows the entries land in. The chunk's arrays and bounds are
// kept here and stored back by finish(): the Entries of neighbouring chunks share cache lines, and a store per
// entry into them is false sharing between the parse threads.
class ArenaStore {
 public:
  ArenaStore(const EntryRules& r, Entries& out)
      : out_(out), rows_(out.row), cols_(out.col), vals_(out.val), capacity_(out.capacity), pattern_(r.pattern),
        mirrored_(r.mirrored) {}
  void operator()(int32_t i, int32_t j, double v) {
    if (n_ == capacity_) grow();
    rows_[n_] = i, cols_[n_] = j;
    if (!pattern_) vals_[n_] = v;
    ++n_;
    const int32_t lo = mirrored_ ? std::min(i, j) : i, hi = mirrored_ ? std::max(i, j) : i;
    first_row_ = std::min(first_row_, lo), last_row_ = std::max(last_row_, hi);
  }
  void finish() { out_.first_row = first_row_, out_.last_row = last_row_; }

 private:
  // A chunk whose lines are shorter than the arena's estimate outgrows its slot: it moves to arrays of its own.
  void grow() {
    capacity_ = out_.capacity + out_.capacity / 2 + 64;
    out_.own_row.resize(capacity_), out_.own_col.resize(capacity_);
    std::copy_n(out_.row, out_.capacity, out_.own_row.data());
    std::copy_n(out_.col, out_.capacity, out_.own_col.data());
    if (!pattern_) {
      out_.own_val.resize(capacity_);
      std::copy_n(out_.val, out_.capacity, out_.own_val.data());
    }
    out_.row = out_.own_row.data(), out_.col = out_.own_col.data(), out_.val = pattern_ ? nullptr : out_.own_val.data();
    out_.capacity = capacity_;
    rows_ = out_.row, cols_ = out_.col, vals_ = out_.val;
  }
  Entries& out_;
  int32_t* rows_;
  int32_t* cols_;
  double* vals_;
  size_t capacity_;
  size_t n_ = 0;
  int32_t first_row_ = INT32_MAX, last_row_ = -1;
  bool pattern_, mirrored_;
};

// Pass 2's store: each entry (and its mirror) into the chunk's next slot of its row.
struct SlotStore {
  int32_t* col;
  double* val;
  int32_t* next;  // the window's slots
  uint32_t lo, width;
  bool mirrored;
  double mirror_sign;
  bool outside = false;  // an entry outside the window: pass 1 and pass 2 disagree (an internal error)
  void operator()(int32_t i, int32_t j, double v) {
    const uint32_t a = static_cast<uint32_t>(i) - lo;
    if (a >= width) {
      outside = true;
      return;
    }
    const int32_t at = next[a]++;
    col[at] = j, val[at] = v;
    if (mirrored && i != j) {
      const uint32_t b = static_cast<uint32_t>(j) - lo;
      if (b >= width) {
        outside = true;
        return;
      }
      const int32_t at2 = next[b]++;
      col[at2] = i, val[at2] = mirror_sign * v;
    }
  }
};

// Parses whole lines of the data section. The fast path takes the common line ("i j value" with plain
// integers and a value std::from_chars reads whole); anything else, an error included, goes through the
// serial reader's own line logic, so every value and every message is the one a one-thread read gives.
// `allowed`: entries this chunk may hold before "more entries than declared" (the serial replay passes the
// number left after the earlier chunks). Each entry goes to `store`; returns the number of entries and sets
// `lines` to the lines begun in the text.
// Defined in mm_parse.cpp for the stores above (CheckOnly, ArenaStore, SlotStore), each inlined in its loop.
template <class Store>
int64_t parse_lines(const EntryRules& r, std::string_view text, long first_line, int64_t allowed, Store& store,
                    long& lines);

// A chunk's row counts over its window of rows [lo, lo + count.size()); after the prefix pass, the chunk's
// next slot in each of those rows.
struct RowWindow {
  int32_t lo = 0;
  std::vector<int32_t> count;
  int64_t entries = 0;
  long lines = 0;
  bool touches(int32_t a, int32_t b) const {
    return !count.empty() && lo < b && int64_t{lo} + static_cast<int64_t>(count.size()) > a;
  }
};

// Pass 1 on one chunk: lines are told apart as parse_lines does (comment, blank, entry), and an entry's two
// indices read; its value is skipped. False when a line is not plain "i j ..." with indices in range, or the
// window would grow past `max_width` rows, or another chunk gave up.
bool count_rows(const EntryRules& r, std::string_view text, size_t max_width, const std::atomic<bool>& gave_up,
                RowWindow& w);

// Cuts [begin, end) (end 0: the end of the text) into pieces of about `chunk` bytes that end just after a '\n' (the
// last at `end`, itself a line end).
std::vector<std::pair<size_t, size_t>> cut_at_line_ends(const TextSource& text, size_t begin, size_t chunk, size_t end = 0);
// The first bytes of the text, through the size line (whole lines): what the header parser reads.
std::string_view header_prefix(const TextSource& text, HostVector<char>& scratch);

// What the parallel parse of a chunk came to.
struct ChunkOutcome {
  int64_t count = 0;    // entries
  long lines = 0;       // lines begun in the chunk
  bool failed = false;  // an error was met; the serial replay names it
};

// Errors and counts in file order: the first chunk that failed, or that holds the entry past the declared
// count, is replayed serially from its true first line, which throws what the serial reader throws; then a
// file with fewer entries than declared is named.
// A part of a file (FilePart) replays its own chunks: its first line is counted from the file's start when an
// error needs it, and the entry count is checked only when the entries before the part are known.
struct ChunkReplay {
  const EntryRules& r;
  const TextSource& text;
  const std::vector<std::pair<size_t, size_t>>& pieces;
  long first_line;  // the line of the first data byte replayed; 0: counted when an error needs it (a part)
  HostVector<char>& scratch;
  size_t first_byte = 0;        // where the replayed text begins (a part's first byte: its first line's)
  bool excess_checked = true;   // an entry past the declared count is an error (a whole file, or a part's check)
  bool missing_checked = true;  // so is a text that ends before it (a whole file, or the last part's check)
  int64_t entries_before = 0;   // entries in the text before pieces[0]

  void throw_first_error(const std::vector<ChunkOutcome>& outcome) const;
};

// ---- The CSR (mm_build.cpp) ----

// The CSR's column and value arrays, made ready (allocated and populated) while the chunks are parsed: making
// fresh memory ready is a cost of its own (H100 machine, 128^3: 18-25 ms for 175 MB, the same on 1 and 16
// threads), so it runs beside the parse instead of after it, sized for every entry and mirror the header
// allows and cut to the counted size.
struct CsrStorage {
  HostVector<int32_t> col;
  HostVector<double> val;
};

// The one-pass read: every chunk parsed into an arena of entries, the CSR built from them; throws the first
// error in file order.
CsrMatrix read_one_pass(const EntryRules& r, TextSource& text, const std::vector<std::pair<size_t, size_t>>& pieces,
                        const std::vector<size_t>& estimate, int threads, std::vector<HostVector<char>>& scratch,
                        std::future<CsrStorage>& storage, const ChunkReplay& replay, int64_t& duplicates,
                        int64_t& explicit_zeros, int64_t& entries, ReadProfile& profile,
                        std::chrono::steady_clock::time_point t_parse);
// The two-pass read (mm_build.cpp says how); nothing when the file goes down the one-pass path instead.
std::optional<CsrMatrix> read_two_pass(const EntryRules& r, const TextSource& text,
                                       const std::vector<std::pair<size_t, size_t>>& pieces,
                                       const std::vector<size_t>& estimate, int threads,
                                       std::vector<HostVector<char>>& scratch, std::future<CsrStorage>& storage,
                                       const ChunkReplay& replay, int64_t& duplicates, int64_t& explicit_zeros,
                                       int64_t& entries, ReadProfile& profile,
                                       std::chrono::steady_clock::time_point t_parse);

}  // namespace spcg::mm
