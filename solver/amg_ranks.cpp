#include "solver/amg_ranks.hpp"

#include <algorithm>
#include <climits>
#include <functional>

#include "kernels/communicator.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/halo_product.hpp"
#include "kernels/nvtx.hpp"
#include "kernels/precond/amg_rank_kernels.hpp"
#include "solver/spectrum.hpp"
#include "spcg/error.hpp"

namespace spcg {
namespace {

// The largest of each rank's value (every rank gets it).
int64_t max_over_ranks(const LinearOperator& over, int64_t value, cudaStream_t s) {
  int64_t most = 0;
  for (double v : gather_over_ranks(over, {static_cast<double>(value)}, s)) most = std::max(most, static_cast<int64_t>(v));
  return most;
}

// The rows of m (this rank's rows, any columns) that the peers' halos list, delivered: a CSR of the level's halo
// slots x m.cols, in slot order. Fixed-width rows of the widest row sent by any rank (what the receivers size
// their buffer by).
DeviceCsr halo_rows_of(const DistributedOperator& level, const DeviceCsr& m, cudaStream_t s) {
  const int64_t sent = level.send_entries();
  const int32_t width = static_cast<int32_t>(max_over_ranks(level, longest_row(m, level.send_rows(), sent, s), s));
  DeviceArray<double> send(static_cast<size_t>(sent) * 2 * width, "amg rows sent"),
      received(static_cast<size_t>(level.halo_slots()) * 2 * width, "amg rows received");
  pack_rows(m, level.send_rows(), sent, width, send.data(), s);
  if (width > 0) level.exchange_rows(send.data(), received.data(), 2 * width, s);
  wait_for_stream(s, &level.communicator());
  return unpack_rows(received.data(), level.halo_slots(), width, m.cols, s);
}

// [m's rows; the halo rows of m]
DeviceCsr with_halo_rows(const DistributedOperator& level, const DeviceCsr& m, cudaStream_t s) {
  return stack_rows(m, halo_rows_of(level, m, s), s);
}

DeviceCsr product(const DeviceCsr& a, const DeviceCsr& b, const DeviceCsr* e, const double* dinv, double s0,
                  const char* what, RankGalerkin& g, cudaStream_t s) {
  bool by_library = false;
  DeviceCsr c = row_product(a, b, e, dinv, s0, s, &by_library);
  if (by_library) g.library_products.push_back(what);
  return c;
}

// A sum over the ranks in pieces of at most 2^22 values: NCCL's sum gathers every rank's values into a buffer that
// stays as large as the largest sum (ranks x count), so a level's gather in one piece would hold ranks x its
// entries for the communicator's life.
void sum_in_pieces(Communicator& ranks, double* values, size_t count, cudaStream_t s) {
  constexpr size_t kPiece = size_t{1} << 22;
  for (size_t at = 0; at < count; at += kPiece) ranks.allreduce_sum(values + at, std::min(kPiece, count - at), s);
}

class HaloTransfer final : public LinearOperator {
 public:
  HaloTransfer(std::unique_ptr<LinearOperator> local, CompressedRows halo, const DistributedOperator& source)
      : LinearOperator(local->rows(), local->cols(), local->nnz() + static_cast<int64_t>(halo.cols.size())),
        local_(std::move(local)), halo_(std::move(halo)), source_(source) {
    collective_ = true;
    info_ = local_->setup_info();
  }
  std::string name() const override { return "transfer(" + local_->name() + " + halo)"; }
  std::string chosen(int k) const override { return local_->chosen(k) + " + halo csr-vector"; }
  double bytes_per_apply(int k) const override {
    return local_->bytes_per_apply(k) + 12.0 * double(halo_.cols.size()) + 8.0 * halo_.rows +
           (16.0 * halo_.rows + 8.0 * source_.halo_slots() + 16.0 * double(source_.send_entries())) * k;
  }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    const double* x_halo = source_.exchange_halo(x, k, s);  // (x: source's rows)
    local_->apply(alpha, x, beta, y, k, s);
    const HaloRows h{halo_.rows, halo_.ids.data(), halo_.row_ptr.data(), halo_.cols.data(), halo_.values.data()};
    launch_halo_product(h, k, x_halo, alpha, y, nullptr, nullptr, s);
  }

 private:
  std::unique_ptr<LinearOperator> local_;
  CompressedRows halo_;
  const DistributedOperator& source_;
};

class SummedTransfer final : public LinearOperator, public RankShare {
 public:
  SummedTransfer(std::unique_ptr<LinearOperator> local, Communicator& ranks)
      : LinearOperator(local->rows(), local->cols(), local->nnz()), local_(std::move(local)), ranks_(ranks) {
    collective_ = true;
    info_ = local_->setup_info();
  }
  std::string name() const override { return "summed(" + local_->name() + ")"; }
  std::string chosen(int k) const override { return local_->chosen(k) + " + sum over ranks"; }
  double bytes_per_apply(int k) const override { return local_->bytes_per_apply(k) + 16.0 * rows_ * k * ranks_.size(); }
  Communicator& communicator() const override { return ranks_; }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    if (beta != 0.0) throw Error("summed transfer: only y = sum L x (beta = 0) is offered");
    local_->apply(alpha, x, 0.0, y, k, s);
    ranks_.allreduce_sum(y, static_cast<size_t>(rows_) * k, s);
  }

 private:
  std::unique_ptr<LinearOperator> local_;
  Communicator& ranks_;
};

}  // namespace

RankGalerkin rank_galerkin(const DistributedOperator& fine, const DeviceCsr& local_a, const DeviceAggregates& agg,
                           const double* dinv, double omega, int smoothings, cudaStream_t s, const PhaseTimer& timed) {
  NvtxRange range("amg-rank-galerkin");
  if (smoothings > 1)
    throw UsageError("amg on several GPUs: one prolongator smoothing step at most (each step reaches a row further "
                     "than the halo brings)");
  RankGalerkin g;
  const std::vector<double> counts = gather_over_ranks(fine, {static_cast<double>(agg.count)}, s);
  const int me = fine.communicator().rank();
  g.coarse_first_row.assign(1, 0);
  for (double c : counts) g.coarse_first_row.push_back(g.coarse_first_row.back() + static_cast<GlobalIndex>(c));
  if (g.coarse_first_row.back() > INT32_MAX)
    throw Error("amg on several GPUs: a coarse level of " + std::to_string(g.coarse_first_row.back()) +
                " rows, past 32-bit column numbers");
  g.first_coarse = g.coarse_first_row[static_cast<size_t>(me)];
  g.own_coarse = agg.count;
  g.coarse_rows = static_cast<int32_t>(g.coarse_first_row.back());
  const int32_t n = local_a.rows, first = static_cast<int32_t>(g.first_coarse);

  // each step timed under its kind (the setup's phases add up the steps of a name): the products, the transpose,
  // the exchanges of rows and the reshaping (joins, stacks, splits) that the one-GPU setup does not have
  auto step = [&](const char* phase, auto&& work) {
    DeviceCsr out;
    timed(phase, [&] { out = work(); });
    return out;
  };
  constexpr const char* kExchange = "galerkin over ranks: exchanges";
  constexpr const char* kReshape = "galerkin over ranks: reshaping";
  // [A_local | A_halo]: the rank's rows over its own columns and then its halo slots
  DeviceCsr a_ext = step(kReshape, [&] {
    const HaloRows h = fine.halo_rows();
    return join_columns(local_a, expand_rows(n, fine.halo_slots(), h.rows, h.row_ids, h.row_ptr, h.cols, h.values, s), s);
  });
  // P0 with global coarse columns, the rank's rows; P = P0 - omega D^-1 [A_local | A_halo] [P0; P0_halo]
  DeviceCsr p = step("galerkin over ranks: P", [&] { return shift_columns(tentative_prolongator(agg, n, s), first, g.coarse_rows, s); });
  if (smoothings > 0) {
    const DeviceCsr p0_halo = step(kExchange, [&] { return halo_rows_of(fine, p, s); });
    const DeviceCsr p0_ext = step(kReshape, [&] { return stack_rows(p, p0_halo, s); });
    p = step("galerkin over ranks: P", [&] { return product(a_ext, p0_ext, &p, dinv, -omega, "P", g, s); });
  }
  const DeviceCsr p_halo = step(kExchange, [&] { return halo_rows_of(fine, p, s); });
  // A P: the rank's rows (the largest piece: never copied)
  DeviceCsr p_ext = step(kReshape, [&] { return stack_rows(p, p_halo, s); });
  DeviceCsr ap = step("galerkin over ranks: A P", [&] {
    return product(a_ext, p_ext, nullptr, nullptr, 1.0, "A P", g, s);
  });
  p_ext = DeviceCsr();
  a_ext = DeviceCsr();
  const DeviceCsr ap_halo = step(kExchange, [&] { return halo_rows_of(fine, ap, s); });
  // R = P' on the rank's coarse rows, over its own fine rows and over its halo rows; its rows of P' A P =
  // R_own (A P) + R_halo (A P)_halo
  DeviceCsr p_own = step(kReshape, [&] { return split_columns(p, g.first_coarse, g.own_coarse, nullptr, 0, false, s).local; });
  DeviceCsr p_halo_own = step(kReshape, [&] { return split_columns(p_halo, g.first_coarse, g.own_coarse, nullptr, 0, false, s).local; });
  g.r_own = step("galerkin over ranks: R = P'", [&] { return transpose(p_own, s); });
  g.r_halo = step("galerkin over ranks: R = P'", [&] { return transpose(p_halo_own, s); });
  p_own = DeviceCsr(), p_halo_own = DeviceCsr();
  g.p = std::move(p);
  const DeviceCsr own_part = step("galerkin over ranks: R (A P)", [&] { return product(g.r_own, ap, nullptr, nullptr, 1.0, "R (A P)", g, s); });
  ap = DeviceCsr();
  g.coarse = step("galerkin over ranks: R (A P)", [&] { return product(g.r_halo, ap_halo, &own_part, nullptr, 1.0, "R (A P) halo", g, s); });
  return g;
}

void check_plan_over_ranks(const LinearOperator& over, const HaloPlan& plan, const std::string& at) {
  const Communicator* comm = ranks_of(over);
  if (!comm) return;
  const int size = comm->size(), me = comm->rank();
  const size_t pairs = static_cast<size_t>(size) * size;
  std::vector<double> counts(2 * pairs, 0.0);  // sends[from * size + to], then receives[at * size + from]
  for (const HaloPlan::Send& t : plan.send) counts[static_cast<size_t>(me) * size + t.peer] = double(t.rows.size());
  for (const HaloPlan::Receive& t : plan.receive) counts[pairs + static_cast<size_t>(me) * size + t.peer] = double(t.columns.size());
  counts = sum_over_ranks(over, std::move(counts), 0);
  for (int from = 0; from < size; ++from)
    for (int to = 0; to < size; ++to) {
      const double sent = counts[static_cast<size_t>(from) * size + to], expected = counts[pairs + static_cast<size_t>(to) * size + from];
      if (sent != expected)
        throw InputError("matrix", 0, at + "the coarse level's halo plan does not match over the ranks (rank " +
                                          std::to_string(from) + " sends " + std::to_string(int64_t(sent)) + " rows to rank " +
                                          std::to_string(to) + ", which expects " + std::to_string(int64_t(expected)) +
                                          "): the matrix's pattern is not structurally symmetric");
    }
}

DeviceCsr gather_coarse_level(const LinearOperator& fine, const RankGalerkin& g, cudaStream_t s) {
  Communicator* ranks = ranks_of(fine);
  const int32_t n = g.coarse_rows;
  // every row's length at its global row, then the entries at their global offsets, all on the device: sums of
  // one rank's values and the others' zeros, exact (a host round trip of the level took ~190 ms for jump3d:400's
  // 80k-row level 2 on 4 H100s, and ~750 ms for a 264k-row one)
  DeviceArray<double> lengths(static_cast<size_t>(n), "gathered lengths");
  lengths.zero();
  place_row_lengths(g.coarse, g.first_coarse, lengths.data(), s);
  if (ranks) sum_in_pieces(*ranks, lengths.data(), lengths.size(), s);
  wait_for_stream(s, ranks);
  int64_t nnz = 0, at = 0;  // the level's entries, and those of the rows before this rank's
  {
    const std::vector<double> h = lengths.download();  // (n values: the rows' lengths are the small part)
    for (int64_t i = 0; i < n; ++i) {
      if (i == g.first_coarse) at = nnz;
      nnz += static_cast<int64_t>(h[static_cast<size_t>(i)]);
    }
    if (g.first_coarse >= n) at = nnz;
  }
  DeviceArray<double> entries(static_cast<size_t>(2 * nnz), "gathered entries");  // columns, then values
  entries.zero();
  place_entries(g.coarse, at, nnz, entries.data(), s);
  if (ranks) sum_in_pieces(*ranks, entries.data(), entries.size(), s);
  wait_for_stream(s, ranks);
  return csr_from_placed(lengths.data(), entries.data(), n, n, s);
}

std::unique_ptr<LinearOperator> make_halo_transfer(std::unique_ptr<LinearOperator> local, const DeviceCsr& halo,
                                                   const DistributedOperator& source, cudaStream_t s) {
  if (halo.cols != source.halo_slots()) throw Error("halo transfer: the halo block is not over the source's slots");
  return std::make_unique<HaloTransfer>(std::move(local), compress_rows(halo, s), source);
}

std::unique_ptr<LinearOperator> make_summed_transfer(std::unique_ptr<LinearOperator> local, Communicator& ranks) {
  return std::make_unique<SummedTransfer>(std::move(local), ranks);
}

}  // namespace spcg
