// The CSR from the parsed entries, in one pass (entries into an arena, then scattered by row) or two (rows
// counted, then the entries parsed again straight into their slots); both give the same CSR bit for bit, and
// on every thread count.
#include <algorithm>
#include <cstring>

#include "sparse/mm_internal.hpp"
#include "sparse/parallel.hpp"

namespace spcg::mm {
namespace {

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
    RowOffset* count = a.row_ptr.data() + 1;
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

}  // namespace

// One pass: the arena, every chunk parsed into its slot, then build_csr.
CsrMatrix read_one_pass(const EntryRules& r, TextSource& text, const std::vector<std::pair<size_t, size_t>>& pieces,
                        const std::vector<size_t>& estimate, int threads, std::vector<HostVector<char>>& scratch,
                        std::future<CsrStorage>& storage, const ChunkReplay& replay, int64_t& duplicates,
                        int64_t& explicit_zeros, int64_t& entries, ReadProfile& profile,
                        std::chrono::steady_clock::time_point t_parse) {
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
          parse_lines(r, text.range(pieces[c].first, pieces[c].second, scratch[worker]), 1, r.declared, store,
                      outcome[c].lines);
      store.finish();
    } catch (const InputError&) {
      chunks[c] = Entries{};
      outcome[c].failed = true;
    }
  });
  replay.throw_first_error(outcome);
  entries = 0;
  for (const ChunkOutcome& o : outcome) entries += o.count;
  scratch.clear();
  text.release();
  profile.parse_ms = ms_since(t_parse);
  const auto t_build = std::chrono::steady_clock::now();
  CsrMatrix a =
      build_csr(r, chunks, threads, duplicates, explicit_zeros, profile, storage.valid() ? &storage : nullptr);
  chunks.clear();
  profile.build_ms = ms_since(t_build);
  return a;
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
std::optional<CsrMatrix> read_two_pass(const EntryRules& r, const TextSource& text,
                                       const std::vector<std::pair<size_t, size_t>>& pieces,
                                       const std::vector<size_t>& estimate, int threads,
                                       std::vector<HostVector<char>>& scratch, std::future<CsrStorage>& storage,
                                       const ChunkReplay& replay, int64_t& duplicates, int64_t& explicit_zeros,
                                       int64_t& entries, ReadProfile& profile,
                                       std::chrono::steady_clock::time_point t_parse) {
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
  if (replay.excess_checked && counted != r.declared) return std::nullopt;  // the one-pass path names the problem
  // (a part's count is the whole file's to check: file_share)
  entries = counted;

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
    RowOffset* length = a.row_ptr.data() + 1;
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

}  // namespace spcg::mm
