#include "partition.hpp"

#include <algorithm>
#include <string>

#include "error.hpp"

namespace spcg {

int RowPartition::owner(int32_t row) const {
  const auto it = std::upper_bound(first_row.begin(), first_row.end(), row);
  return static_cast<int>(it - first_row.begin()) - 1;
}

int64_t HaloPlan::send_count() const {
  int64_t n = 0;
  for (const Transfer& t : send) n += static_cast<int64_t>(t.rows.size());
  return n;
}

RowPartition partition_by_work(const CsrMatrix& a, int ranks) {
  if (ranks < 1) throw Error("partition_by_work: " + std::to_string(ranks) + " ranks (at least 1)");
  const int64_t total = a.nnz() + a.rows;
  RowPartition p;
  p.first_row.assign(static_cast<size_t>(ranks) + 1, a.rows);
  p.first_row[0] = 0;
  // work before row i: row_ptr[i] + i, increasing in i; boundary t at the first row reaching t/ranks of it
  auto work_before = [&](int32_t i) { return int64_t{a.row_ptr[i]} + i; };
  for (int t = 1; t < ranks; ++t) {
    const int64_t target = total * t / ranks;
    int32_t lo = p.first_row[t - 1], hi = a.rows;
    while (lo < hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      if (work_before(mid) < target) lo = mid + 1;
      else hi = mid;
    }
    p.first_row[t] = lo;
  }
  return p;
}

std::vector<RankBlocks> split_for_ranks(const CsrMatrix& a, const RowPartition& p) {
  if (a.rows != a.cols) throw Error("split_for_ranks: the matrix is not square");
  if (p.first_row.front() != 0 || p.first_row.back() != a.rows)
    throw Error("split_for_ranks: the partition does not cover the matrix's rows");
  const int ranks = p.ranks();
  std::vector<RankBlocks> out(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    RankBlocks& rb = out[static_cast<size_t>(r)];
    rb.rank = r, rb.row_begin = p.begin(r), rb.row_end = p.end(r);
    const int32_t b = rb.row_begin, e = rb.row_end, rows = e - b;
    // halo columns: the distinct columns outside [b, e), sorted (so grouped by owner, as ranges are contiguous)
    std::vector<int32_t>& halo = rb.plan.halo_columns;
    for (int32_t i = b; i < e; ++i)
      for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q)
        if (a.col_idx[q] < b || a.col_idx[q] >= e) halo.push_back(a.col_idx[q]);
    std::sort(halo.begin(), halo.end());
    halo.erase(std::unique(halo.begin(), halo.end()), halo.end());
    rb.local.rows = rb.local.cols = rows;
    rb.halo.rows = rows, rb.halo.cols = static_cast<int32_t>(halo.size());
    rb.local.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
    rb.halo.row_ptr.assign(static_cast<size_t>(rows) + 1, 0);
    for (int32_t i = b; i < e; ++i) {
      for (int32_t q = a.row_ptr[i]; q < a.row_ptr[i + 1]; ++q) {
        const int32_t c = a.col_idx[q];
        if (c >= b && c < e) {
          rb.local.col_idx.push_back(c - b), rb.local.values.push_back(a.values[q]);
        } else {  // the slot order is the column order: a row's halo entries stay sorted
          const int32_t slot = static_cast<int32_t>(std::lower_bound(halo.begin(), halo.end(), c) - halo.begin());
          rb.halo.col_idx.push_back(slot), rb.halo.values.push_back(a.values[q]);
        }
      }
      rb.local.row_ptr[static_cast<size_t>(i - b) + 1] = static_cast<int32_t>(rb.local.col_idx.size());
      rb.halo.row_ptr[static_cast<size_t>(i - b) + 1] = static_cast<int32_t>(rb.halo.col_idx.size());
    }
    // receives: the runs of halo columns by owner
    for (size_t s = 0; s < halo.size();) {
      const int peer = p.owner(halo[s]);
      HaloPlan::Transfer t;
      t.peer = peer;
      while (s < halo.size() && halo[s] < p.end(peer)) t.rows.push_back(halo[s++]);
      rb.plan.receive.push_back(std::move(t));
    }
  }
  // sends: each receive, seen from its sender (receivers taken in increasing rank, so sends are by peer)
  for (int q = 0; q < ranks; ++q)
    for (const HaloPlan::Transfer& rcv : out[static_cast<size_t>(q)].plan.receive) {
      HaloPlan::Transfer snd;
      snd.peer = q;
      for (int32_t col : rcv.rows) snd.rows.push_back(col - p.begin(rcv.peer));
      out[static_cast<size_t>(rcv.peer)].plan.send.push_back(std::move(snd));
    }
  return out;
}

std::vector<std::vector<double>> exchange_halos_in_process(const std::vector<RankBlocks>& ranks,
                                                           const std::vector<std::vector<double>>& x_parts) {
  const size_t n = ranks.size();
  if (x_parts.size() != n) throw Error("exchange_halos_in_process: one x part per rank expected");
  std::vector<std::vector<double>> halo(n);
  for (size_t q = 0; q < n; ++q) halo[q].assign(ranks[q].plan.halo_columns.size(), 0.0);
  // every message as its sender packs it, delivered to the receiver's slots for that sender
  for (size_t r = 0; r < n; ++r)
    for (const HaloPlan::Transfer& snd : ranks[r].plan.send) {
      std::vector<double> message;
      for (int32_t row : snd.rows) message.push_back(x_parts[r].at(static_cast<size_t>(row)));
      const HaloPlan& to = ranks[static_cast<size_t>(snd.peer)].plan;
      size_t offset = 0;
      bool delivered = false;
      for (const HaloPlan::Transfer& rcv : to.receive) {
        if (rcv.peer == static_cast<int>(r)) {
          if (rcv.rows.size() != message.size())
            throw Error("halo plan: rank " + std::to_string(r) + " sends " + std::to_string(message.size()) +
                        " entries to rank " + std::to_string(snd.peer) + ", which expects " + std::to_string(rcv.rows.size()));
          std::copy(message.begin(), message.end(), halo[static_cast<size_t>(snd.peer)].begin() + static_cast<long>(offset));
          delivered = true;
          break;
        }
        offset += rcv.rows.size();
      }
      if (!delivered)
        throw Error("halo plan: rank " + std::to_string(r) + " sends to rank " + std::to_string(snd.peer) +
                    ", which receives nothing from it");
    }
  return halo;
}

std::vector<std::vector<double>> distributed_spmv_in_process(const std::vector<RankBlocks>& ranks,
                                                             const std::vector<std::vector<double>>& x_parts) {
  const std::vector<std::vector<double>> halo = exchange_halos_in_process(ranks, x_parts);
  std::vector<std::vector<double>> y(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r) {
    const RankBlocks& rb = ranks[r];
    y[r].assign(static_cast<size_t>(rb.local.rows), 0.0);
    for (int32_t i = 0; i < rb.local.rows; ++i) {
      double s = 0;
      for (int32_t q = rb.local.row_ptr[i]; q < rb.local.row_ptr[i + 1]; ++q) s += rb.local.values[q] * x_parts[r][rb.local.col_idx[q]];
      for (int32_t q = rb.halo.row_ptr[i]; q < rb.halo.row_ptr[i + 1]; ++q) s += rb.halo.values[q] * halo[r][rb.halo.col_idx[q]];
      y[r][static_cast<size_t>(i)] = s;
    }
  }
  return y;
}

}  // namespace spcg
