#pragma once
// One level of smoothed-aggregation AMG over ranks, on the device (issue #36; the host reference this follows entry
// for entry is sparse/distributed_aggregation.hpp):
//   - aggregates inside each rank (the caller's, from the rank's local block), numbered rank by rank: rank r's
//     coarse rows follow those of ranks 0..r-1;
//   - P = (I - omega D^-1 A) P0 for the rank's rows, from [A_local | A_halo] times the P0 rows of the rank's own
//     rows and of its halo rows (those travel with the level's halo plan, packed as fixed-width rows);
//   - A P the same way from P's own and halo rows; then the rank's coarse rows of P' (A P): every fine row whose P
//     row reaches one of the rank's aggregates is its own or one of its halo rows (A is structurally symmetric and
//     P one smoothing step from P0), so R = P' over [own rows; halo rows] restricted to the rank's coarse columns,
//     times [A P own; A P halo] (R_own (A P) + R_halo (A P)_halo: A P is never copied), gives the rank's coarse
//     rows whole, without a reverse exchange.
// The transfers of the V-cycle (operators over ranks): restriction b_c = R [res; res_halo] with the fine level's
// exchange, prolongation x += P [x_c; x_c_halo] with the coarse level's; where the coarse level is held whole by
// every rank (the levels below a few hundred thousand rows: redundant, hypre's and AmgX's agglomeration to all),
// b_c is the sum over the ranks of each rank's P' res and x += P x_c reads the whole x_c.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/device_formats.hpp"
#include "kernels/distributed_operator.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/precond/amg_kernels.hpp"

namespace spcg {

struct RankGalerkin {
  std::vector<GlobalIndex> coarse_first_row;  // the coarse level's row partition (ranks + 1 entries)
  GlobalIndex first_coarse = 0;               // this rank's first coarse row
  int32_t own_coarse = 0;                     // this rank's coarse rows (its aggregates)
  int32_t coarse_rows = 0;                    // the coarse level's rows over all ranks
  DeviceCsr p;       // this rank's rows of P: n x coarse_rows, global coarse columns
  DeviceCsr r_own;   // P' on this rank's coarse rows over its own fine rows: own_coarse x n
  DeviceCsr r_halo;  // ... over its fine halo slots: own_coarse x the fine level's halo slots
  DeviceCsr coarse;  // this rank's rows of P' A P: own_coarse x coarse_rows, global columns
  std::vector<std::string> library_products;  // products too wide for our row-wise kernel (cuSPARSE's)
};

// fine: the level's operator over ranks; local_a: its local block on the device; agg: the rank's aggregates of it;
// dinv: its inverse diagonal (device); omega: the damping of the one smoothing step (smoothings 0: P = P0, plain
// aggregation). Collective: every rank calls it.
// timed(phase, work): runs work, timed as the setup's phase (nested: "P" holds "A P").
using PhaseTimer = std::function<void(const char*, const std::function<void()>&)>;
RankGalerkin rank_galerkin(const DistributedOperator& fine, const DeviceCsr& local_a, const DeviceAggregates& agg,
                           const double* dinv, double omega, int smoothings, cudaStream_t s,
                           const PhaseTimer& timed = [](const char*, const std::function<void()>& work) { work(); });

// Every rank's sends to each peer against that peer's receives from it (one sum over the ranks of their counts):
// a coarse level's plan, whose sends assume a structurally symmetric level, is refused alike on every rank where
// they differ (an exchange would wait or read rows never sent). `at` names the level. Collective.
void check_plan_over_ranks(const LinearOperator& over, const HaloPlan& plan, const std::string& at);

// The whole coarse level on every rank from each rank's rows of it (g.coarse): the rows gathered over the ranks,
// on the device. Collective.
DeviceCsr gather_coarse_level(const LinearOperator& fine, const RankGalerkin& g, cudaStream_t s);

// y = alpha (L x + H x_halo) + beta y: a transfer operator whose columns are the rows of `source` (an operator over
// ranks), L over the rank's own ones, H over source's halo slots, x_halo from source's exchange. Collective.
std::unique_ptr<LinearOperator> make_halo_transfer(std::unique_ptr<LinearOperator> local, const DeviceCsr& halo,
                                                   const DistributedOperator& source, cudaStream_t s);
// y = sum over the ranks of L x (beta = 0 only): the restriction onto a level every rank holds whole, L each
// rank's P' (all coarse rows x its fine rows); the sum in rank order, the same bits on every rank. Collective.
std::unique_ptr<LinearOperator> make_summed_transfer(std::unique_ptr<LinearOperator> local, Communicator& ranks);

}  // namespace spcg
