#include "sparse/aggregation.hpp"

#include <cmath>
#include <string>
#include <tuple>

#include "spcg/error.hpp"

namespace spcg {
namespace {

// A node's priority: a 64-bit mix of (node, seed) (splitmix64's finaliser), so that neighbouring nodes rank in
// no particular geometric order.
uint64_t priority(int32_t node, uint64_t seed) {
  uint64_t z = static_cast<uint64_t>(node) + 0x9E3779B97F4A7C15ULL * (seed + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// (state, priority, index), compared lexicographically: in the MIS > undecided > out, then priority, then index.
enum : uint8_t { kOut = 0, kUndecided = 1, kIn = 2 };
using Tuple = std::tuple<uint8_t, uint64_t, int32_t>;

void require_square(const CsrMatrix& g, const char* what) {
  if (g.rows != g.cols) throw Error(std::string(what) + ": the graph is not square");
}

}  // namespace

CsrMatrix strength_graph(const CsrMatrix& a, double theta) {
  require_square(a, "strength_graph");
  std::vector<double> diag(static_cast<size_t>(a.rows), 0.0);
  for (int32_t i = 0; i < a.rows; ++i)
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p)
      if (a.col_idx[p] == i) diag[static_cast<size_t>(i)] = a.values[p];
  CsrMatrix s;
  s.rows = s.cols = a.rows;
  s.row_ptr.assign(static_cast<size_t>(a.rows) + 1, 0);
  for (int32_t i = 0; i < a.rows; ++i) {
    for (int32_t p = a.row_ptr[i]; p < a.row_ptr[i + 1]; ++p) {
      const int32_t j = a.col_idx[p];
      if (j == i) continue;
      if (std::abs(a.values[p]) >= theta * std::sqrt(std::abs(diag[static_cast<size_t>(i)] * diag[static_cast<size_t>(j)])) &&
          a.values[p] != 0.0)
        s.col_idx.push_back(j), s.values.push_back(1.0);
    }
    s.row_ptr[static_cast<size_t>(i) + 1] = static_cast<int32_t>(s.col_idx.size());
  }
  return s;
}

std::vector<uint8_t> mis2(const CsrMatrix& g, uint64_t seed) {
  require_square(g, "mis2");
  const int32_t n = g.rows;
  std::vector<uint8_t> state(static_cast<size_t>(n), kUndecided);
  std::vector<Tuple> t(static_cast<size_t>(n)), next(static_cast<size_t>(n));
  for (int64_t undecided = n; undecided > 0;) {
    for (int32_t i = 0; i < n; ++i) t[i] = Tuple{state[i], priority(i, seed), i};
    // two rounds of max over {i} and its neighbours: the max over the distance-2 neighbourhood
    for (int round = 0; round < 2; ++round) {
      for (int32_t i = 0; i < n; ++i) {
        Tuple m = t[i];
        for (int32_t p = g.row_ptr[i]; p < g.row_ptr[i + 1]; ++p) m = std::max(m, t[g.col_idx[p]]);
        next[i] = m;
      }
      t.swap(next);
    }
    undecided = 0;
    for (int32_t i = 0; i < n; ++i) {
      if (state[i] != kUndecided) continue;
      if (std::get<2>(t[i]) == i) state[i] = kIn;               // the largest undecided tuple within two edges
      else if (std::get<0>(t[i]) == kIn) state[i] = kOut;       // a root within two edges covers it
      else ++undecided;
    }
  }
  std::vector<uint8_t> root(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) root[i] = state[i] == kIn;
  return root;
}

Aggregates aggregate(const CsrMatrix& g, uint64_t seed) {
  const std::vector<uint8_t> root = mis2(g, seed);
  const int32_t n = g.rows;
  Aggregates agg;
  agg.of.assign(static_cast<size_t>(n), -1);
  for (int32_t i = 0; i < n; ++i)
    if (root[i]) agg.of[i] = agg.count++;  // roots numbered in index order
  // a pass: each unassigned node joins the aggregate of its assigned neighbour of highest (priority, index),
  // reading only the assignments from before the pass
  auto join_neighbours = [&] {
    const std::vector<int32_t> before = agg.of;
    for (int32_t i = 0; i < n; ++i) {
      if (before[i] >= 0) continue;
      std::pair<uint64_t, int32_t> best{0, -1};
      for (int32_t p = g.row_ptr[i]; p < g.row_ptr[i + 1]; ++p) {
        const int32_t j = g.col_idx[p];
        if (before[j] < 0) continue;
        const std::pair<uint64_t, int32_t> key{priority(j, seed), j};
        if (best.second < 0 || key > best) best = key;
      }
      if (best.second >= 0) agg.of[i] = before[best.second];
    }
  };
  join_neighbours();  // next to a root
  join_neighbours();  // two edges from one
  for (int32_t i = 0; i < n; ++i)
    if (agg.of[i] < 0)  // cannot happen for a symmetric graph (MIS-2 is maximal): name it rather than go on
      throw Error("aggregate: node " + std::to_string(i) + " is more than two edges from every root (graph not symmetric?)");
  return agg;
}

CsrMatrix tentative_prolongator(const Aggregates& agg) {
  std::vector<int64_t> size(static_cast<size_t>(agg.count), 0);
  for (int32_t a : agg.of) ++size[static_cast<size_t>(a)];
  CsrMatrix p;
  p.rows = static_cast<int32_t>(agg.of.size()), p.cols = agg.count;
  p.row_ptr.resize(agg.of.size() + 1);
  p.col_idx.resize(agg.of.size());
  p.values.resize(agg.of.size());
  p.row_ptr[0] = 0;
  for (size_t i = 0; i < agg.of.size(); ++i) {
    p.row_ptr[i + 1] = static_cast<int32_t>(i + 1);
    p.col_idx[i] = agg.of[i];
    p.values[i] = 1.0 / std::sqrt(static_cast<double>(size[static_cast<size_t>(agg.of[i])]));
  }
  return p;
}

}  // namespace spcg
