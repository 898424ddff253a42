// The Matrix Market read, start to end: the header serially, then the entries chunk by chunk on every thread
// (mm_parse.cpp) and the CSR in one pass or two (mm_build.cpp), from text a file gives (mm_input.cpp) or a
// caller holds. The result is the same bit for bit, and an error names the same line, on every thread count:
// every chunk is parsed on its own (its first line number unknown until the chunks before it are counted), and
// the first chunk in file order that failed, or that holds an entry past the declared count, is parsed again
// serially from its true first line, which throws what a one-thread read throws (ChunkReplay). Why there are
// two ways to build the CSR: mm_build.cpp (the two-pass read) and TwoPassTuning (mm_internal.hpp), which also
// says when each wins. Dense blocks (array format) are read serially here too.
#include "spcg/matrix_market.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <optional>

#include "spcg/error.hpp"
#include "sparse/mm_internal.hpp"
#include "sparse/parallel.hpp"

namespace spcg {

using namespace mm;

namespace {

constexpr size_t kBytesPerReadThread = size_t{512} << 10;

std::string gigabytes(uint64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f GB", double(bytes) / 1e9);
  return b;
}

// Bytes [begin, end) of the data lines that part `part` of a file reads: equal shares of [data_begin, size), each
// boundary moved to the end of the line that holds it (neighbouring parts compute the same boundary).
std::pair<size_t, size_t> part_bytes(const TextSource& text, size_t data_begin, const FilePart& part) {
  if (part.count < 1 || part.index < 0 || part.index >= part.count)
    throw Error("read part " + std::to_string(part.index) + " of " + std::to_string(part.count));
  HostVector<char> scratch;
  const size_t bytes = text.size() - data_begin;
  auto boundary = [&](int i) {
    if (i == 0) return data_begin;
    if (i == part.count) return text.size();
    const size_t nominal = data_begin + static_cast<size_t>(static_cast<unsigned __int128>(bytes) * static_cast<unsigned>(i) /
                                                              static_cast<unsigned>(part.count));
    return nominal == data_begin ? data_begin : text.line_end_from(nominal - 1, scratch);
  };
  return {boundary(part.index), boundary(part.index + 1)};
}

// The whole sparse read: the header serially, the entries chunk by chunk on every thread, then the CSR. A part
// (opt.part) reads its share of the data lines only; with `count_check`, it instead replays its share's count
// against the declared one (check_part_entries) and returns nothing.
MatrixFile parse_sparse(TextSource& text, const std::string& source, const ReadOptions& opt, ReadProfile profile,
                        const int64_t* count_check_entries_before = nullptr) {
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
  const auto [part_begin, part_end] = part_bytes(text, data_begin, opt.part);
  const size_t data_bytes = part_end - part_begin;
  if (entries > 0 && static_cast<int64_t>(text.size() - data_begin) / r.min_line_bytes < entries)
    ps.fail("declares " + std::to_string(entries) + " entries but only " + std::to_string(data_bytes) +
            " bytes follow the size line (file truncated?)");
  // a part holds about its share of the entries
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
  const auto pieces = cut_at_line_ends(text, part_begin, chunk, part_end);
  // Entries a chunk holds, estimated from the mean line length of the first data lines (5% over).
  HostVector<char> sample_scratch;
  const std::string_view sample = text.range(part_begin, std::min(part_end, part_begin + 65536), sample_scratch);
  const double mean_line =
      double(sample.size()) / double(std::max<int64_t>(1, std::count(sample.begin(), sample.end(), '\n')));
  std::vector<size_t> estimate(pieces.size());
  for (size_t c = 0; c < pieces.size(); ++c)
    estimate[c] = static_cast<size_t>(
        std::min<double>(double(entries) + 1, double(pieces[c].second - pieces[c].first) / mean_line * 1.05 + 64));
  std::vector<HostVector<char>> scratch(static_cast<size_t>(threads));
  if (count_check_entries_before) {  // a part's share of the declared count: its lines parsed and counted again
    std::vector<ChunkOutcome> outcome(pieces.size());
    parallel_for(static_cast<int64_t>(pieces.size()), threads, [&](int64_t c, int worker) {
      try {
        CheckOnly check;
        outcome[c].count = parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch[worker]), 1,
                                       std::numeric_limits<int64_t>::max() / 2, check, outcome[c].lines);
      } catch (const InputError&) {
        outcome[c].failed = true;
      }
    });
    ChunkReplay check{r, text, pieces, 0, scratch[0], part_begin};
    check.entries_before = *count_check_entries_before;
    check.missing_checked = opt.part.index == opt.part.count - 1;
    check.throw_first_error(outcome);  // throws where this part holds the entry past the count, or ends short
    return out;
  }
  // a part: its chunks parse without the declared count (the whole file's), which the ranks check together
  EntryRules part_rules = r;
  if (!opt.part.whole()) part_rules.declared = std::numeric_limits<int64_t>::max() / 2;
  const EntryRules& chunk_rules = opt.part.whole() ? r : part_rules;
  std::future<CsrStorage> storage;
  if (threads > 1 && entries > 0)
    storage = std::async(std::launch::async, [capacity = static_cast<size_t>(stored_max)] {
      CsrStorage s;
      s.col.reserve(capacity);
      s.val.reserve(capacity);
      return s;
    });
  ChunkReplay replay{chunk_rules, text, pieces, opt.part.whole() ? ps.reader.line_no() + 1 : 0, scratch[0], part_begin};
  replay.excess_checked = replay.missing_checked = opt.part.whole();
  profile.threads = threads;
  profile.chunks = static_cast<int64_t>(pieces.size());
  const bool two_passes = opt.passes == ReadPasses::two ||
                          (opt.passes == ReadPasses::automatic && threads >= TwoPassTuning::min_threads);
  if (threads > 1 && entries > 0 && two_passes) {
    if (std::optional<CsrMatrix> a = read_two_pass(chunk_rules, text, pieces, estimate, threads, scratch, storage, replay,
                                                    info.duplicates_summed, info.explicit_zeros, info.part_entries,
                                                    profile, t_parse)) {
      out.matrix = std::move(*a);
      text.release();
      info.read = profile;
      return out;
    }
  }
  out.matrix = read_one_pass(chunk_rules, text, pieces, estimate, threads, scratch, storage, replay,
                             info.duplicates_summed, info.explicit_zeros, info.part_entries, profile, t_parse);
  info.read = profile;
  return out;
}

}  // namespace

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

void check_part_entries(const std::string& path, const ReadOptions& options, int64_t entries_before, int64_t total) {
  ReadProfile profile;
  TextSource file(path, uint64_t{1} << 35, resolve_threads(options.threads), profile);
  HostVector<char> header_scratch;
  Parser ps(header_prefix(file, header_scratch), path);
  int64_t rows = 0, cols = 0, declared = 0;
  ps.read_header(rows, cols, declared);
  if (total == declared || (total > declared && entries_before > declared)) return;  // not this part's to name
  parse_sparse(file, path, options, profile, &entries_before);
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

}  // namespace spcg
