// A Matrix Market file parsed once across the ranks (spcg/distributed.hpp, file_share): each rank has read one
// byte share of the data lines (ReadOptions::part) into a matrix of every row holding that share's entries; here
// the ranks check the entry count together, take partition_by_work's partition of the whole matrix from summed
// row work (two small sums instead of a sum of every row's length), send each rank its rows, merge a row's
// entries from the parts in file order, and agree on the halo plan (each rank's receives become its peers'
// sends, whatever the pattern). Every host array travels through the device: the communicator moves device
// buffers.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/communicator.hpp"
#include "kernels/device_array.hpp"
#include "solver/solver.hpp"
#include "sparse/parallel.hpp"
#include "sparse/timing.hpp"
#include "spcg/distributed.hpp"
#include "spcg/error.hpp"

namespace spcg {
namespace {

// The partition's first sum: row work summed over buckets of rows, this many at most (then the rows of the
// buckets that hold a boundary, one more sum): 32 KB of sums whatever the rows.
constexpr int64_t kPartitionBuckets = 4096;

// fn(first, last) over [0, n) in a few ranges per thread (parallel_for's task counter would otherwise be taken once
// per row: contended, it cost more than the rows' work).
template <class Fn>
void for_ranges(int64_t n, Fn&& fn) {
  const int64_t parts = n >= (1 << 14) ? 8 * int64_t{hardware_threads()} : 1;
  parallel_for(parts, hardware_threads(), [&](int64_t t) { fn(even_split(n, parts, t), even_split(n, parts, t + 1)); });
}

// int32 arrays travel two to a double (its bits; the transfers copy bytes).
size_t doubles_for_int32s(size_t n) { return (n + 1) / 2; }
size_t doubles_for_int64s(size_t n) { return n; }

// Per-peer messages laid out one after another in one device buffer, and the transfers that move them.
struct Messages {
  std::vector<double> host;
  std::vector<size_t> offset, count;  // by peer, in doubles
  explicit Messages(int ranks) : offset(static_cast<size_t>(ranks), 0), count(static_cast<size_t>(ranks), 0) {}
  void lay_out() {
    size_t at = 0;
    for (size_t q = 0; q < count.size(); ++q) offset[q] = at, at += count[q];
    host.assign(at, 0.0);
  }
  double* at(int q) { return host.data() + offset[static_cast<size_t>(q)]; }
  const double* at(int q) const { return host.data() + offset[static_cast<size_t>(q)]; }
};

// Every rank's messages to every other, at once: `out` filled by the caller, `in` laid out from its counts.
void exchange_messages(Communicator& comm, const Messages& out, Messages& in) {
  DeviceArray<double> send(out.host, "file rows sent"), receive(in.host.size(), "file rows received");
  std::vector<Transfer> sends, receives;
  for (int q = 0; q < comm.size(); ++q) {
    const size_t qi = static_cast<size_t>(q);
    if (q == comm.rank()) continue;
    if (out.count[qi]) sends.push_back({q, send.data() + out.offset[qi], out.count[qi]});
    if (in.count[qi]) receives.push_back({q, receive.data() + in.offset[qi], in.count[qi]});
  }
  comm.exchange(sends, receives, 0);
  comm.wait(0);
  in.host = receive.download();
}

// counts[r * ranks + q]: what rank r sends rank q, from each rank's own row of them (one sum).
std::vector<int64_t> all_counts(Communicator& comm, const std::vector<int64_t>& mine) {
  const size_t n = static_cast<size_t>(comm.size());
  std::vector<double> all(n * n, 0.0);
  for (size_t q = 0; q < n; ++q) all[static_cast<size_t>(comm.rank()) * n + q] = static_cast<double>(mine[q]);
  sum_over_ranks(comm, all);
  return std::vector<int64_t>(all.begin(), all.end());
}

// partition_by_work's boundaries (work = stored entries + rows) from the parts' row lengths: bucket sums first,
// then the rows of the buckets a boundary falls in.
RowPartition partition_from_parts(Communicator& comm, const CsrMatrix& part) {
  const int ranks = comm.size();
  const int64_t n = part.rows;
  const int64_t per_bucket = std::max<int64_t>(1, (n + kPartitionBuckets - 1) / kPartitionBuckets);
  const int64_t buckets = (n + per_bucket - 1) / per_bucket;
  // a row's work is its entries in every part, plus one for the row itself (added once, after the sums)
  auto work_of = [&](int64_t i) { return int64_t{part.row_ptr[i + 1] - part.row_ptr[i]}; };
  std::vector<double> bucket_work(static_cast<size_t>(buckets), 0.0);
  parallel_for(buckets, hardware_threads(), [&](int64_t bucket) {
    int64_t w = 0;
    for (int64_t i = bucket * per_bucket; i < std::min(n, (bucket + 1) * per_bucket); ++i) w += work_of(i);
    bucket_work[static_cast<size_t>(bucket)] = static_cast<double>(w);
  });
  sum_over_ranks(comm, bucket_work);
  std::vector<int64_t> before(static_cast<size_t>(buckets) + 1, 0);  // work before each bucket
  for (int64_t b = 0; b < buckets; ++b)
    before[b + 1] = before[b] + static_cast<int64_t>(bucket_work[static_cast<size_t>(b)]) + (std::min(n, (b + 1) * per_bucket) - b * per_bucket);
  const int64_t total = before.back();
  // the bucket each boundary falls in (the first whose end reaches the target), then those buckets' rows summed
  std::vector<int64_t> target(static_cast<size_t>(ranks), 0), in_bucket(static_cast<size_t>(ranks), -1), wanted;
  for (int t = 1; t < ranks; ++t) {
    target[t] = total * t / ranks;
    if (target[t] <= 0) continue;  // row 0
    in_bucket[t] = std::lower_bound(before.begin() + 1, before.end(), target[t]) - (before.begin() + 1);
    if (wanted.empty() || wanted.back() != in_bucket[t]) wanted.push_back(in_bucket[t]);
  }
  std::vector<double> rows_work;
  for (int64_t b : wanted)
    for (int64_t i = b * per_bucket; i < std::min(n, (b + 1) * per_bucket); ++i) rows_work.push_back(static_cast<double>(work_of(i)));
  sum_over_ranks(comm, rows_work);
  for (double& w : rows_work) w += 1;
  RowPartition p;
  p.first_row.assign(static_cast<size_t>(ranks) + 1, n);
  p.first_row[0] = 0;
  for (int t = 1; t < ranks; ++t) {
    if (in_bucket[t] < 0) {
      p.first_row[t] = 0;
      continue;
    }
    const int64_t b = in_bucket[t];
    size_t at = 0;  // this bucket's first row in rows_work
    for (int64_t w : wanted) {
      if (w == b) break;
      at += static_cast<size_t>(std::min(n, (w + 1) * per_bucket) - w * per_bucket);
    }
    // the first row i of the bucket with work_before(i) >= target (its end when none before it)
    int64_t i = b * per_bucket, work = before[b];
    const int64_t end = std::min(n, (b + 1) * per_bucket);
    while (i < end && work < target[t]) work += static_cast<int64_t>(rows_work[at++]), ++i;
    p.first_row[t] = i;
  }
  return p;
}

}  // namespace

FileShare file_share(MatrixFile part, const std::string& path, const ReadOptions& options, Communicator& comm) {
  const auto t0 = std::chrono::steady_clock::now();
  FileShare out_share;
  auto t_step = t0;
  auto step_done = [&](const char* name) {  // the report's lines under "file rows to their ranks"
    out_share.steps.push_back({name, ms_since(t_step)});
    t_step = std::chrono::steady_clock::now();
  };
  const int me = comm.rank(), ranks = comm.size();
  if (options.part.index != me || options.part.count != ranks)
    throw UsageError("file_share: rank " + std::to_string(me) + " of " + std::to_string(ranks) + " read part " +
                     std::to_string(options.part.index) + " of " + std::to_string(options.part.count));
  CsrMatrix& a = part.matrix;
  if (a.rows != a.cols)  // every rank read the header: every rank refuses
    throw InputError(path, 0, "matrix is " + std::to_string(a.rows) + " x " + std::to_string(a.cols) + ", CG needs a square matrix");

  // 1. the entry count, checked over the parts (exactly one part names a wrong one, with the whole read's line)
  std::vector<double> counts(static_cast<size_t>(ranks) + 1, 0.0);
  counts[static_cast<size_t>(me)] = static_cast<double>(part.info.part_entries);
  counts[static_cast<size_t>(ranks)] = static_cast<double>(part.info.duplicates_summed);
  sum_over_ranks(comm, counts);
  int64_t total = 0, before = 0;
  for (int r = 0; r < ranks; ++r) {
    if (r == me) before = total;
    total += static_cast<int64_t>(counts[static_cast<size_t>(r)]);
  }
  agree_over_ranks(&comm, [&] { check_part_entries(path, options, before, total); });
  if (total != part.info.declared_entries)
    throw Error(path + ": internal error: the parts hold " + std::to_string(total) + " entries of " +
                std::to_string(part.info.declared_entries) + " declared, and none named it");

  step_done("entry count");
  // 2. partition_by_work's partition of the whole matrix
  const RowPartition p = partition_from_parts(comm, a);
  const int32_t b = static_cast<int32_t>(p.begin(me)), e = static_cast<int32_t>(p.end(me)), rows = e - b;

  step_done("partition");
  // 3. each rank its rows of every part: per peer, the lengths of its rows, then their columns, then the values
  std::vector<int64_t> entries_to(static_cast<size_t>(ranks), 0);
  for (int q = 0; q < ranks; ++q)
    if (q != me) entries_to[q] = int64_t{a.row_ptr[p.end(q)]} - a.row_ptr[p.begin(q)];
  const std::vector<int64_t> entries_of = all_counts(comm, entries_to);  // [sender * ranks + receiver]
  auto message_doubles = [&](int64_t peer_rows, int64_t entries) {
    return entries == 0 ? size_t{0}
                        : doubles_for_int32s(static_cast<size_t>(peer_rows)) + doubles_for_int32s(static_cast<size_t>(entries)) +
                              static_cast<size_t>(entries);
  };
  Messages out(ranks), in(ranks);
  for (int q = 0; q < ranks; ++q) {
    if (q == me) continue;
    out.count[q] = message_doubles(p.end(q) - p.begin(q), entries_to[q]);
    in.count[q] = message_doubles(rows, entries_of[static_cast<size_t>(q) * ranks + me]);
  }
  out.lay_out(), in.lay_out();
  for (int q = 0; q < ranks; ++q) {
    if (!out.count[q]) continue;
    const int32_t qb = static_cast<int32_t>(p.begin(q)), qe = static_cast<int32_t>(p.end(q));
    const size_t len_doubles = doubles_for_int32s(static_cast<size_t>(qe - qb)), nnz = static_cast<size_t>(entries_to[q]);
    auto* lengths = reinterpret_cast<int32_t*>(out.at(q));
    for (int32_t i = qb; i < qe; ++i) lengths[i - qb] = a.row_ptr[i + 1] - a.row_ptr[i];
    std::memcpy(out.at(q) + len_doubles, a.col_idx.data() + a.row_ptr[qb], nnz * sizeof(int32_t));
    std::memcpy(out.at(q) + len_doubles + doubles_for_int32s(nnz), a.values.data() + a.row_ptr[qb], nnz * sizeof(double));
  }
  exchange_messages(comm, out, in);
  out = Messages(ranks);

  step_done("rows exchanged");
  // 4. this rank's rows: a row's entries from the parts in rank order (file order), sorted by column (stable),
  // duplicates summed in that order; a row that one part holds whole (most rows) is copied as it is
  struct Source {
    const int32_t* cols = nullptr;
    const double* values = nullptr;
    std::vector<int64_t> start;  // each of this rank's rows' first entry
  };
  std::vector<Source> sources;
  for (int r = 0; r < ranks; ++r) {
    Source s;
    s.start.resize(static_cast<size_t>(rows) + 1, 0);
    if (r == me) {
      s.cols = a.col_idx.data(), s.values = a.values.data();
      for_ranges(rows + 1, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) s.start[i] = a.row_ptr[b + i];
      });
    } else {
      const int64_t nnz = entries_of[static_cast<size_t>(r) * ranks + me];
      if (nnz == 0) continue;
      const double* m = in.at(r);
      const auto* lengths = reinterpret_cast<const int32_t*>(m);
      s.cols = reinterpret_cast<const int32_t*>(m + doubles_for_int32s(static_cast<size_t>(rows)));
      s.values = m + doubles_for_int32s(static_cast<size_t>(rows)) + doubles_for_int32s(static_cast<size_t>(nnz));
      for (int32_t i = 0; i < rows; ++i) s.start[i + 1] = s.start[i] + lengths[i];
    }
    sources.push_back(std::move(s));
  }
  CsrMatrix mine;  // global columns: a file's fit int32
  mine.rows = rows, mine.cols = a.cols;
  mine.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
  for (const Source& s : sources)
    for_ranges(rows, [&](int64_t first, int64_t last) {
      for (int64_t i = first; i < last; ++i) mine.row_ptr[i + 1] += static_cast<int32_t>(s.start[i + 1] - s.start[i]);
    });
  for (int32_t i = 0; i < rows; ++i) mine.row_ptr[i + 1] += mine.row_ptr[i];  // before merging: an upper bound
  mine.col_idx.resize(static_cast<size_t>(mine.row_ptr[rows]));
  mine.values.resize(mine.col_idx.size());
  std::vector<int32_t> merged_length(static_cast<size_t>(rows), 0);
  const int64_t parts = rows >= (1 << 14) ? 8 * int64_t{hardware_threads()} : 1;
  std::vector<int64_t> merged_of_part(static_cast<size_t>(parts), 0), zeros_of_part(static_cast<size_t>(parts), 0);
  parallel_for(parts, hardware_threads(), [&](int64_t t) {
    std::vector<std::pair<int32_t, double>> row;
    for (int32_t i = static_cast<int32_t>(even_split(rows, parts, t)); i < even_split(rows, parts, t + 1); ++i) {
      const Source* only = nullptr;
      int contributing = 0;
      for (const Source& s : sources)
        if (s.start[i + 1] > s.start[i]) ++contributing, only = &s;
      int32_t w = mine.row_ptr[i];
      if (contributing == 1) {  // sorted and merged by its part already
        const int64_t from = only->start[i], count = only->start[i + 1] - from;
        std::memcpy(mine.col_idx.data() + w, only->cols + from, static_cast<size_t>(count) * sizeof(int32_t));
        std::memcpy(mine.values.data() + w, only->values + from, static_cast<size_t>(count) * sizeof(double));
        w += static_cast<int32_t>(count);
      } else if (contributing > 1) {
        row.clear();
        for (const Source& s : sources)
          for (int64_t q = s.start[i]; q < s.start[i + 1]; ++q) row.emplace_back(s.cols[q], s.values[q]);
        std::stable_sort(row.begin(), row.end(), [](const auto& x, const auto& y) { return x.first < y.first; });
        for (size_t q = 0; q < row.size(); ++q) {
          if (q > 0 && row[q].first == row[q - 1].first) {
            mine.values[w - 1] += row[q].second;
            ++merged_of_part[t];
            continue;
          }
          mine.col_idx[w] = row[q].first, mine.values[w++] = row[q].second;
        }
      }
      merged_length[i] = w - mine.row_ptr[i];
      for (int32_t q = mine.row_ptr[i]; q < w; ++q) zeros_of_part[t] += mine.values[q] == 0.0;
    }
  });
  step_done("rows merged");
  in = Messages(ranks);
  sources.clear();
  a = CsrMatrix();  // the part's arrays go before the blocks are made
  step_done("part's arrays released");
  int64_t merged = 0, zeros = 0;
  for (int64_t t = 0; t < parts; ++t) merged += merged_of_part[t], zeros += zeros_of_part[t];
  if (merged > 0) {  // close the gaps the merged duplicates left
    int32_t w = 0;
    for (int32_t i = 0; i < rows; ++i) {
      const int32_t from = mine.row_ptr[i];
      mine.row_ptr[i] = w;
      for (int32_t q = 0; q < merged_length[i]; ++q) mine.col_idx[w + q] = mine.col_idx[from + q], mine.values[w + q] = mine.values[from + q];
      w += merged_length[i];
    }
    mine.row_ptr[rows] = w;
    mine.col_idx.resize(static_cast<size_t>(w)), mine.values.resize(static_cast<size_t>(w));
  }

  // 5. the blocks; the sends are the peers' receives (any pattern, not only a structurally symmetric one)
  out_share.share = rank_blocks_from_rows(std::move(mine), p, me);
  RankBlocks& rb = out_share.share;
  std::vector<int64_t> columns_from(static_cast<size_t>(ranks), 0);
  for (const HaloPlan::Receive& r : rb.plan.receive) columns_from[r.peer] = static_cast<int64_t>(r.columns.size());
  const std::vector<int64_t> asked = all_counts(comm, columns_from);  // [receiver * ranks + sender]
  Messages lists(ranks), wants(ranks);
  for (const HaloPlan::Receive& r : rb.plan.receive) lists.count[r.peer] = doubles_for_int64s(r.columns.size());
  for (int q = 0; q < ranks; ++q)
    if (q != me) wants.count[q] = doubles_for_int64s(static_cast<size_t>(asked[static_cast<size_t>(q) * ranks + me]));
  lists.lay_out(), wants.lay_out();
  for (const HaloPlan::Receive& r : rb.plan.receive)
    std::memcpy(lists.at(r.peer), r.columns.data(), r.columns.size() * sizeof(GlobalIndex));
  exchange_messages(comm, lists, wants);
  rb.plan.send.clear();
  for (int q = 0; q < ranks; ++q) {
    if (!wants.count[q]) continue;
    HaloPlan::Send s;
    s.peer = q;
    const auto* columns = reinterpret_cast<const GlobalIndex*>(wants.at(q));
    for (size_t k = 0; k < wants.count[q]; ++k) s.rows.push_back(static_cast<int32_t>(columns[k] - b));
    rb.plan.send.push_back(std::move(s));
  }

  step_done("blocks and plan");
  // 6. the whole file's figures
  std::vector<double> figures{static_cast<double>(merged), static_cast<double>(zeros)};
  sum_over_ranks(comm, figures);
  out_share.global_rows = p.first_row.back();
  out_share.info = std::move(part.info);
  out_share.info.duplicates_summed = static_cast<int64_t>(counts[static_cast<size_t>(ranks)] + figures[0]);
  out_share.info.explicit_zeros = static_cast<int64_t>(figures[1]);
  out_share.info.part_entries = total;
  out_share.exchange_ms = ms_since(t0);
  return out_share;
}

}  // namespace spcg
