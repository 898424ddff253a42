#include "matrix_market.hpp"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>

#include "error.hpp"

namespace spcg {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

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

struct Parser {
  std::string source;
  LineReader reader;
  Parser(std::string_view text, std::string src) : source(std::move(src)), reader(text) {}

  [[noreturn]] void fail(const std::string& problem) const { throw InputError(source, reader.line_no(), problem); }

  int64_t parse_int(std::string_view t, const char* what) const {
    if (!t.empty() && t[0] == '+') t.remove_prefix(1);
    int64_t v = 0;
    auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec == std::errc::result_out_of_range) fail(std::string(what) + " '" + excerpt(t) + "' is too large");
    if (ec != std::errc() || p != t.data() + t.size())
      fail(std::string("non-numeric ") + what + " '" + excerpt(t) + "'");
    return v;
  }

  double parse_real(std::string_view t) const {
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

std::string load_file_text(const std::string& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(path, 0, "no such file");
  if (fs::is_directory(st)) throw InputError(path, 0, "is a directory, expected a Matrix Market file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, 0, "cannot open file for reading");
  std::string raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw InputError(path, 0, "read error");
  if (raw.size() >= 2 && static_cast<unsigned char>(raw[0]) == 0x1f && static_cast<unsigned char>(raw[1]) == 0x8b) {
    z_stream zs{};
    if (inflateInit2(&zs, 15 + 32) != Z_OK) throw InputError(path, 0, "cannot initialise gzip decoder");
    std::string out;
    out.resize(std::min<uint64_t>(max_bytes, std::max<uint64_t>(raw.size() * 4, 1 << 16)));
    zs.next_in = reinterpret_cast<Bytef*>(raw.data());
    zs.avail_in = static_cast<uInt>(raw.size());
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
  if (raw.size() > max_bytes) throw InputError(path, 0, "file larger than " + std::to_string(max_bytes) + " bytes");
  return raw;
}

MatrixFile parse_matrix_market(std::string_view text, const std::string& source) {
  Parser ps(text, source);
  int64_t rows = 0, cols = 0, entries = 0;
  MatrixFile out;
  out.info = ps.read_header(rows, cols, entries);
  MatrixMarketInfo& info = out.info;
  if (info.format != "coordinate")
    ps.fail("array (dense) format holds a dense block, not a sparse matrix; use it as a right-hand side");
  const bool pattern = info.field == "pattern";
  const bool integer = info.field == "integer";
  const bool sym = info.symmetry == "symmetric";
  const bool skew = info.symmetry == "skew-symmetric";
  const int64_t max_entries = sym || skew ? rows * (rows + 1) / 2 : rows * cols;
  if (entries > max_entries)
    ps.fail("declares " + std::to_string(entries) + " entries, more than a " + std::to_string(rows) + " x " +
            std::to_string(cols) + " matrix can hold");
  const int64_t stored_max = (sym || skew) ? 2 * entries : entries;
  if (stored_max > kInt32Max)
    ps.fail("entry count " + std::to_string(entries) + " does not fit in int32 indexing after expansion");
  if (entries > 0 && static_cast<int64_t>(ps.reader.remaining_bytes()) / min_bytes_per_entry(info) < entries)
    ps.fail("declares " + std::to_string(entries) + " entries but only " +
            std::to_string(ps.reader.remaining_bytes()) + " bytes follow the size line (file truncated?)");

  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  ti.reserve(stored_max);
  tj.reserve(stored_max);
  tv.reserve(stored_max);
  std::string_view line;
  std::string_view tok[4];
  const int want = pattern ? 2 : 3;
  int64_t read = 0;
  while (ps.reader.next(line)) {
    if (blank(line) || line[0] == '%') continue;
    if (read == entries)
      ps.fail("more entries than the " + std::to_string(entries) + " declared on the size line");
    const int nt = tokenize(line, tok, 3);
    // Indices first: a 0-based or out-of-range file is named as such even when its field count is also off.
    const int64_t i = nt >= 1 ? ps.parse_int(tok[0], "row index") : 0;
    const int64_t j = nt >= 2 ? ps.parse_int(tok[1], "column index") : 0;
    if (nt >= 2 && (i < 1 || i > rows || j < 1 || j > cols))
      ps.fail("index (" + std::to_string(i) + ", " + std::to_string(j) + ") out of range for a " +
              std::to_string(rows) + " x " + std::to_string(cols) + " matrix (indices are 1-based)" +
              (i == 0 || j == 0 ? "; zero index: file looks 0-based" : ""));
    if (nt != want) {
      if (nt < want && ps.reader.last_line_unterminated())
        ps.fail("truncated last line '" + excerpt(line) + "'");
      ps.fail("expected " + std::to_string(want) + " fields ('row col" + std::string(pattern ? "" : " value") +
              "'), got " + (nt > want ? "more" : std::to_string(nt)) + " in '" + excerpt(line) + "'");
    }
    double v = 1.0;
    if (!pattern) v = integer ? static_cast<double>(ps.parse_int(tok[2], "integer value")) : ps.parse_real(tok[2]);
    if (skew && i == j && v != 0.0) ps.fail("nonzero diagonal entry in a skew-symmetric matrix");
    ti.push_back(static_cast<int32_t>(i - 1));
    tj.push_back(static_cast<int32_t>(j - 1));
    tv.push_back(v);
    if ((sym || skew) && i != j) {
      ti.push_back(static_cast<int32_t>(j - 1));
      tj.push_back(static_cast<int32_t>(i - 1));
      tv.push_back(skew ? -v : v);
    }
    ++read;
  }
  if (read < entries)
    throw InputError(source, ps.reader.line_no(), "file ends after " + std::to_string(read) + " of " +
                                                      std::to_string(entries) + " declared entries");
  out.matrix = csr_from_triplets(static_cast<int32_t>(rows), static_cast<int32_t>(cols), ti, tj, tv,
                                 &info.duplicates_summed);
  for (double v : out.matrix.values) info.explicit_zeros += (v == 0.0);
  return out;
}

MatrixFile read_matrix_market(const std::string& path) { return parse_matrix_market(load_file_text(path), path); }

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

void write_matrix_market(const std::string& path, const CsrMatrix& a, const std::vector<std::string>& comments) {
  auto f = open_for_write(path);
  std::fprintf(f.get(), "%%%%MatrixMarket matrix coordinate real general\n");
  write_comments(f.get(), comments);
  std::fprintf(f.get(), "%d %d %lld\n", a.rows, a.cols, static_cast<long long>(a.nnz()));
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p)
      std::fprintf(f.get(), "%d %d %.17g\n", i + 1, a.col_idx[p] + 1, a.values[p]);
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
