#pragma once
// Aggregation for smoothed-aggregation AMG (issue #24), the host reference of the rule the device setup will
// follow bit for bit: a strength graph, a distance-2 maximal independent set with hashed priorities (the
// parallel, deterministic rule of Bell, Dalton and Olson, "Exposing fine-grained parallelism in algebraic
// multigrid methods", SISC 2012, as cusp implements it), aggregates grown from its roots, and the tentative
// prolongator with one unit-norm column per aggregate.
#include <cstdint>
#include <vector>

#include "spcg/csr_matrix.hpp"

namespace spcg {

// Strong connections: j != i with |a_ij| >= theta sqrt(|a_ii a_jj|). Symmetric when A is. Pattern only (values 1).
CsrMatrix strength_graph(const CsrMatrix& a, double theta);

// A distance-2 maximal independent set of a symmetric graph: no two roots within two edges of each other, every
// other node within two edges of a root. Priorities are a hash of (node, seed), ties broken by index, so the set
// depends on the graph and the seed only. root[i] is 1 for a root.
std::vector<uint8_t> mis2(const CsrMatrix& graph, uint64_t seed = 0);

struct Aggregates {
  std::vector<int32_t> of;  // of[i]: node i's aggregate (every node has one)
  int32_t count = 0;
};
// Aggregates of a symmetric graph from its MIS-2 roots: each root starts one; a node next to roots joins the one
// of highest priority; a node two edges away joins the aggregate of its neighbour of highest priority that
// joined in the first pass. Isolated nodes (no strong neighbour) are aggregates of their own.
Aggregates aggregate(const CsrMatrix& graph, uint64_t seed = 0);

// The tentative prolongator: n x aggregates, P(i, of[i]) = 1 / sqrt(size of i's aggregate), so P'P = I.
CsrMatrix tentative_prolongator(const Aggregates& agg);

}  // namespace spcg
