// Parsing the text: tokens and numbers, the header, the data lines chunk by chunk (the entries' fast path
// and the serial reader's own line logic), pass 1 of the two-pass read, cutting the text at line ends, and the
// serial replay that names the first error in file order.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "sparse/mm_internal.hpp"

namespace spcg::mm {
namespace {

std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

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

}  // namespace

std::string excerpt(std::string_view s, size_t max_len) {
  std::string r;
  for (char c : s.substr(0, max_len)) r += (std::isprint(static_cast<unsigned char>(c)) ? c : '?');
  if (s.size() > max_len) r += "...";
  return r;
}

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

MatrixMarketInfo Parser::read_header(int64_t& rows, int64_t& cols, int64_t& entries) {
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

int64_t min_bytes_per_entry(const MatrixMarketInfo& info) {
  if (info.format == "array") return 2;
  return info.field == "pattern" ? 4 : 6;
}

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

template int64_t parse_lines<CheckOnly>(const EntryRules&, std::string_view, long, int64_t, CheckOnly&, long&);
template int64_t parse_lines<ArenaStore>(const EntryRules&, std::string_view, long, int64_t, ArenaStore&, long&);
template int64_t parse_lines<SlotStore>(const EntryRules&, std::string_view, long, int64_t, SlotStore&, long&);

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

std::vector<std::pair<size_t, size_t>> cut_at_line_ends(const TextSource& text, size_t begin, size_t chunk, size_t end) {
  std::vector<std::pair<size_t, size_t>> pieces;
  HostVector<char> scratch;
  if (end == 0 || end > text.size()) end = text.size();
  for (size_t at = begin; at < end;) {
    const size_t nominal = at + std::max<size_t>(chunk, 1);
    const size_t stop = nominal >= end ? end : std::min(end, text.line_end_from(nominal - 1, scratch));
    pieces.emplace_back(at, stop);
    at = stop;
  }
  return pieces;
}

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

void ChunkReplay::throw_first_error(const std::vector<ChunkOutcome>& outcome) const {
  // a part's first line: the lines before its first byte (only on the way to an error, or a part's count check)
  auto line_of_first_piece = [&] {
    if (first_line > 0) return first_line;
    long newlines = 0;
    for (size_t at = 0; at < first_byte; at += size_t{1} << 24) {
      const std::string_view s = text.range(at, std::min(first_byte, at + (size_t{1} << 24)), scratch);
      newlines += static_cast<long>(std::count(s.begin(), s.end(), '\n'));
    }
    return newlines + 1;
  };
  long lines_before = 0;  // lines of the chunks before c
  int64_t read = entries_before;
  const int64_t allowed = excess_checked ? r.declared : std::numeric_limits<int64_t>::max() / 2;
  for (size_t c = 0; c < pieces.size(); ++c) {
    if (outcome[c].failed || read + outcome[c].count > allowed) {
      CheckOnly check;
      long lines = 0;
      parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch), line_of_first_piece() + lines_before,
                  allowed - read, check, lines);
      throw Error(r.source + ": internal error: chunk " + std::to_string(c) + " failed in parallel but not serially");
    }
    read += outcome[c].count;
    lines_before += outcome[c].lines;
  }
  if (missing_checked && read < r.declared)
    throw InputError(r.source, line_of_first_piece() + lines_before - 1, "file ends after " + std::to_string(read) + " of " +
                                                                          std::to_string(r.declared) + " declared entries");
}

}  // namespace spcg::mm
