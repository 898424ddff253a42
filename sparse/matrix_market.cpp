#include "matrix_market.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef SPCG_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <future>
#include <optional>
#include <fstream>
#include <limits>
#include <memory>

#include "error.hpp"
#include "parallel.hpp"

namespace spcg {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr size_t kBytesPerReadThread = size_t{512} << 10;

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

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// A short, printable excerpt of a token or line for error messages.
std::string excerpt(std::string_view s, size_t max_len = 40) {
  std::string r;
  for (char c : s.substr(0, max_len)) r += (std::isprint(static_cast<unsigned char>(c)) ? c : '?');
  if (s.size() > max_len) r += "...";
  return r;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

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
int tokenize(std::string_view line, std::string_view* tok, int max_tokens) {
  int n = 0;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && is_space(line[i])) ++i;
    if (i >= line.size()) break;
    size_t j = i;
    while (j < line.size() && !is_space(line[j])) ++j;
    if (n == max_tokens) return max_tokens + 1;
    tok[n++] = line.substr(i, j - i);
    i = j;
  }
  return n;
}

bool blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return is_space(c); });
}

// Throws the InputError of one line: the file, the line number, the problem.
struct LineError {
  const std::string& source;
  long line;
  [[noreturn]] void operator()(const std::string& problem) const { throw InputError(source, line, problem); }
};

int64_t parse_int(std::string_view t, const char* what, const LineError& fail) {
  if (!t.empty() && t[0] == '+') t.remove_prefix(1);
  int64_t v = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
  if (ec == std::errc::result_out_of_range) fail(std::string(what) + " '" + excerpt(t) + "' is too large");
  if (ec != std::errc() || p != t.data() + t.size()) fail(std::string("non-numeric ") + what + " '" + excerpt(t) + "'");
  return v;
}

double parse_real(std::string_view t, const LineError& fail) {
  std::string_view u = t;
  if (!u.empty() && u[0] == '+') u.remove_prefix(1);
  double v = 0;
  auto [p, ec] = std::from_chars(u.data(), u.data() + u.size(), v);
  if (ec == std::errc::result_out_of_range) {
    // Underflow to a subnormal/zero is fine; overflow is an Inf, which we refuse below.
    v = std::strtod(std::string(u).c_str(), nullptr);
  } else if (ec != std::errc() || p != u.data() + u.size()) {
    // Fortran-style exponents (1.0D+03) appear in some old collections.
    std::string f(u);
    std::replace(f.begin(), f.end(), 'D', 'E');
    std::replace(f.begin(), f.end(), 'd', 'e');
    auto [p2, ec2] = std::from_chars(f.data(), f.data() + f.size(), v);
    if ((ec2 != std::errc() && ec2 != std::errc::result_out_of_range) || p2 != f.data() + f.size())
      fail("non-numeric value '" + excerpt(t) + "'");
    if (ec2 == std::errc::result_out_of_range) v = std::strtod(f.c_str(), nullptr);
  }
  if (!std::isfinite(v)) fail("value '" + excerpt(t) + "' is NaN or Inf");
  return v;
}

struct Parser {
  std::string source;
  LineReader reader;
  Parser(std::string_view text, std::string src) : source(std::move(src)), reader(text) {}

  [[noreturn]] void fail(const std::string& problem) const { throw InputError(source, reader.line_no(), problem); }
  int64_t parse_int(std::string_view t, const char* what) const {
    return spcg::parse_int(t, what, LineError{source, reader.line_no()});
  }
  double parse_real(std::string_view t) const { return spcg::parse_real(t, LineError{source, reader.line_no()}); }

  // Banner + comments + size line. Returns the size line's tokens.
  MatrixMarketInfo read_header(int64_t& rows, int64_t& cols, int64_t& entries) {
    MatrixMarketInfo info;
    info.source = source;
    std::string_view line;
    if (!reader.next(line)) fail("empty file, expected a '%%MatrixMarket' banner");
    if (line.find('\0') != std::string_view::npos)
      fail("binary data: not a Matrix Market file");
    std::string_view tok[8];
    const int nt = tokenize(line, tok, 7);
    if (nt < 1 || lower(tok[0]) != "%%matrixmarket")
      fail("missing '%%MatrixMarket' banner (line starts with '" + excerpt(line) + "')");
    if (nt != 5)
      fail("banner must read '%%MatrixMarket matrix <format> <field> <symmetry>', got '" + excerpt(line, 80) + "'");
    const std::string object = lower(tok[1]), format = lower(tok[2]), field = lower(tok[3]), symmetry = lower(tok[4]);
    if (object != "matrix") fail("unsupported object '" + excerpt(tok[1]) + "' (only 'matrix')");
    if (format != "coordinate" && format != "array")
      fail("unsupported format '" + excerpt(tok[2]) + "' (expected 'coordinate' or 'array')");
    if (field == "complex") fail("unsupported field 'complex' (spcg solves real systems)");
    if (field != "real" && field != "integer" && field != "pattern" && field != "double")
      fail("unsupported field '" + excerpt(tok[3]) + "' (expected real, integer or pattern)");
    if (symmetry == "hermitian") fail("unsupported symmetry 'hermitian' (complex matrices are not supported)");
    if (symmetry != "general" && symmetry != "symmetric" && symmetry != "skew-symmetric")
      fail("unsupported symmetry '" + excerpt(tok[4]) + "' (expected general, symmetric or skew-symmetric)");
    if (format == "array" && field == "pattern") fail("array format cannot have field 'pattern'");
    info.format = format;
    info.field = field == "double" ? "real" : field;
    info.symmetry = symmetry;

    // Comments, then the size line.
    while (true) {
      if (!reader.next(line)) fail("file ends before the size line");
      if (line.find('\0') != std::string_view::npos) fail("binary data in header");
      if (!line.empty() && line[0] == '%') {
        std::string c(line.substr(1));
        if (c.rfind(" name: ", 0) == 0) info.name = c.substr(7);
        if (c.rfind(" kind: ", 0) == 0) info.kind = c.substr(7);
        info.comments.push_back(std::move(c));
        continue;
      }
      if (blank(line)) continue;
      break;
    }
    const int want = format == "coordinate" ? 3 : 2;
    const int ns = tokenize(line, tok, 4);
    if (ns != want)
      fail("bad size line '" + excerpt(line) + "': expected " +
           (format == "coordinate" ? std::string("'rows cols entries'") : std::string("'rows cols'")));
    rows = parse_int(tok[0], "row count");
    cols = parse_int(tok[1], "column count");
    entries = format == "coordinate" ? parse_int(tok[2], "entry count") : rows * cols;
    if (rows < 0 || cols < 0 || entries < 0) fail("negative size on the size line");
    if (rows > kInt32Max || cols > kInt32Max)
      fail("dimension " + std::to_string(std::max(rows, cols)) + " does not fit in int32");
    if (symmetry != "general" && rows != cols) fail("symmetric storage declared for a non-square " +
                                                    std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
    info.declared_entries = entries;
    return info;
  }
};

// The fewest bytes one data line can take ("1 1 1\n" = 6, pattern "1 1\n" = 4, array "1\n" = 2).
int64_t min_bytes_per_entry(const MatrixMarketInfo& info) {
  if (info.format == "array") return 2;
  return info.field == "pattern" ? 4 : 6;
}

}  // namespace

// ---- Reading the text: a mapped file, or a gzip member inflated into memory ----

namespace {

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

[[maybe_unused]] std::string inflate_with_zlib(const std::string& path, const char* data, size_t size, uint64_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw InputError(path, 0, "cannot initialise gzip decoder");
  std::string out;
  out.resize(std::min<uint64_t>(max_bytes, std::max<uint64_t>(size * 4, 1 << 16)));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  zs.avail_in = static_cast<uInt>(size);
  size_t produced = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (produced == out.size()) {
      if (out.size() >= max_bytes) {
        inflateEnd(&zs);
        throw InputError(path, 0, "decompressed size exceeds " + std::to_string(max_bytes) + " bytes");
      }
      out.resize(std::min<uint64_t>(max_bytes, out.size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    rc = inflate(&zs, Z_NO_FLUSH);
    produced = zs.total_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_out == 0)) {
      inflateEnd(&zs);
      throw InputError(path, 0, "corrupt or truncated gzip data");
    }
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      throw InputError(path, 0, "truncated gzip data");
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

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
  TextSource(const std::string& path, uint64_t max_bytes, int threads, ReadProfile& profile) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const auto st = fs::status(path, ec);
    if (ec || !fs::exists(st)) throw InputError(path, 0, "no such file");
    if (fs::is_directory(st)) throw InputError(path, 0, "is a directory, expected a Matrix Market file");
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) throw InputError(path, 0, std::string("cannot open file for reading: ") + std::strerror(errno));
    struct stat sb {};
    if (fstat(fd_, &sb) != 0) throw InputError(path, 0, "cannot stat file");
    size_ = static_cast<size_t>(sb.st_size);
    profile.file_bytes = size_;
    unsigned char magic[2] = {0, 0};
    const bool gzip = size_ >= 2 && ::pread(fd_, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    if (gzip) {
      HostVector<char> raw;
      raw.resize(size_);
      parallel_for(static_cast<int64_t>((size_ + kReadSlice - 1) / kReadSlice), threads, [&](int64_t s) {
        const size_t at = static_cast<size_t>(s) * kReadSlice;
        read_exactly(path, raw.data() + at, at, std::min(size_, at + kReadSlice));
      });
      inflate_gzip(path, raw, max_bytes, profile);
      memory_ = std::string_view(inflated_.data(), size_);
      in_memory_ = true;
    } else {
      if (size_ > max_bytes) throw InputError(path, 0, "file larger than " + std::to_string(max_bytes) + " bytes");
      posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
      profile.access = "read";
    }
    path_ = path;
  }
  ~TextSource() {
    if (fd_ >= 0) ::close(fd_);
  }
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

  void read_exactly(const std::string& path, char* to, size_t a, size_t b) const {
    while (a < b) {
      const ssize_t got = ::pread(fd_, to, b - a, static_cast<off_t>(a));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw InputError(path, 0, std::string("read error: ") + (got == 0 ? "file shrank while read" : std::strerror(errno)));
      a += static_cast<size_t>(got), to += got;
    }
  }

  void inflate_gzip(const std::string& path, const HostVector<char>& raw, uint64_t max_bytes, ReadProfile& profile) {
    const size_t size = raw.size();
#ifdef SPCG_HAVE_LIBDEFLATE
    // Whole members in memory: libdeflate inflates 2-3x faster than zlib. The trailer's ISIZE (size mod 2^32
    // of the last member) is the first guess of the output size; the buffer doubles until every member fits.
    profile.access = "libdeflate";
    const auto* in = reinterpret_cast<const unsigned char*>(raw.data());
    uint64_t guess = size >= 18 ? uint64_t{in[size - 4]} | uint64_t{in[size - 3]} << 8 |
                                      uint64_t{in[size - 2]} << 16 | uint64_t{in[size - 1]} << 24
                                : 0;
    // deflate expands at most ~1032:1; a truncated file's last four bytes are not a size at all
    guess = std::min<uint64_t>({max_bytes, uint64_t{size} * 1032 + 1024,
                                std::max<uint64_t>({guess + 1, uint64_t{size} * 4, 1 << 16})});
    std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                                   libdeflate_free_decompressor);
    if (!d) throw InputError(path, 0, "cannot initialise gzip decoder");
    for (uint64_t capacity = guess;; capacity = std::min<uint64_t>(max_bytes, capacity * 2)) {
      HostVector<char>().swap(inflated_);
      inflated_.resize(capacity);
      size_t in_pos = 0, out_pos = 0;
      bool too_small = false;
      while (in_pos < size) {
        size_t used_in = 0, produced = 0;
        const libdeflate_result r = libdeflate_gzip_decompress_ex(d.get(), in + in_pos, size - in_pos,
                                                                  inflated_.data() + out_pos, capacity - out_pos,
                                                                  &used_in, &produced);
        if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
          too_small = true;
          break;
        }
        if (r != LIBDEFLATE_SUCCESS) throw InputError(path, 0, "corrupt or truncated gzip data");
        in_pos += used_in, out_pos += produced;
      }
      if (!too_small) {
        size_ = out_pos;
        return;
      }
      if (capacity >= max_bytes)
        throw InputError(path, 0, "decompressed size exceeds " + std::to_string(max_bytes) + " bytes");
    }
#else
    profile.access = "zlib";
    const std::string out = inflate_with_zlib(path, raw.data(), size, max_bytes);
    inflated_.assign(out.begin(), out.end());
    size_ = out.size();
#endif
  }

  std::string path_;
  int fd_ = -1;
  std::string_view memory_;   // text in memory: given, or inflated_
  bool in_memory_ = false;
  HostVector<char> inflated_;
  size_t size_ = 0;
};

}  // namespace

const char* gzip_inflater() {
#ifdef SPCG_HAVE_LIBDEFLATE
  return "libdeflate";
#else
  return "zlib";
#endif
}

std::string load_file_text(const std::string& path, uint64_t max_bytes) {
  ReadProfile ignored;
  TextSource f(path, max_bytes, 1, ignored);
  HostVector<char> scratch;
  return std::string(f.range(0, f.size(), scratch));
}

uint64_t host_memory_available() {
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    unsigned long long kb = 0;
    while (std::fscanf(f, "%63s %llu kB\n", key, &kb) == 2)
      if (std::strcmp(key, "MemAvailable:") == 0) {
        std::fclose(f);
        return uint64_t{kb} * 1024;
      }
    std::fclose(f);
  }
  return uint64_t(sysconf(_SC_AVPHYS_PAGES)) * uint64_t(sysconf(_SC_PAGESIZE));
}

uint64_t host_bytes_for_matrix(int64_t rows, int64_t cols, int64_t entries, bool symmetric) {
  const double stored = symmetric ? 2.0 * double(entries) : double(entries);
  const double bytes = 4.0 * double(rows + 1)      // CSR row pointers
                       + 12.0 * stored             // CSR columns and values
                       + 4.0 * double(rows)        // the reader's row cursors
                       + 16.0 * double(entries)    // the reader's parsed entries (row, column, value)
                       + double(rows + cols)       // the statistics' per-diagonal flags
                       + 16.0 * double(rows);      // a right-hand side and a solution
  return bytes >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(bytes);
}

// ---- Parsing: the header serially, the entries chunk by chunk in parallel ----

namespace {

std::string gigabytes(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB", double(bytes) / 1e9);
  return b;
}

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

constexpr uint64_t kPow10Int[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000,
                                 1000000000, 10000000000ULL, 100000000000ULL, 1000000000000ULL,
                                 10000000000000ULL, 100000000000000ULL, 1000000000000000ULL,
                                 10000000000000000ULL, 100000000000000000ULL, 1000000000000000000ULL,
                                 10000000000000000000ULL};

// SWAR digit runs (the technique of fast_float's parse_eight_digits_unrolled, Lemire): eight bytes at a time.
// The number of leading ASCII digits among the 8 bytes at p (0-8).
inline int leading_digits8(uint64_t w) {
  const uint64_t x = w ^ 0x3030303030303030ULL;  // digit bytes become 0-9
  // a byte is a digit when its high nibble and that of byte + 6 are both 0; a carry out of a non-digit byte
  // can only disturb the bytes after it, and only the first non-digit matters
  const uint64_t bad = (x | (x + 0x0606060606060606ULL)) & 0xF0F0F0F0F0F0F0F0ULL;
  return bad ? __builtin_ctzll(bad) / 8 : 8;
}
// The value of the first n (1-8) digits of w, the first byte the most significant.
inline uint64_t digits8_value(uint64_t w, int n) {
  uint64_t v = (w ^ 0x3030303030303030ULL) << (8 * (8 - n));  // n digits in the top bytes, zeros below
  v = (v * 10) + (v >> 8);
  v = (((v & 0x000000FF000000FFULL) * (100 + (1000000ULL << 32))) +
       (((v >> 16) & 0x000000FF000000FFULL) * (1 + (10000ULL << 32)))) >> 32;
  return static_cast<uint32_t>(v);
}

// Exact decimal-to-double for the short and the integer-valued numbers that fill many files ("6", "-1",
// "0.25", "6.0000000000000000e+00"): when the significant digits, trailing zeros dropped, form an integer of
// at most 2^53 and the power of ten is at most 22 either way, sig * 10^e (or sig / 10^-e) is one correctly
// rounded operation on two exact doubles, so it equals strtod's correctly rounded result (Clinger 1990).
// Anything else returns false and goes to std::from_chars. On success *end_of_number is where it stopped.
bool parse_short_decimal(const char* p, const char* end, double& v, const char*& end_of_number) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  const bool negative = p < end && *p == '-';
  p += negative;
  // sig: the digits without leading and trailing zeros; a run of zeros is held back until a nonzero digit
  // follows, so trailing zeros never enter sig (they go to the exponent) and no division is needed.
  uint64_t sig = 0;
  int significant = 0, held_zeros = 0, exp10 = 0, digits = 0;
  auto take = [&](unsigned d) {
    if (d == 0) {
      held_zeros += sig != 0;
      return true;
    }
    significant += held_zeros + 1;
    if (significant > 16) return false;  // past 2^53: from_chars' job, found before more digits are read
    sig = sig * kPow10Int[held_zeros + 1] + d;
    held_zeros = 0;
    return true;
  };
  for (; p < end && static_cast<unsigned>(*p - '0') < 10u; ++p, ++digits)
    if (!take(static_cast<unsigned>(*p - '0'))) return false;
  if (p < end && *p == '.') {
    ++p;
    // Runs of eight '0's (6.0000000000000000e+00) in one step.
    uint64_t w;
    while (end - p >= 8 && (std::memcpy(&w, p, 8), w == 0x3030303030303030ULL))
      held_zeros += sig != 0 ? 8 : 0, p += 8, digits += 8, exp10 -= 8;
    for (; p < end && static_cast<unsigned>(*p - '0') < 10u; ++p, ++digits, --exp10)
      if (!take(static_cast<unsigned>(*p - '0'))) return false;
  }
  exp10 += held_zeros;
  if (digits == 0) return false;
  if (p < end && (*p == 'e' || *p == 'E')) {
    ++p;
    const bool exp_negative = p < end && *p == '-';
    if (p < end && (*p == '-' || *p == '+')) ++p;
    int e = 0, exp_digits = 0;
    for (; p < end && static_cast<unsigned>(*p - '0') < 10u; ++p)
      if (++exp_digits > 4) return false;
      else e = e * 10 + (*p - '0');
    if (exp_digits == 0) return false;
    exp10 += exp_negative ? -e : e;
  }
  if (sig == 0) {
    v = negative ? -0.0 : 0.0;
  } else {
    if (sig > (uint64_t{1} << 53) || exp10 < -22 || exp10 > 22) return false;
    v = exp10 >= 0 ? double(sig) * kPow10[exp10] : double(sig) / kPow10[-exp10];
    if (negative) v = -v;
  }
  end_of_number = p;
  return true;
}

// An unsigned decimal integer of 1-18 digits at q (advanced past it), read 8 bytes at a time; false when there
// is none, or more digits follow.
inline bool read_digits(const char*& q, const char* end, uint64_t& out_value) {
  const char* s = q;
  uint64_t x = 0;
  uint64_t w;
  int n;
  while (end - q >= 8 && (std::memcpy(&w, q, 8), n = leading_digits8(w)) > 0) {  // indices: up to 10 digits
    x = x * kPow10Int[n] + digits8_value(w, n);
    q += n;
    if (n < 8 || q - s > 18) break;
  }
  while (q < end && static_cast<unsigned>(*q - '0') < 10u && q - s <= 18) x = x * 10 + static_cast<unsigned>(*q++ - '0');
  out_value = x;
  return q != s && q - s <= 18 && !(q < end && static_cast<unsigned>(*q - '0') < 10u);
}
// Skips blanks at q; whether there were any.
inline bool skip_blanks(const char*& q, const char* end) {
  const char* s = q;
  while (q < end && is_blank_char(*q)) ++q;
  return q != s;
}

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

// Parses whole lines of the data section. The fast path takes the common line ("i j value" with plain
// integers and a value std::from_chars reads whole); anything else, an error included, goes through the
// serial reader's own line logic, so every value and every message is the one a one-thread read gives.
// `allowed`: entries this chunk may hold before "more entries than declared" (the serial replay passes the
// number left after the earlier chunks). Each entry goes to `store`; returns the number of entries and sets
// `lines` to the lines begun in the text.
template <class Store>
int64_t parse_lines(const EntryRules& r, std::string_view text, long first_line, int64_t allowed, Store& store,
                    long& lines) {
  const char* p = text.data();
  const char* const end = p + text.size();
  int64_t n = 0;
  long line = first_line - 1;
  while (p < end) {
    ++line;
    const char* const line_start = p;
    if (*p == '%') {  // comment: the serial reader tests the line's first character
      const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
      p = nl ? static_cast<const char*>(nl) + 1 : end;
      continue;
    }
    const char* q = p;
    while (q < end && is_blank_char(*q)) ++q;
    if (q == end || *q == '\n') {  // blank line
      p = q == end ? end : q + 1;
      continue;
    }
    if (n == allowed)
      LineError{r.source, line}("more entries than the " + std::to_string(r.declared) + " declared on the size line");
    // Fast path.
    uint64_t i = 0, j = 0;
    double v = 1.0;
    bool fast = false;
    {
      auto digits = [&](uint64_t& out_value) { return read_digits(q, end, out_value); };
      auto blanks = [&] { return skip_blanks(q, end); };
      if (digits(i) && blanks() && digits(j)) {
        bool ok = true;
        if (!r.pattern) {
          // from_chars on the rest of the text: the value is the whole token when it stops at a blank, the
          // line's end or the text's end (then it read exactly the token the serial reader would cut).
          ok = blanks() && q < end && *q != '+' && *q != '\n';
          if (ok && r.integer) {
            int64_t iv = 0;
            auto [ptr, ec] = std::from_chars(q, end, iv);
            ok = ec == std::errc() && (ptr == end || is_blank_char(*ptr) || *ptr == '\n');
            v = static_cast<double>(iv);
            q = ptr;
          } else if (ok) {
            const char* ptr = q;
            if (!parse_short_decimal(q, end, v, ptr)) {
              const auto res = std::from_chars(q, end, v);
              ptr = res.ec == std::errc() ? res.ptr : q;
            }
            ok = ptr != q && (ptr == end || is_blank_char(*ptr) || *ptr == '\n') && std::isfinite(v);
            q = ptr;
          }
        }
        if (ok) {
          blanks();
          fast = (q == end || *q == '\n') && i >= 1 && i <= uint64_t(r.rows) && j >= 1 && j <= uint64_t(r.cols) &&
                 !(r.skew && i == j && v != 0.0);
        }
      }
    }
    if (fast) {
      p = q == end ? end : q + 1;
    } else {
      // The serial reader's line: up to '\n', trailing CRs stripped; its checks in its order.
      const void* nl = std::memchr(line_start, '\n', static_cast<size_t>(end - line_start));
      const char* eol = nl ? static_cast<const char*>(nl) : end;
      std::string_view ln(line_start, static_cast<size_t>(eol - line_start));
      while (!ln.empty() && ln.back() == '\r') ln.remove_suffix(1);
      const LineError fail{r.source, line};
      std::string_view tok[4];
      const int nt = tokenize(ln, tok, 3);
      const int want = r.pattern ? 2 : 3;
      // Indices first: a 0-based or out-of-range file is named as such even when its field count is also off.
      const int64_t si = nt >= 1 ? parse_int(tok[0], "row index", fail) : 0;
      const int64_t sj = nt >= 2 ? parse_int(tok[1], "column index", fail) : 0;
      if (nt >= 2 && (si < 1 || si > r.rows || sj < 1 || sj > r.cols))
        fail("index (" + std::to_string(si) + ", " + std::to_string(sj) + ") out of range for a " +
             std::to_string(r.rows) + " x " + std::to_string(r.cols) + " matrix (indices are 1-based)" +
             (si == 0 || sj == 0 ? "; zero index: file looks 0-based" : ""));
      if (nt != want) {
        if (nt < want && nl == nullptr) fail("truncated last line '" + excerpt(ln) + "'");
        fail("expected " + std::to_string(want) + " fields ('row col" + std::string(r.pattern ? "" : " value") +
             "'), got " + (nt > want ? "more" : std::to_string(nt)) + " in '" + excerpt(ln) + "'");
      }
      v = 1.0;
      if (!r.pattern) v = r.integer ? static_cast<double>(parse_int(tok[2], "integer value", fail)) : parse_real(tok[2], fail);
      if (r.skew && si == sj && v != 0.0) fail("nonzero diagonal entry in a skew-symmetric matrix");
      i = static_cast<uint64_t>(si), j = static_cast<uint64_t>(sj);
      p = nl ? eol + 1 : end;
    }
    store(static_cast<int32_t>(i - 1), static_cast<int32_t>(j - 1), v);
    ++n;
  }
  lines = line - first_line + 1;
  return n;
}


// Cuts [begin, end of text) into pieces of about `chunk` bytes that end just after a '\n' (the last at the end).
std::vector<std::pair<size_t, size_t>> cut_at_line_ends(const TextSource& text, size_t begin, size_t chunk) {
  std::vector<std::pair<size_t, size_t>> pieces;
  HostVector<char> scratch;
  for (size_t at = begin; at < text.size();) {
    const size_t nominal = at + std::max<size_t>(chunk, 1);
    const size_t stop = nominal >= text.size() ? text.size() : text.line_end_from(nominal - 1, scratch);
    pieces.emplace_back(at, stop);
    at = stop;
  }
  return pieces;
}

// The first bytes of the text, through the size line (whole lines): what the header parser reads.
std::string_view header_prefix(const TextSource& text, HostVector<char>& scratch) {
  for (size_t want = std::min<size_t>(text.size(), 1 << 16);; want = std::min(text.size(), want * 2)) {
    const std::string_view prefix = text.range(0, want, scratch);
    // The banner, then comment and blank lines, then the size line: complete when its '\n' is in the prefix.
    size_t pos = 0;
    bool banner = true, complete = false;
    while (pos < prefix.size()) {
      const size_t nl = prefix.find('\n', pos);
      if (nl == std::string_view::npos) break;
      const std::string_view line = prefix.substr(pos, nl - pos);
      pos = nl + 1;
      if (banner) {
        banner = false;
        continue;
      }
      if ((!line.empty() && line[0] == '%') || blank(line)) continue;
      complete = true;
      break;
    }
    if (complete) return prefix.substr(0, pos);
    if (want == text.size()) return prefix;
  }
}

// Sorts one row's entries by column (stable: duplicates keep file order) and sums duplicates in that order,
// as csr_from_triplets does. Returns the row's new length.
int32_t sort_and_merge_row(int32_t* col, double* val, int32_t len, std::vector<std::pair<int32_t, double>>& scratch) {
  bool sorted = true;
  for (int32_t p = 1; p < len && sorted; ++p) sorted = col[p - 1] < col[p];
  if (sorted) return len;
  scratch.assign(len, {});
  for (int32_t p = 0; p < len; ++p) scratch[p] = {col[p], val[p]};
  std::stable_sort(scratch.begin(), scratch.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
  int32_t out = 0;
  for (int32_t q = 0; q < len; ++q) {
    if (q > 0 && scratch[q].first == scratch[q - 1].first) {
      val[out - 1] += scratch[q].second;
    } else {
      col[out] = scratch[q].first, val[out] = scratch[q].second;
      ++out;
    }
  }
  return out;
}

// ---- The two-pass read: counts first, then the entries straight into the CSR ----
// The one-pass read parses every chunk into an arena of (row, column, value) entries and scatters them into
// the CSR: 16 bytes of fresh memory per entry that only live between the two (H100 machine, 128^3: a 134 MB
// arena beside a 175 MB CSR, where making fresh memory ready runs at ~8 GB/s). Files sorted by row or column,
// as SciPy and SuiteSparse write them, are read instead in two passes over the text: the first counts each
// chunk's entries per row over the narrow window of rows a chunk of a sorted file touches, the counts give the
// row pointers and each chunk its first slot in every row (chunks in file order), and the second parses
// again and writes each entry into its slot, so every row receives its entries in file order, as in the
// one-pass read: the same CSR bit for bit. A chunk whose rows spread wider than its window may grow, or a
// line only the full parser reads, sends the whole file down the one-pass path, as do errors (which it names).

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

// Just after the first '\n' at or after q, or the end: 8 bytes at a time (a value is a few to 25 bytes, where a
// memchr call costs more than the search).
inline const char* after_line_end(const char* q, const char* end) {
  constexpr uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL, kNewlines = kOnes * '\n';
  while (end - q >= 8) {
    uint64_t w;
    std::memcpy(&w, q, 8);
    const uint64_t x = w ^ kNewlines;  // a '\n' byte becomes 0
    const uint64_t zero = (x - kOnes) & ~x & kHigh;
    if (zero) return q + __builtin_ctzll(zero) / 8 + 1;
    q += 8;
  }
  while (q < end)
    if (*q++ == '\n') return q;
  return end;
}

// Pass 1 on one chunk: lines are told apart as parse_lines does (comment, blank, entry), and an entry's two
// indices read; its value is skipped. False when a line is not plain "i j ..." with indices in range, or the
// window would grow past `max_width` rows, or another chunk gave up.
bool count_rows(const EntryRules& r, std::string_view text, size_t max_width, const std::atomic<bool>& gave_up,
                RowWindow& w) {
  const char* p = text.data();
  const char* const end = p + text.size();
  const int64_t n = r.rows;
  int64_t lo = 0, hi = 0;
  std::vector<int32_t>& count = w.count;
  auto place = [&](int64_t row) {
    if (row < lo || row >= hi) {
      const int64_t width = hi - lo;
      // first 64 rows, then doubling towards the row (tiny chunks, as the tests cut, keep tiny windows)
      const int64_t new_lo = count.empty() ? std::max<int64_t>(0, row - 8)
                             : row < lo    ? std::max<int64_t>(0, std::min(row, lo - width))
                                           : lo;
      const int64_t new_hi = count.empty() ? std::min(n, row + 56)
                             : row >= hi   ? std::min(n, std::max(row + 1, hi + width))
                                           : hi;
      if (static_cast<size_t>(new_hi - new_lo) > max_width || gave_up.load(std::memory_order_relaxed)) return false;
      std::vector<int32_t> grown(static_cast<size_t>(new_hi - new_lo), 0);
      std::copy(count.begin(), count.end(), grown.begin() + (lo - new_lo));
      count.swap(grown);
      lo = new_lo, hi = new_hi;
    }
    ++count[static_cast<size_t>(row - lo)];
    return true;
  };
  int64_t entries = 0;
  long lines = 0;
  while (p < end) {
    ++lines;
    if (*p == '%') {
      const void* nl = std::memchr(p, '\n', static_cast<size_t>(end - p));
      p = nl ? static_cast<const char*>(nl) + 1 : end;
      continue;
    }
    const char* q = p;
    skip_blanks(q, end);
    if (q == end || *q == '\n') {
      p = q == end ? end : q + 1;
      continue;
    }
    uint64_t i = 0, j = 0;
    if (!read_digits(q, end, i) || !skip_blanks(q, end) || !read_digits(q, end, j)) return false;
    if (i < 1 || i > uint64_t(r.rows) || j < 1 || j > uint64_t(r.cols)) return false;
    p = after_line_end(q, end);
    if (!place(static_cast<int64_t>(i) - 1)) return false;
    if (r.mirrored && i != j && !place(static_cast<int64_t>(j) - 1)) return false;
    ++entries;
  }
  w.lo = static_cast<int32_t>(lo);
  w.entries = entries;
  w.lines = lines;
  return true;
}

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

// Row ranges holding about nnz / parts entries each: range t is [bounds[t], bounds[t + 1]).
std::vector<int32_t> rows_by_entries(const CsrMatrix& a, int parts) {
  const int64_t stored = a.row_ptr[a.rows];
  std::vector<int32_t> bounds(static_cast<size_t>(parts) + 1, a.rows);
  bounds[0] = 0;
  for (int t = 1; t < parts; ++t)
    bounds[t] = static_cast<int32_t>(std::lower_bound(a.row_ptr.begin(), a.row_ptr.end(), even_split(stored, parts, t)) -
                                     a.row_ptr.begin());
  for (int t = 1; t <= parts; ++t) bounds[t] = std::max(bounds[t], bounds[t - 1]);
  return bounds;
}

// Rows [lo, hi) of a CSR whose rows hold their entries in file order: each sorted and its duplicates summed,
// its new length in length[i]; adds the entries merged away and the zeros kept (summed in locals: neighbouring
// counters share cache lines).
void sort_and_merge_rows(CsrMatrix& a, int32_t lo, int32_t hi, std::vector<int32_t>& length, int64_t& merged,
                         int64_t& zeros) {
  int32_t* col = a.col_idx.data();
  double* val = a.values.data();
  int64_t merged_here = 0, zeros_here = 0;
  std::vector<std::pair<int32_t, double>> scratch;
  for (int32_t i = lo; i < hi; ++i) {
    const int32_t b = a.row_ptr[i], len = a.row_ptr[i + 1] - b;
    length[i] = sort_and_merge_row(col + b, val + b, len, scratch);
    merged_here += len - length[i];
    for (int32_t p = b; p < b + length[i]; ++p) zeros_here += val[p] == 0.0;
  }
  merged += merged_here, zeros += zeros_here;
}

// Rare: closes the gaps merged duplicates left (row i keeps its first length[i] slots), in place, front to back.
void close_merged_gaps(CsrMatrix& a, const std::vector<int32_t>& length) {
  int32_t out = 0;
  for (int32_t i = 0; i < a.rows; ++i) {
    const int32_t b = a.row_ptr[i];
    if (out != b) {
      std::memmove(a.col_idx.data() + out, a.col_idx.data() + b, sizeof(int32_t) * length[i]);
      std::memmove(a.values.data() + out, a.values.data() + b, sizeof(double) * length[i]);
    }
    a.row_ptr[i] = out;
    out += length[i];
  }
  a.row_ptr[a.rows] = out;
  a.col_idx.resize(static_cast<size_t>(out));
  a.values.resize(static_cast<size_t>(out));
  a.col_idx.shrink_to_fit();
  a.values.shrink_to_fit();
}

// The CSR from the chunks' entries, in parallel and independent of the thread count: every thread owns a
// range of rows and walks all entries in file order, keeping those of its rows (and the mirrors that land
// in them), so each row receives its entries in the serial order; then it sorts and merges its own rows.
// The CSR's column and value arrays, made ready (allocated and populated) while the chunks are parsed: making
// fresh memory ready is a cost of its own (H100 machine, 128^3: 18-25 ms for 175 MB, the same on 1 and 16
// threads), so it runs beside the parse instead of after it, sized for every entry and mirror the header
// allows and cut to the counted size.
struct CsrStorage {
  HostVector<int32_t> col;
  HostVector<double> val;
};

CsrMatrix build_csr(const EntryRules& r, std::vector<Entries>& chunks, int threads, int64_t& duplicates,
                    int64_t& explicit_zeros, ReadProfile& profile, std::future<CsrStorage>* storage) {
  auto t0 = std::chrono::steady_clock::now();
  const int32_t n = static_cast<int32_t>(r.rows);
  CsrMatrix a;
  a.rows = n, a.cols = static_cast<int32_t>(r.cols);
  a.row_ptr.assign(static_cast<size_t>(n) + 1, 0);
  duplicates = explicit_zeros = 0;
  if (n == 0) return a;
  // Row ranges a few times more than threads, taken dynamically: a range's slice of the CSR then stays in
  // cache while its entries arrive (development machine, 2 cores, 128^3: scatter 105 ms with 2 ranges, 42 ms
  // with 4).
  // (One thread reads the file as one chunk: one range then.)
  const int parts = threads == 1 ? 1 : static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(int64_t{threads} * 8, n)));
  // Row lengths: each thread counts the rows of an even range of row numbers.
  parallel_for(parts, threads, [&](int64_t t) {
    const uint32_t lo = static_cast<uint32_t>(even_split(n, parts, t)), span = static_cast<uint32_t>(even_split(n, parts, t + 1)) - lo;
    int32_t* count = a.row_ptr.data() + 1;
    for (const Entries& c : chunks) {
      if (!c.touches(static_cast<int32_t>(lo), static_cast<int32_t>(lo + span))) continue;
      const int32_t* const ci = c.row;
      const int32_t* const cj = c.col;
      for (int64_t e = 0, end = c.count; e < end; ++e) {
        const int32_t i = ci[e], j = cj[e];
        if (static_cast<uint32_t>(i) - lo < span) ++count[i];
        if (r.mirrored && i != j && static_cast<uint32_t>(j) - lo < span) ++count[j];
      }
    }
  });
  for (int32_t i = 0; i < n; ++i) a.row_ptr[i + 1] += a.row_ptr[i];
  const int64_t stored = a.row_ptr[n];
  profile.count_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  if (storage) {
    CsrStorage ready = storage->get();
    if (ready.col.capacity() >= static_cast<size_t>(stored)) a.col_idx = std::move(ready.col);
    if (ready.val.capacity() >= static_cast<size_t>(stored)) a.values = std::move(ready.val);
  }
  a.col_idx.resize(static_cast<size_t>(stored));
  a.values.resize(static_cast<size_t>(stored));
  profile.allocate_ms = ms_since(t0);
  t0 = std::chrono::steady_clock::now();
  // Scatter, sort, merge: each thread a range of rows holding about stored / parts entries.
  const std::vector<int32_t> bounds = rows_by_entries(a, parts);
  std::vector<int32_t> length(static_cast<size_t>(n));
  std::vector<int64_t> merged(static_cast<size_t>(parts), 0), zeros(static_cast<size_t>(parts), 0);
  parallel_for(parts, threads, [&](int64_t t) {
    const int32_t lo = bounds[t], hi = bounds[t + 1];
    if (lo == hi) return;
    const uint32_t span = static_cast<uint32_t>(hi - lo);
    std::vector<int32_t> cursor(a.row_ptr.begin() + lo, a.row_ptr.begin() + hi);
    int32_t* col = a.col_idx.data();
    double* val = a.values.data();
    const double mirror_sign = r.skew ? -1.0 : 1.0;
    int32_t* const next = cursor.data() - lo;  // next[i]: row i's next free slot
    for (const Entries& c : chunks) {
      if (!c.touches(lo, hi)) continue;
      const int32_t* const ci = c.row;  // locals: the stores below cannot make the compiler reload them
      const int32_t* const cj = c.col;
      const double* const cv = c.val;
      const int64_t count = c.count;
      for (int64_t e = 0; e < count; ++e) {
        const int32_t i = ci[e], j = cj[e];
        const double v = r.pattern ? 1.0 : cv[e];
        if (static_cast<uint32_t>(i - lo) < span) {
          const int32_t at = next[i]++;
          col[at] = j, val[at] = v;
        }
        if (r.mirrored && i != j && static_cast<uint32_t>(j - lo) < span) {
          const int32_t at = next[j]++;
          col[at] = i, val[at] = mirror_sign * v;
        }
      }
    }
    sort_and_merge_rows(a, lo, hi, length, merged[t], zeros[t]);
  });
  duplicates = explicit_zeros = 0;
  for (int t = 0; t < parts; ++t) duplicates += merged[t], explicit_zeros += zeros[t];
  profile.scatter_ms = ms_since(t0);
  if (duplicates > 0) close_merged_gaps(a, length);
  return a;
}

// What the parallel parse of a chunk came to.
struct ChunkOutcome {
  int64_t count = 0;    // entries
  long lines = 0;       // lines begun in the chunk
  bool failed = false;  // an error was met; the serial replay names it
};

// Errors and counts in file order: the first chunk that failed, or that holds the entry past the declared
// count, is replayed serially from its true first line, which throws what the serial reader throws; then a
// file with fewer entries than declared is named.
struct ChunkReplay {
  const EntryRules& r;
  const TextSource& text;
  const std::vector<std::pair<size_t, size_t>>& pieces;
  long first_line;  // the line after the size line
  HostVector<char>& scratch;

  void throw_first_error(const std::vector<ChunkOutcome>& outcome) const {
    long line = first_line;
    int64_t read = 0;
    for (size_t c = 0; c < pieces.size(); ++c) {
      if (outcome[c].failed || read + outcome[c].count > r.declared) {
        CheckOnly check;
        long lines = 0;
        parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch), line, r.declared - read, check, lines);
        throw Error(r.source + ": internal error: chunk " + std::to_string(c) + " failed in parallel but not serially");
      }
      read += outcome[c].count;
      line += outcome[c].lines;
    }
    if (read < r.declared)
      throw InputError(r.source, line - 1, "file ends after " + std::to_string(read) + " of " +
                                               std::to_string(r.declared) + " declared entries");
  }
};

// The two-pass read (see above); nothing when the file goes down the one-pass path instead.
std::optional<CsrMatrix> read_two_pass(const EntryRules& r, const TextSource& text,
                                       const std::vector<std::pair<size_t, size_t>>& pieces,
                                       const std::vector<size_t>& estimate, int threads,
                                       std::vector<HostVector<char>>& scratch, std::future<CsrStorage>& storage,
                                       const ChunkReplay& replay, int64_t& duplicates, int64_t& explicit_zeros,
                                       ReadProfile& profile, std::chrono::steady_clock::time_point t_parse) {
  const int64_t chunks = static_cast<int64_t>(pieces.size());
  std::vector<RowWindow> window(pieces.size());
  std::atomic<bool> gave_up{false};
  // A window may span the chunk's own entries (a row-sorted file) and a band of mirrors beside them.
  parallel_for(chunks, threads, [&](int64_t c, int worker) {
    if (gave_up.load(std::memory_order_relaxed)) return;
    const size_t max_width = estimate[c] * (r.mirrored ? 2 : 1) + TwoPassTuning::extra_window_rows;
    if (!count_rows(r, text.range(pieces[c].first, pieces[c].second, scratch[worker]), max_width, gave_up, window[c]))
      gave_up.store(true, std::memory_order_relaxed);
  });
  if (gave_up) return std::nullopt;
  int64_t counted = 0;
  for (const RowWindow& w : window) counted += w.entries;
  if (counted != r.declared) return std::nullopt;  // the one-pass path names the problem

  const auto t_slots = std::chrono::steady_clock::now();
  const int32_t n = static_cast<int32_t>(r.rows);
  CsrMatrix a;
  a.rows = n, a.cols = static_cast<int32_t>(r.cols);
  a.row_ptr.assign(static_cast<size_t>(n) + 1, 0);
  const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(int64_t{threads} * 8, n)));
  // Row lengths, then each chunk's first slot in each of its rows: every thread a range of row numbers,
  // walking the windows that touch it in file order.
  auto for_window_rows = [&](int64_t t, auto&& fn) {
    const int32_t lo = static_cast<int32_t>(even_split(n, parts, t)), hi = static_cast<int32_t>(even_split(n, parts, t + 1));
    for (RowWindow& w : window) {
      if (!w.touches(lo, hi)) continue;
      const int32_t from = std::max(lo, w.lo), to = std::min<int64_t>(hi, int64_t{w.lo} + int64_t(w.count.size()));
      int32_t* count = w.count.data() - w.lo;
      for (int32_t i = from; i < to; ++i) fn(i, count[i]);
    }
  };
  parallel_for(parts, threads, [&](int64_t t) {
    int32_t* length = a.row_ptr.data() + 1;
    for_window_rows(t, [&](int32_t i, int32_t& count) { length[i] += count; });
  });
  for (int32_t i = 0; i < n; ++i) a.row_ptr[i + 1] += a.row_ptr[i];
  parallel_for(parts, threads, [&](int64_t t) {
    std::vector<int32_t> next(a.row_ptr.begin() + even_split(n, parts, t), a.row_ptr.begin() + even_split(n, parts, t + 1));
    int32_t* const slot = next.data() - even_split(n, parts, t);
    for_window_rows(t, [&](int32_t i, int32_t& count) {
      const int32_t here = count;
      count = slot[i];
      slot[i] += here;
    });
  });
  const int64_t stored = a.row_ptr[n];
  profile.count_ms = ms_since(t_slots);
  auto t0 = std::chrono::steady_clock::now();
  if (storage.valid()) {
    CsrStorage ready = storage.get();
    if (ready.col.capacity() >= static_cast<size_t>(stored)) a.col_idx = std::move(ready.col);
    if (ready.val.capacity() >= static_cast<size_t>(stored)) a.values = std::move(ready.val);
  }
  a.col_idx.resize(static_cast<size_t>(stored));
  a.values.resize(static_cast<size_t>(stored));
  profile.allocate_ms = ms_since(t0);

  // Pass 2: every entry into its slot.
  std::vector<ChunkOutcome> outcome(pieces.size());
  std::vector<char> outside(pieces.size(), 0);
  parallel_for(chunks, threads, [&](int64_t c, int worker) {
    RowWindow& w = window[c];
    SlotStore store{a.col_idx.data(), a.values.data(), w.count.data(), static_cast<uint32_t>(w.lo),
                    static_cast<uint32_t>(w.count.size()), r.mirrored, r.skew ? -1.0 : 1.0};
    try {
      outcome[c].count = parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch[worker]), 1, r.declared,
                                     store, outcome[c].lines);
    } catch (const InputError&) {
      outcome[c].failed = true;
    }
    outside[c] = store.outside || (!outcome[c].failed && (outcome[c].count != w.entries || outcome[c].lines != w.lines));
  });
  replay.throw_first_error(outcome);
  for (int64_t c = 0; c < chunks; ++c)
    if (outside[c])
      throw Error(r.source + ": internal error: the two passes over chunk " + std::to_string(c) + " disagree");
  window.clear();
  profile.method = "two passes";
  profile.parse_ms = ms_since(t_parse);

  t0 = std::chrono::steady_clock::now();
  const std::vector<int32_t> bounds = rows_by_entries(a, parts);
  std::vector<int32_t> length(static_cast<size_t>(n));
  std::vector<int64_t> merged(static_cast<size_t>(parts), 0), zeros(static_cast<size_t>(parts), 0);
  parallel_for(parts, threads, [&](int64_t t) { sort_and_merge_rows(a, bounds[t], bounds[t + 1], length, merged[t], zeros[t]); });
  duplicates = explicit_zeros = 0;
  for (int t = 0; t < parts; ++t) duplicates += merged[t], explicit_zeros += zeros[t];
  if (duplicates > 0) close_merged_gaps(a, length);
  profile.scatter_ms = ms_since(t0);
  profile.build_ms = profile.count_ms + profile.allocate_ms + profile.scatter_ms;
  return a;
}

// The whole sparse read: the header serially, the entries chunk by chunk on every thread, then the CSR.
MatrixFile parse_sparse(TextSource& text, const std::string& source, const ReadOptions& opt, ReadProfile profile) {
  const auto t_parse = std::chrono::steady_clock::now();
  HostVector<char> header_scratch;
  Parser ps(header_prefix(text, header_scratch), source);
  int64_t rows = 0, cols = 0, entries = 0;
  MatrixFile out;
  out.info = ps.read_header(rows, cols, entries);
  MatrixMarketInfo& info = out.info;
  if (info.format != "coordinate")
    ps.fail("array (dense) format holds a dense block, not a sparse matrix; use it as a right-hand side");
  EntryRules r;
  r.source = source, r.rows = rows, r.cols = cols, r.declared = entries;
  r.pattern = info.field == "pattern", r.integer = info.field == "integer";
  r.skew = info.symmetry == "skew-symmetric";
  r.mirrored = r.skew || info.symmetry == "symmetric";
  r.min_line_bytes = min_bytes_per_entry(info);
  // Duplicates are summed, so a general file may list more entries than rows x cols positions; only the
  // symmetric storages' count is bounded (each stored entry is one of the triangle's positions, or a duplicate
  // of one, which still needs its own line: bounded by the bytes check below).
  const int64_t stored_max = r.mirrored ? 2 * entries : entries;
  if (stored_max > kInt32Max)
    ps.fail("entry count " + std::to_string(entries) + " does not fit in int32 indexing after expansion");
  const size_t data_begin = ps.reader.position();
  const size_t data_bytes = text.size() - data_begin;
  if (entries > 0 && static_cast<int64_t>(data_bytes) / r.min_line_bytes < entries)
    ps.fail("declares " + std::to_string(entries) + " entries but only " + std::to_string(data_bytes) +
            " bytes follow the size line (file truncated?)");
  const uint64_t needed = host_bytes_for_matrix(rows, cols, entries, r.mirrored);
  const uint64_t available = opt.memory_available ? opt.memory_available : host_memory_available();
  if (needed > available)
    ps.fail("a " + std::to_string(rows) + " x " + std::to_string(cols) + " matrix with " + std::to_string(entries) +
            " entries needs about " + gigabytes(needed) + " of host memory to read and solve, " + gigabytes(available) +
            " available");

  // A thread per 512 KB at most: starting threads costs more than they save on small files (fv1, 0.7 MB:
  // 2.0 ms on one thread, 2.7 ms on two, development machine). An explicit chunk size, as the tests give,
  // keeps the threads asked for.
  const int threads =
      opt.chunk_bytes ? resolve_threads(opt.threads)
                      : static_cast<int>(std::clamp<int64_t>(static_cast<int64_t>(data_bytes / kBytesPerReadThread), 1,
                                                             resolve_threads(opt.threads)));
  // A few chunks per thread balance uneven lines; one chunk when there is one thread.
  const size_t chunk = opt.chunk_bytes ? opt.chunk_bytes
                       : threads == 1  ? data_bytes
                                       : std::max<size_t>(size_t{128} << 10, data_bytes / (size_t(threads) * 8) + 1);
  const auto pieces = cut_at_line_ends(text, data_begin, chunk);
  // Entries a chunk holds, estimated from the mean line length of the first data lines (5% over).
  HostVector<char> sample_scratch;
  const std::string_view sample = text.range(data_begin, std::min(text.size(), data_begin + 65536), sample_scratch);
  const double mean_line =
      double(sample.size()) / double(std::max<int64_t>(1, std::count(sample.begin(), sample.end(), '\n')));
  std::vector<size_t> estimate(pieces.size());
  for (size_t c = 0; c < pieces.size(); ++c)
    estimate[c] = static_cast<size_t>(
        std::min<double>(double(entries) + 1, double(pieces[c].second - pieces[c].first) / mean_line * 1.05 + 64));
  std::vector<HostVector<char>> scratch(static_cast<size_t>(threads));
  std::future<CsrStorage> storage;
  if (threads > 1 && entries > 0)
    storage = std::async(std::launch::async, [capacity = static_cast<size_t>(stored_max)] {
      CsrStorage s;
      s.col.reserve(capacity);
      s.val.reserve(capacity);
      return s;
    });
  const ChunkReplay replay{r, text, pieces, ps.reader.line_no() + 1, scratch[0]};
  profile.threads = threads;
  profile.chunks = static_cast<int64_t>(pieces.size());
  const bool two_passes = opt.passes == ReadPasses::two ||
                          (opt.passes == ReadPasses::automatic && threads >= TwoPassTuning::min_threads);
  if (threads > 1 && entries > 0 && two_passes) {
    if (std::optional<CsrMatrix> a = read_two_pass(r, text, pieces, estimate, threads, scratch, storage, replay,
                                                    info.duplicates_summed, info.explicit_zeros, profile, t_parse)) {
      out.matrix = std::move(*a);
      text.release();
      info.read = profile;
      return out;
    }
  }
  profile.method = "one pass";
  std::vector<Entries> chunks(pieces.size());
  // One arena for every chunk's entries (three allocations, populated on every thread, rather than three per
  // chunk, which contend for the process's memory map), each chunk a slot of its estimated size (a chunk that
  // outgrows its slot moves to arrays of its own).
  std::vector<size_t> slot(pieces.size() + 1, 0);
  for (size_t c = 0; c < pieces.size(); ++c) slot[c + 1] = slot[c] + estimate[c];
  HostVector<int32_t> arena_row(slot.back()), arena_col(slot.back());
  HostVector<double> arena_val(r.pattern ? 0 : slot.back());
  for (size_t c = 0; c < pieces.size(); ++c) {
    chunks[c].row = arena_row.data() + slot[c], chunks[c].col = arena_col.data() + slot[c];
    chunks[c].val = r.pattern ? nullptr : arena_val.data() + slot[c];
    chunks[c].capacity = slot[c + 1] - slot[c];
  }
  std::vector<ChunkOutcome> outcome(pieces.size());
  parallel_for(static_cast<int64_t>(pieces.size()), threads, [&](int64_t c, int worker) {
    try {
      ArenaStore store(r, chunks[c]);
      outcome[c].count = chunks[c].count =
          parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch[worker]), 1, entries, store, outcome[c].lines);
      store.finish();
    } catch (const InputError&) {
      chunks[c] = Entries{};
      outcome[c].failed = true;
    }
  });
  replay.throw_first_error(outcome);
  scratch.clear();
  text.release();
  profile.parse_ms = ms_since(t_parse);
  const auto t_build = std::chrono::steady_clock::now();
  out.matrix = build_csr(r, chunks, threads, info.duplicates_summed, info.explicit_zeros, profile,
                         storage.valid() ? &storage : nullptr);
  chunks.clear();
  profile.build_ms = ms_since(t_build);
  info.read = profile;
  return out;
}

}  // namespace

MatrixFile parse_matrix_market(std::string_view text, const std::string& source, const ReadOptions& options) {
  ReadProfile profile;
  profile.access = "memory";
  profile.file_bytes = profile.text_bytes = text.size();
  TextSource in_memory(text);
  return parse_sparse(in_memory, source, options, profile);
}

MatrixFile read_matrix_market(const std::string& path, const ReadOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  ReadProfile profile;
  TextSource file(path, uint64_t{1} << 35, resolve_threads(options.threads), profile);
  profile.text_bytes = file.size();
  profile.load_ms = ms_since(t0);
  return parse_sparse(file, path, options, profile);
}

DenseFile parse_dense_matrix_market(std::string_view text, const std::string& source) {
  Parser ps(text, source);
  int64_t rows = 0, cols = 0, entries = 0;
  DenseFile out;
  out.info = ps.read_header(rows, cols, entries);
  if (out.info.format == "coordinate") {
    MatrixFile m = parse_matrix_market(text, source);
    out.block = DenseBlock(m.matrix.rows, m.matrix.cols, 0.0);
    for (int32_t i = 0; i < m.matrix.rows; ++i)
      for (int32_t p = m.matrix.row_ptr[i]; p < m.matrix.row_ptr[i + 1]; ++p)
        out.block.at(i, m.matrix.col_idx[p]) = m.matrix.values[p];
    out.info = m.info;
    return out;
  }
  if (out.info.symmetry != "general") ps.fail("only general storage is supported for array format");
  if (rows * cols > kInt32Max * int64_t{64}) ps.fail("dense block too large");
  if (entries > 0 && static_cast<int64_t>(ps.reader.remaining_bytes()) / min_bytes_per_entry(out.info) < entries)
    ps.fail("declares " + std::to_string(entries) + " values but only " +
            std::to_string(ps.reader.remaining_bytes()) + " bytes follow the size line (file truncated?)");
  out.block = DenseBlock(static_cast<int32_t>(rows), static_cast<int32_t>(cols));
  const bool integer = out.info.field == "integer";
  std::string_view line, tok[2];
  int64_t read = 0;
  while (ps.reader.next(line)) {
    if (blank(line) || line[0] == '%') continue;
    if (read == entries) ps.fail("more values than the " + std::to_string(entries) + " declared");
    if (tokenize(line, tok, 1) != 1) ps.fail("expected one value per line, got '" + excerpt(line) + "'");
    const double v = integer ? static_cast<double>(ps.parse_int(tok[0], "integer value")) : ps.parse_real(tok[0]);
    // Array format is column-major in the file; the block is row-major.
    out.block.at(static_cast<int32_t>(read % rows), static_cast<int32_t>(read / rows)) = v;
    ++read;
  }
  if (read < entries)
    throw InputError(source, ps.reader.line_no(),
                     "file ends after " + std::to_string(read) + " of " + std::to_string(entries) + " declared values");
  return out;
}

DenseFile read_dense_matrix_market(const std::string& path) {
  return parse_dense_matrix_market(load_file_text(path), path);
}

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
