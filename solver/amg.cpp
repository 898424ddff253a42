// Smoothed-aggregation AMG (Vanek, Mandel & Brezina, Computing 56, 1996) as a CG preconditioner, set up on the
// device level by level:
//   strength graph S (|a_ij| >= theta sqrt(a_ii a_jj))  ->  aggregates (distance-2 MIS, Bell, Dalton & Olson 2012)
//   ->  tentative P0 (one unit-norm column per aggregate)  ->  P = (I - omega D^-1 A)^s P0, omega = 4 / (3 lambda_max),
//       s = 1 (Vanek-Mandel-Brezina) or more (or P = P0: plain aggregation)  ->  R = P'  ->  A_c = R (A P)
//       (every product by our row-wise kernel; cuSPARSE SpGEMM only for a row wider than it takes)
// until a level has at most coarse_rows rows, whose dense Cholesky gives an explicit inverse.
// The cycle is a symmetric V(nu, nu): the same polynomial smoother (Chebyshev on D^-1 A, or l1-Jacobi) before
// and after the coarse correction, so M^-1 is symmetric and, the smoother being convergent, positive definite:
// CG stays valid. Every product of the cycle runs on the registry's operators (auto per level) on n x k blocks.
// On several GPUs (a rank's share: the solver's product spans the ranks) the levels are split over the ranks while
// they are large: aggregates inside each rank, P and P' A P over the ranks with each level's halo plan
// (solver/amg_ranks.hpp), each coarse level an operator over the ranks with a plan of its own; a level of at most
// whole_level_rows rows is gathered and held whole by every rank, and the levels below it are every rank's
// redundant copy. The cycle is the one-GPU cycle on these operators, so M^-1 is the same symmetric V-cycle.
#include "solver/amg.hpp"
#include "solver/amg_ranks.hpp"
#include "kernels/precond/amg_rank_kernels.hpp"

#include <Eigen/Cholesky>
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>

#include "kernels/communicator.hpp"
#include "kernels/distributed_operator.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/nvtx.hpp"
#include "kernels/registry.hpp"
#include "solver/solver.hpp"
#include "solver/spectrum.hpp"
#include "sparse/timing.hpp"

namespace spcg {
namespace {

// Coarsening that leaves more than this fraction of the rows has stalled (a level of isolated nodes, e.g.).
constexpr double kStalledCoarsening = 0.85;
// A stalled level this small is still solved densely; a larger one is an error (it would not fit).
constexpr int32_t kMaxDenseRows = 8000;

// Every row its own aggregate (P0 = I): a rank's level 0 whose coarsening stalled (a few or isolated rows) keeps
// its part in the distributed smoothing and hands its rows to the level below, solved densely.
DeviceAggregates singleton_aggregates(int32_t n) {
  std::vector<int32_t> of(static_cast<size_t>(n));
  std::iota(of.begin(), of.end(), 0);
  DeviceAggregates agg;
  agg.of = DeviceArray<int32_t>(of, "amg singleton aggregates");
  agg.count = n;
  return agg;
}

// The smoother's diagonal scaling: D^-1 (Chebyshev), or the l1 row sums' inverse (l1-Jacobi).
DeviceArray<double> smoother_scaling(const PreconditionerOptions& o, const DeviceCsr& a, DeviceArray<double> dinv,
                                     cudaStream_t s) {
  if (o.smoother == AmgSmoother::chebyshev) return dinv;
  DeviceArray<double> l1(static_cast<size_t>(a.rows), "amg l1 scaling");
  launch_l1_inverse(a, l1.data(), s);
  return l1;
}

class AmgPreconditioner final : public PreconditionerOp, public HoldsFp32Copy {
 public:
  // kept: an update (update_amg): kept's aggregates, level count and level kernels on the new values of `in`.
  AmgPreconditioner(const PreconditionerOptions& o, const PreconditionerInputs& in, const AmgPreconditioner* kept = nullptr);
  void reserve(int k) const override;
  void apply(const double* R, double* Z, int k, cudaStream_t s) const override { cycle(0, R, Z, k, s); }
  double bytes_per_apply(int k) const override;
  std::vector<double> bytes_per_launch(int k) const override;
  // Level 0's own operator where it stores FP32 values of the solver's matrix (one GPU: a rank's level 0 is a view
  // of the distributed product).
  const LinearOperator* fp32_copy_of_product() const override {
    const Level& fine = levels_.front();
    const KernelEntry* e = fine.owned && !fine.dist ? find_kernel(fine.owned->chosen(1)) : nullptr;
    return e && e->fp32_values ? fine.owned.get() : nullptr;
  }

 private:
  struct Level {
    std::shared_ptr<const DeviceCsr> a;
    std::unique_ptr<MatrixSetup> setup;    // levels >= 1 (level 0 is the solver's)
    std::unique_ptr<LinearOperator> owned;
    const LinearOperator* op = nullptr;     // A_l
    DeviceArray<double> scale;              // the smoother's diagonal scaling
    PolynomialSteps smoother;
    double lambda_max = 0;
    std::unique_ptr<MatrixSetup> p_setup, r_setup;
    std::unique_ptr<LinearOperator> p, r;   // P_l: n_{l+1} -> n_l; R_l = P_l'
    // The aggregates of this level's rows (levels with a coarser one): an update keeps them, and with them the
    // tentative prolongator and every coarser level's pattern. Shared by the hierarchies of later updates.
    std::shared_ptr<const DeviceAggregates> aggregates;
    // The shapes of the level's row products (one GPU): the prolongator's smoothing steps, then A P, then R (A P).
    // Fixed by the aggregates and A's pattern, so an update takes them: the fill pass alone on the first update,
    // the values alone on later ones. The transpose R = P' keeps its order from the first update likewise.
    std::vector<RowProductShape> product_shapes;
    TransposeShape transpose_shape;
    // Over ranks: the level's operator over the ranks (level 0's the solver's, a coarser one owned here; null on a
    // level every rank holds whole), its first row in the level's whole system, and whether the next level is held
    // whole by every rank (the sum-over-ranks restriction) rather than split over them.
    std::unique_ptr<DistributedOperator> dist_owned;
    const DistributedOperator* dist = nullptr;
    int64_t first_row = 0;
    int64_t global_rows = 0;  // the level's rows over all ranks (a level held whole: its rows)
    bool next_held_whole = false;
    mutable DeviceArray<double> b, x, res, d;  // n_l x k
    mutable DeviceArray<double> d_next;        // n_l: the smoother's second d, where its steps are fused (k = 1)
    std::string nvtx_name;                     // the cycle's range on this level: amg-level-<l>
  };
  void cycle(size_t l, const double* b, double* x, int k, cudaStream_t s) const;
  void factor_coarsest(const DeviceCsr& a, const std::string& matrix_name);

  // whether level l's smoothing steps may run fused into its product (PreconditionerOptions::fuse_smoothing), and
  // whether they do: with the second d the setup made where memory allowed (k = 1 applies)
  bool fused(const Level& L) const { return fuse_smoothing_ && offers_smoothing_step(*L.op); }
  bool runs_fused(const Level& L) const { return fused(L) && L.d_next.size() > 0; }
  std::vector<Level> levels_;
  bool fuse_smoothing_ = true;
  DeviceArray<double> coarse_inverse_;
  int32_t coarse_rows_ = 0;
  mutable int reserved_k_ = 0;
};

AmgPreconditioner::AmgPreconditioner(const PreconditionerOptions& o, const PreconditionerInputs& in,
                                     const AmgPreconditioner* kept)
    : PreconditionerOp(in.product.rows()) {
  if (o.smoother_degree < 1 || o.smoother_degree > 16) throw UsageError("amg: the smoother degree must be 1..16");
  if (o.coarse_rows < 1 || o.coarse_rows > kMaxDenseRows)
    throw UsageError("amg: the coarsest level's size must be 1.." + std::to_string(kMaxDenseRows) + " rows");
  if (!(o.strength_theta >= 0 && o.strength_theta < 1)) throw UsageError("amg: theta must be in [0, 1)");
  if (o.max_levels < 1) throw UsageError("amg: the number of levels must be at least 1");
  if (o.prolongator_smoothings < 1 || o.prolongator_smoothings > 3)
    throw UsageError("amg: the prolongator smoothing steps must be 1..3");
  if (!(o.prolongator_omega > 0 && o.prolongator_omega < 2))
    throw UsageError("amg: the prolongator's omega x lambda_max must be in (0, 2) (damped Jacobi diverges past 2)");
  const auto t_total = std::chrono::steady_clock::now();
  fuse_smoothing_ = o.fuse_smoothing;
  const cudaStream_t s = 0;
  std::map<std::string, double> phase_ms;
  std::vector<std::string> phase_order;
  std::vector<std::string> library_products;  // products with a row too wide for our kernel
  auto add_phase = [&](const std::string& phase, double ms) {
    if (!phase_ms.count(phase)) phase_order.push_back(phase);
    phase_ms[phase] += ms;
  };
  auto timed = [&](const char* phase, auto&& work) {
    NvtxRange range(phase);
    const auto t0 = std::chrono::steady_clock::now();
    work();
    CHECK_CUDA(cudaStreamSynchronize(s));
    add_phase(phase, ms_since(t0));
  };
  OperatorOptions level_options = in.operator_options;
  level_options.autotune = false;  // a timed trial per level would cost more than it saves
  level_options.device_layouts_only = true;  // the levels live on the device: no host-built layouts
  level_options.expected_k = std::max(1, in.expected_columns);
  // --deterministic: a k-column cycle equals k single cycles bitwise, so every level's operator (the finest's
  // too: the solver's own may sum a block apply in an SpMM's order) applies k columns as k SpMVs
  level_options.columnwise = in.operator_options.deterministic;

  // several GPUs: level 0's product, Lanczos sums and stopping decision span the ranks; a refusal met before its
  // first collective reaches every rank (agree_over_ranks), so no rank waits in a sum another has left
  Communicator* const ranks = ranks_of(in.product);
  levels_.reserve(static_cast<size_t>(std::max(1, o.max_levels)) + 1);  // Level& stays valid while levels are added
  levels_.emplace_back();
  levels_[0].a = in.matrix.device_csr();
  agree_over_ranks(ranks, [&] { levels_[0].a->require_narrow("AMG"); });  // before level 0's first sum
  levels_[0].op = &in.product;
  levels_[0].first_row = in.first_row;
  if (ranks) {
    levels_[0].dist = dynamic_cast<const DistributedOperator*>(&in.product);
    if (!levels_[0].dist) throw Error("amg on several GPUs: the solver's product is not a rank's share");
  }
  if (o.whole_level_rows < 0) throw UsageError("amg: the rows of a level held whole must be at least 0");
  // An update remakes kept's level kernels (remake_operator: its choice, not a new one) on the new values.
  auto level_operator = [&](const LinearOperator* was, const MatrixSetup& m) {
    return was ? remake_operator(*was, m, level_options) : make_operator("auto", m, level_options);
  };
  // A level's A_l in its kernel's FP32-values variant where it has one, unless --precision double (solve_types.hpp).
  // A level split over ranks takes its local block's kernel's (the exchange and the halo product stay FP64:
  // DistributedOperator::fp32_view).
  const int k_expected = level_options.expected_k;
  auto fp32_variant = [&](const LinearOperator& op) -> std::string {
    const bool fp64 = in.precision == Precision::double_precision;
    const KernelEntry* e = fp64 ? nullptr : find_kernel(op.chosen(k_expected));
    return e ? e->fp32_variant : std::string();
  };
  // An FP32 copy is a saving, not a need: where its values do not fit beside the FP64 ones the level keeps its
  // FP64 kernel (measured: poisson3d:600's level 1 on one H100, 2.5 GB short), which the report's table shows.
  auto fp32_or_null = [&](auto&& make) -> std::unique_ptr<LinearOperator> {
    try {
      return make();
    } catch (const DeviceMemoryError&) {
      release_idle_device_memory();
      return nullptr;
    }
  };
  auto level_matrix_operator = [&](const LinearOperator* was, const MatrixSetup& m) {
    std::unique_ptr<LinearOperator> op = level_operator(was, m);
    if (const std::string f32 = was ? std::string() : fp32_variant(*op); !f32.empty())
      if (auto op32 = fp32_or_null([&] { return make_operator(f32, m, level_options); })) op = std::move(op32);
    return op;
  };
  // A level every rank holds whole (on one GPU: every coarse level): on ranks their copies must run alike (their
  // coarse solves must agree for M to stay symmetric), so FP32 only where every rank could make its copy.
  // Collective on ranks: every rank reaches each whole level alike (the same matrix, the same decisions).
  auto whole_level_operator = [&](const LinearOperator* was, const MatrixSetup& m) {
    std::unique_ptr<LinearOperator> op = level_matrix_operator(was, m);
    if (!ranks) return op;
    const KernelEntry* chosen = find_kernel(op->chosen(k_expected));
    const bool fp32 = chosen && chosen->fp32_values;
    const double ranks_with_fp32 = sum_over_ranks(in.product, {fp32 ? 1.0 : 0.0}, s)[0];  // (every rank calls it)
    if (fp32 && ranks_with_fp32 < ranks->size()) op = level_operator(was, m);
    return op;
  };
  if (kept && kept->levels_.size() < 1) throw UsageError("amg: an update needs the hierarchy of a setup");
  // Level 0 applies the solver's operator, or one of its own: k columns as k SpMVs (deterministic), or FP32 values
  if (kept) {
    if (kept->levels_[0].owned) levels_[0].owned = level_operator(kept->levels_[0].owned.get(), in.matrix);
  } else if (in.product.rows() > o.coarse_rows && !ranks) {  // (a rank's level 0 is the distributed product)
    if (level_options.columnwise && level_options.expected_k > 1) levels_[0].owned = level_operator(nullptr, in.matrix);
    const std::string f32 = fp32_variant(levels_[0].owned ? *levels_[0].owned : in.product);
    if (!f32.empty())
      if (auto op32 = fp32_or_null([&] { return make_operator(f32, in.matrix, level_options); })) levels_[0].owned = std::move(op32);
  } else if (ranks && in.precision != Precision::double_precision) {
    levels_[0].owned = fp32_or_null([&] { return levels_[0].dist->fp32_view(level_options); });  // (null: none)
  }
  if (levels_[0].owned) levels_[0].op = levels_[0].owned.get();
  try {
    for (size_t l = 0;; ++l) {
      const DeviceCsr& a = *levels_[l].a;
      const int32_t n = a.rows;
      const std::string at = "amg level " + std::to_string(l) + ": ";
      const Level* was = kept ? &kept->levels_[l] : nullptr;  // an update: this level of kept's hierarchy
      // a level split over the ranks: every rank stops or goes on alike, by the level's rows over all ranks (a
      // rank's own can be few)
      const bool shared = levels_[l].dist != nullptr;
      const double level_rows = shared ? sum_over_ranks(*levels_[l].op, {double(n)}, s)[0] : double(n);
      levels_[l].global_rows = ranks ? static_cast<int64_t>(level_rows) : 0;
      if (kept ? l + 1 == kept->levels_.size() : level_rows <= o.coarse_rows || static_cast<int>(l) + 1 >= o.max_levels) break;
      char nvtx_name[32];
      std::snprintf(nvtx_name, sizeof nvtx_name, "amg-setup-level-%zu", l);
      NvtxRange level_range(nvtx_name);
      DeviceArray<double> diag, dinv;  // diag: the strength graph's (a setup's, not an update's)
      std::shared_ptr<const DeviceAggregates> kept_agg = was ? was->aggregates : nullptr;
      bool dense_here = false;  // coarsening stalled on a level small enough to be the coarsest
      agree_over_ranks(shared ? ranks : nullptr, [&] {
        if (kept_agg && kept_agg->of.size() != static_cast<size_t>(n))
          throw Error(at + "the kept aggregates are of " + std::to_string(kept_agg->of.size()) + " rows, the level has " +
                      std::to_string(n));
        timed("diagonal", [&] {  // (and the strength graph's diagonal in the same pass)
          if (!kept_agg) diag = DeviceArray<double>(static_cast<size_t>(n), "amg diagonal");
          dinv = checked_inverse_diagonal(a, in.matrix_name, (at + "smoothing").c_str(), s, levels_[l].first_row,
                                          kept_agg ? nullptr : diag.data());
        });
        if (!kept_agg) {
          DeviceCsr strength;
          timed("strength", [&] { strength = strength_graph(a, diag.data(), o.strength_theta, s); });
          timed("aggregation", [&] {
            kept_agg = std::make_shared<const DeviceAggregates>(aggregate_on_device(strength, o.seed, s));
          });
        }
        const DeviceAggregates& agg = *kept_agg;
        if (!was && (agg.count == 0 || agg.count > kStalledCoarsening * n)) {
          if (n > kMaxDenseRows)
            throw InputError(in.matrix_name, 0, at + "coarsening stalled (" + std::to_string(n) + " rows -> " +
                                                    std::to_string(agg.count) + " aggregates); try a smaller --amg-theta");
          // solve this level densely; a rank's level 0 (whose smoothing the others share) keeps its level and
          // takes every row as its own aggregate, so that the level below is its rows, solved densely
          if (!shared) dense_here = true;
          else kept_agg = std::make_shared<const DeviceAggregates>(singleton_aggregates(n));
        }
      });
      if (dense_here) break;
      const DeviceAggregates& agg = *kept_agg;
      Level& L = levels_[l];
      L.aggregates = kept_agg;
      timed("smoother", [&] {
        // (a level split over ranks: over the ranks, from the whole level's start vector)
        const SpectrumEstimate est = estimate_spectrum(*L.op, dinv.data(), o.eigen_steps, 1, s, L.first_row);
        if (!est.finite || !(est.lambda_max > 0))
          throw InputError(in.matrix_name, 0, at + "the eigenvalue estimate of D^-1 A failed");
        L.lambda_max = o.lambda_max_safety * est.lambda_max;
        if (o.smoother == AmgSmoother::chebyshev) {
          L.smoother = PolynomialSteps::chebyshev(L.lambda_max / o.smoother_ratio, L.lambda_max, o.smoother_degree);
        } else {
          L.smoother = PolynomialSteps::jacobi_sweeps(o.smoother_degree);
        }
      });
      if (shared) {  // the prolongator and Galerkin product over the ranks (solver/amg_ranks.hpp)
        RankGalerkin g;
        {
          const int smoothings = o.prolongator == AmgProlongator::plain ? 0 : o.prolongator_smoothings;
          g = rank_galerkin(*L.dist, a, agg, dinv.data(), o.prolongator_omega / (L.lambda_max / o.lambda_max_safety),
                            smoothings, s, [&](const char* phase, const std::function<void()>& work) { timed(phase, work); });
        }
        for (const std::string& what : g.library_products) library_products.push_back("level " + std::to_string(l) + " " + what);
        // a level that barely coarsens over all ranks (every rank sees the same counts, so every rank decides
        // alike): the next level held whole (the one-GPU rules then solve it densely), or, too large for that, the
        // one-GPU rule's error
        const bool stalled = !was && g.coarse_rows > kStalledCoarsening * level_rows;
        if (stalled && g.coarse_rows > kMaxDenseRows)
          throw InputError(in.matrix_name, 0, at + "coarsening stalled over the ranks (" + std::to_string(int64_t(level_rows)) +
                                                  " rows -> " + std::to_string(g.coarse_rows) +
                                                  " aggregates); try a smaller --amg-theta, or fewer GPUs");
        // the next level held whole by every rank once it is small (or the last a max_levels cap allows), so that
        // the coarsest is every rank's dense solve; an update keeps the first setup's choice
        const int64_t whole_rows = std::max<int64_t>(o.whole_level_rows, o.coarse_rows);
        L.next_held_whole = was ? was->next_held_whole
                                : g.coarse_rows <= whole_rows || static_cast<int>(l) + 2 >= o.max_levels || stalled;
        Level next;
        next.global_rows = g.coarse_rows;
        auto shared_csr = [](DeviceCsr&& m) { return std::make_shared<const DeviceCsr>(std::move(m)); };
        timed("level operators", [&] {
          if (o.smoother == AmgSmoother::l1_jacobi) {  // l1 over each row's every entry, its halo block's too
            const HaloRows h = L.dist->halo_rows();
            const DeviceCsr whole =
                join_columns(a, expand_rows(n, L.dist->halo_slots(), h.rows, h.row_ids, h.row_ptr, h.cols, h.values, s), s);
            L.scale = smoother_scaling(o, whole, std::move(dinv), s);
          } else {
            L.scale = smoother_scaling(o, a, std::move(dinv), s);
          }
          if (!L.next_held_whole) return;
          // P x_c over the whole x_c; b_c = the sum over the ranks of each rank's P' res
          next.a = std::make_shared<const DeviceCsr>(gather_coarse_level(*L.op, g, s));
          next.setup = std::make_unique<MatrixSetup>(next.a);
          next.owned = whole_level_operator(was ? kept->levels_[l + 1].owned.get() : nullptr, *next.setup);
          next.op = next.owned.get();
          L.r_setup = std::make_unique<MatrixSetup>(shared_csr(transpose(g.p, s)));
          L.r = make_summed_transfer(level_operator(nullptr, *L.r_setup), *ranks);
          L.p_setup = std::make_unique<MatrixSetup>(shared_csr(std::move(g.p)));
          L.p = level_operator(nullptr, *L.p_setup);
        });
        if (!L.next_held_whole) {
          // the rank's coarse rows split on the device into its local block and its halo block over the distinct
          // outside columns (sorted: by owner, as the plan's slots are); the plan on the host from the halo rows.
          // A rank's failure here (memory, a check) reaches every rank before the next collective. Each step
          // timed under its own name, and the wait for the slowest rank's Galerkin product apart.
          DeviceArray<int64_t> halo_columns;
          ColumnSplit cs;
          CompressedRows held;
          HaloPlan plan;
          timed("coarse level over ranks: waiting", [&] { sum_over_ranks(*L.op, {0.0}, s); });
          timed("coarse level over ranks: split", [&] {
            agree_over_ranks(ranks, [&] {
              halo_columns = columns_outside(g.coarse, g.first_coarse, g.own_coarse, s);
              cs = split_columns(g.coarse, g.first_coarse, g.own_coarse, halo_columns.data(),
                                 static_cast<int32_t>(halo_columns.size()), true, s);
              // the plan from the halo block's rows that hold entries alone (a few % of the rows): a host copy of
              // every row's offsets, and a host pass over them, took 35 ms on poisson3d:600's level 1 (4.8M rows a
              // rank on 4), as much again as its split on the device
              held = compress_rows(cs.halo, s);
              cs.halo = DeviceCsr();
              HeldRows h;
              h.rows = cs.local.rows;
              h.ids = held.ids.download<std::vector<int32_t>>();
              h.row_ptr = held.row_ptr.download<std::vector<int32_t>>();
              h.cols = held.cols.download<std::vector<int32_t>>();
              RowPartition coarse;
              coarse.first_row = g.coarse_first_row;
              plan = halo_plan(h, halo_columns.download(), coarse, ranks->rank());
            });
          });
          // (collective: every rank's sends against its peers')
          timed("coarse level over ranks: plan", [&] { check_plan_over_ranks(*L.op, plan, at); });
          timed("coarse level over ranks: operator", [&] {
            agree_over_ranks(ranks, [&] {
              next.dist_owned = std::make_unique<DistributedOperator>(shared_csr(std::move(cs.local)), std::move(held),
                                                                      std::move(plan), g.first_coarse, ranks->rank(),
                                                                      *ranks, level_options);
              next.dist = next.dist_owned.get();
              if (in.precision != Precision::double_precision)
                next.owned = fp32_or_null([&] { return next.dist->fp32_view(level_options); });
              next.op = next.owned ? next.owned.get() : next.dist;
              next.a = next.dist->local_setup().device_csr();
              next.first_row = g.first_coarse;
            });
          });
          timed("coarse level over ranks: transfers", [&] {
            agree_over_ranks(ranks, [&] {
              // P: the rank's own coarse columns, then the others as the coarse level's halo slots (every one is: A_c
              // couples each aggregate P reaches from a row to that row's own)
              ColumnSplit ps = split_columns(g.p, g.first_coarse, g.own_coarse, halo_columns.data(),
                                             next.dist->halo_slots(), true, s);
              if (ps.unmatched)
                throw Error(at + std::to_string(ps.unmatched) + " prolongator entries reach coarse rows outside the "
                                 "coarse level's halo (A not structurally symmetric?)");
              L.p_setup = std::make_unique<MatrixSetup>(shared_csr(std::move(ps.local)));
              L.p = make_halo_transfer(level_operator(nullptr, *L.p_setup), ps.halo, *next.dist, s);
              // R: over the rank's fine rows, and over its fine halo slots (the fine level's exchange of res)
              L.r_setup = std::make_unique<MatrixSetup>(shared_csr(std::move(g.r_own)));
              L.r = make_halo_transfer(level_operator(nullptr, *L.r_setup), g.r_halo, *L.dist, s);
            });
          });
        }
        levels_.push_back(std::move(next));
        continue;
      }
      DeviceCsr p;
      // product i's shape: its offsets learned on a setup, its columns on the first update (kept's level's, taken
      // and learned further: RowProductShape), and the transpose's order likewise on the first update
      const int products = (o.prolongator == AmgProlongator::plain ? 0 : o.prolongator_smoothings) + 2;
      L.product_shapes = was && was->product_shapes.size() == static_cast<size_t>(products)
                             ? was->product_shapes
                             : std::vector<RowProductShape>(static_cast<size_t>(products));
      if (was) L.transpose_shape = was->transpose_shape;
      auto shape = [&](int i) { return &L.product_shapes[static_cast<size_t>(i)]; };
      timed("prolongator", [&] {
        DeviceCsr p0 = tentative_prolongator(agg, n, s);
        if (o.prolongator == AmgProlongator::plain) {
          p = std::move(p0);
          return;
        }
        // omega = (4/3 by default) / lambda_max on the Lanczos estimate itself, not the smoother's safety-widened
        // bound: in the SciPy prototype (scripts/sa_prototype.py) 0.293 per V-cycle on 2D Poisson against 0.359
        // with the 1.1 factor; damped Jacobi stays stable for omega lambda < 2, far from the few % a Ritz value
        // can miss
        const double omega = o.prolongator_omega / (L.lambda_max / o.lambda_max_safety);
        p = std::move(p0);
        for (int step = 0; step < o.prolongator_smoothings; ++step) {  // P <- P - omega D^-1 A P
          p = row_product(a, p, &p, dinv.data(), -omega, s, nullptr, shape(step));
        }
      });
      auto coarse = std::make_shared<DeviceCsr>();
      std::shared_ptr<DeviceCsr> r;
      timed("galerkin: R = P'", [&] { r = std::make_shared<DeviceCsr>(transpose(p, s, was ? &L.transpose_shape : nullptr)); });
      // both products by our row-wise kernel; a row too wide for it (> 256 columns) makes one cuSPARSE's
      DeviceCsr ap;
      bool ap_by_library = false, rap_by_library = false;
      timed("galerkin: A P", [&] {
        ap = row_product(a, p, nullptr, nullptr, 1.0, s, &ap_by_library, shape(products - 2));
      });
      timed("galerkin: R (A P)", [&] {
        *coarse = row_product(*r, ap, nullptr, nullptr, 1.0, s, &rap_by_library, shape(products - 1));
      });
      if (ap_by_library || rap_by_library)
        library_products.push_back("level " + std::to_string(l) + (ap_by_library ? " A P" : "") +
                                   (rap_by_library ? " R (A P)" : ""));
      timed("level operators", [&] {
        L.scale = smoother_scaling(o, a, std::move(dinv), s);
        auto pp = std::make_shared<DeviceCsr>(std::move(p));
        L.p_setup = std::make_unique<MatrixSetup>(std::shared_ptr<const DeviceCsr>(pp));
        // R and P in FP32 where the precision allows, as the levels' operators (R = P' rounded alike: the cycle
        // stays symmetric), and on ranks (a level every rank holds whole) only where every rank could
        L.p = whole_level_operator(was ? was->p.get() : nullptr, *L.p_setup);
        L.r_setup = std::make_unique<MatrixSetup>(std::shared_ptr<const DeviceCsr>(r));
        L.r = whole_level_operator(was ? was->r.get() : nullptr, *L.r_setup);
        Level next;
        next.a = coarse;
        next.setup = std::make_unique<MatrixSetup>(std::shared_ptr<const DeviceCsr>(coarse));
        next.owned = whole_level_operator(was ? kept->levels_[l + 1].owned.get() : nullptr, *next.setup);
        next.op = next.owned.get();
        levels_.push_back(std::move(next));
      });
    }
    timed("coarse factorisation", [&] { factor_coarsest(*levels_.back().a, in.matrix_name); });
  } catch (const DeviceMemoryError& e) {
    const std::string on_rank = ranks ? ", rank " + std::to_string(ranks->rank()) + " of " + std::to_string(ranks->size()) : "";
    throw DeviceMemoryError("amg setup (level " + std::to_string(levels_.size() - 1) + " of the hierarchy" + on_rank + "): " + e.what() +
                            "; try --precond chebyshev or jacobi, or a larger --amg-theta");
  }

  for (size_t l = 0; l < levels_.size(); ++l) levels_[l].nvtx_name = "amg-level-" + std::to_string(l);
  report_.kind = Preconditioner::amg;
  double rows_sum = 0, nnz_sum = 0;
  // the complexities of the whole hierarchy: a split level's rows and entries summed over the ranks (every rank
  // has as many levels, split alike), a level held whole counted once
  std::vector<double> split_nnz(levels_.size(), 0.0);
  if (ranks) {
    for (size_t l = 0; l < levels_.size(); ++l)
      if (levels_[l].dist) split_nnz[l] = static_cast<double>(levels_[l].op->nnz());
    split_nnz = sum_over_ranks(in.product, split_nnz, s);
  }
  std::string fp32_levels;  // "0, 1 (dia-f32)": the levels whose kernel stores FP32 values
  std::string fp32_transfers;  // "0, 1": the levels whose R and P store FP32 values
  auto stores_fp32 = [](const std::unique_ptr<LinearOperator>& op) {
    const KernelEntry* e = op ? find_kernel(op->chosen(1)) : nullptr;
    return e && e->fp32_values;
  };
  for (size_t l = 0; l < levels_.size(); ++l) {
    const Level& L = levels_[l];
    if (stores_fp32(L.p) && stores_fp32(L.r)) fp32_transfers += (fp32_transfers.empty() ? "" : ", ") + std::to_string(l);
    AmgLevelReport lr;
    lr.rows = L.a->rows, lr.nnz = L.a->nnz;
    lr.kernel = l + 1 == levels_.size() ? "dense inverse" : L.op->chosen(std::max(1, in.expected_columns));
    lr.smoother_lambda_max = L.lambda_max;
    if (ranks) {
      lr.global_rows = L.dist ? L.global_rows : L.a->rows;
      lr.halo = L.dist ? L.dist->halo_slots() : 0;
      lr.held_whole = !L.dist;
    }
    // (over ranks: the local block's kernel, before " + halo csr-vector")
    if (const KernelEntry* e = find_kernel(lr.kernel.substr(0, lr.kernel.find(" + "))); e && e->fp32_values)
      fp32_levels += (fp32_levels.empty() ? "" : ", ") + std::to_string(l) + " (" + lr.kernel + ")";
    report_.levels.push_back(lr);
    rows_sum += ranks ? double(lr.global_rows) : lr.rows;
    nnz_sum += L.dist ? split_nnz[l] : static_cast<double>(lr.nnz);
  }
  if (!fp32_levels.empty()) {
    report_.precision = Precision::mixed;
    report_.precision_reason = "whose level operators read FP32 values on level(s) " + fp32_levels;
    if (!fp32_transfers.empty()) report_.precision_reason += ", R and P on level(s) " + fp32_transfers;
  } else if (in.precision == Precision::mixed) {
    throw UsageError("--precision mixed: no level of the AMG hierarchy runs a kernel with an FP32-values variant "
                     "(those with one: " + kernels_with_fp32_variant() + "; level 0 runs " + report_.levels[0].kernel +
                     (ranks ? " on rank " + std::to_string(ranks->rank()) : "") + ")");
  } else {
    report_.precision_reason = in.precision == Precision::double_precision
                                   ? "in FP64 (asked)"
                                   : "in FP64: no level's kernel has an FP32-values variant (those with one: " +
                                         kernels_with_fp32_variant() + ")";
  }
  const double fine_rows = ranks ? double(report_.levels[0].global_rows) : levels_[0].a->rows;
  const double fine_nnz = levels_[0].dist ? split_nnz[0] : static_cast<double>(levels_[0].a->nnz);
  report_.grid_complexity = fine_rows > 0 ? rows_sum / fine_rows : 0;
  report_.operator_complexity = fine_nnz > 0 ? nnz_sum / fine_nnz : 0;
  // the fused steps' second d, made here so that the report says what runs: a saving, not a need, only with room
  // left for it and the solver's own vectors (made later: four of the finest level's n x k, and a margin), else
  // the level's steps run apart (the same bits)
  // (an update that kept what it learned -- its products' columns, its transposes' order -- gives them up where
  // they would take a fused step the setup had)
  {
    const size_t solver_bytes = 6 * sizeof(double) * static_cast<size_t>(levels_[0].a->rows) *
                                static_cast<size_t>(std::max(1, in.expected_columns));
    auto make_second_ds = [&] {
      bool short_of_one = false;
      for (size_t l = 0; l + 1 < levels_.size(); ++l) {
        const Level& L = levels_[l];
        const size_t bytes = sizeof(double) * static_cast<size_t>(L.a->rows);
        if (fused(L) && L.d_next.size() == 0 && device_memory_info().free_bytes > bytes + solver_bytes)
          L.d_next = DeviceArray<double>(static_cast<size_t>(L.a->rows), "amg smoother step (fused)");
        short_of_one |= kept && fused(L) && L.d_next.size() == 0 && kept->levels_[l].d_next.size() > 0;
      }
      return short_of_one;
    };
    if (make_second_ds()) {
      for (Level& L : levels_) {
        for (RowProductShape& shape : L.product_shapes) shape.col_idx.reset();
        L.transpose_shape = TransposeShape{};
      }
      release_idle_device_memory();
      make_second_ds();
    }
  }
  char detail[256];
  std::snprintf(detail, sizeof detail, "%zu levels, %s aggregation (theta %.3g), V-cycle with %s %s %d before and after",
                levels_.size(), name_of(o.prolongator), o.strength_theta, name_of(o.smoother),
                o.smoother == AmgSmoother::chebyshev ? "of degree" : "sweeps:", o.smoother_degree);
  report_.detail = detail;
  std::string fused_levels;
  for (size_t l = 0; l + 1 < levels_.size(); ++l)
    if (runs_fused(levels_[l])) fused_levels += (fused_levels.empty() ? "" : ", ") + std::to_string(l);
  if (!fused_levels.empty()) report_.detail += "; the steps after the first fused into the product on level(s) " + fused_levels;
  if (kept) report_.detail += "; updated on new values: the first setup's aggregates and level kernels kept, its products' shapes reused";
  if (ranks) {
    size_t split = 0;
    while (split < levels_.size() && levels_[split].dist) ++split;
    report_.detail += "; on " + std::to_string(ranks->size()) + " ranks: " + std::to_string(split) +
                      " level(s) split over the ranks (aggregates inside each rank, the Galerkin product over them), " +
                      std::to_string(levels_.size() - split) + " held whole by every rank";
  }
  if (!library_products.empty()) {
    report_.detail += "; by cuSPARSE (a row wider than our product kernel takes):";
    for (const std::string& what : library_products) report_.detail += " " + what;
  }
  for (const std::string& name : phase_order) report_.phases.push_back({name, phase_ms[name]});
  report_.setup_ms = ms_since(t_total);
}

void AmgPreconditioner::factor_coarsest(const DeviceCsr& a, const std::string& matrix_name) {
  // The coarsest level is small: its Cholesky factor and inverse on the host (Eigen, a few ms at 1000 rows;
  // cuSOLVER would cost a 0.35 s library load), applied on the device as a dense product.
  // a max_levels cap can leave a level larger than the dense factor is for: refused, with what to change
  if (a.rows > kMaxDenseRows)
    throw UsageError("amg: the coarsest level has " + std::to_string(a.rows) + " rows, more than the dense factor's " +
                     std::to_string(kMaxDenseRows) + " (raise max_levels, or coarsen further)");
  coarse_rows_ = a.rows;
  const CsrMatrix h = download_csr(a);
  Eigen::MatrixXd dense = Eigen::MatrixXd::Zero(h.rows, h.rows);
  for (int32_t i = 0; i < h.rows; ++i)
    for (int32_t p = h.row_ptr[i]; p < h.row_ptr[i + 1]; ++p) dense(i, h.col_idx[p]) = h.values[p];
  Eigen::LLT<Eigen::MatrixXd> llt(dense);
  if (llt.info() != Eigen::Success)
    throw InputError(matrix_name, 0, "amg: the coarsest level (" + std::to_string(h.rows) +
                                         " rows) is not positive definite (its Cholesky factorisation failed), so "
                                         "the matrix is not SPD");
  Eigen::MatrixXd inverse = llt.solve(Eigen::MatrixXd::Identity(h.rows, h.rows));
  inverse = 0.5 * (inverse + inverse.transpose());  // exactly symmetric, so M^-1 is
  std::vector<double> row_major(static_cast<size_t>(h.rows) * h.rows);
  for (int32_t i = 0; i < h.rows; ++i)
    for (int32_t j = 0; j < h.rows; ++j) row_major[static_cast<size_t>(i) * h.rows + j] = inverse(i, j);
  coarse_inverse_ = DeviceArray<double>(row_major, "amg coarsest inverse");
}

void AmgPreconditioner::reserve(int k) const {
  if (k <= reserved_k_) return;
  for (size_t l = 0; l < levels_.size(); ++l) {
    const Level& L = levels_[l];
    if (L.dist) L.dist->reserve(k);  // its exchange's buffers: never grown inside a captured batch
    const size_t size = static_cast<size_t>(L.a->rows) * k;
    if (l > 0) L.b = DeviceArray<double>(size, "amg level rhs"), L.x = DeviceArray<double>(size, "amg level solution");
    if (l + 1 < levels_.size()) L.res = DeviceArray<double>(size, "amg level residual"), L.d = DeviceArray<double>(size, "amg smoother step");
  }
  reserved_k_ = k;
}

void AmgPreconditioner::cycle(size_t l, const double* b, double* x, int k, cudaStream_t s) const {
  const Level& L = levels_[l];
  NvtxRange range(L.nvtx_name.c_str());
  if (l + 1 == levels_.size()) {  // x = A_c^-1 b
    launch_dense_apply(coarse_rows_, k, coarse_inverse_.data(), b, x, s);
    return;
  }
  const Level& next = levels_[l + 1];
  const int64_t n = L.a->rows;
  double* const d_next = L.d_next.size() ? L.d_next.data() : nullptr;  // (fused steps: d alternates with it)
  apply_polynomial(*L.op, L.scale.data(), L.smoother, b, x, true, L.res.data(), L.d.data(), k, s, d_next);  // pre-smooth from 0
  if (!(k == 1 && residual_step(*L.op, b, x, L.res.data(), s))) {  // res = b - A x (one launch where A reads b in place)
    CHECK_CUDA(cudaMemcpyAsync(L.res.data(), b, sizeof(double) * n * k, cudaMemcpyDeviceToDevice, s));
    L.op->apply(-1.0, x, 1.0, L.res.data(), k, s);
  }
  L.r->apply(1.0, L.res.data(), 0.0, next.b.data(), k, s);   // b_c = R res
  cycle(l + 1, next.b.data(), next.x.data(), k, s);          // x_c = V-cycle(b_c)
  L.p->apply(1.0, next.x.data(), 1.0, x, k, s);              // x += P x_c
  apply_polynomial(*L.op, L.scale.data(), L.smoother, b, x, false, L.res.data(), L.d.data(), k, s, d_next);  // post-smooth
}

double AmgPreconditioner::bytes_per_apply(int k) const {
  double bytes = 0;
  for (size_t l = 0; l + 1 < levels_.size(); ++l) {
    const Level& L = levels_[l];
    const double a_bytes = L.op->bytes_per_apply(k), n = L.a->rows;
    // two smoothings (one SpMV per step after the first, plus the residual of the post-smoothing), the
    // residual, R and P; a fused step (k = 1) reads res and d once less (16 B a row)
    const double fused_steps = k == 1 && runs_fused(L) ? 2.0 * (L.smoother.size() - 1) : 0.0;
    bytes += (2.0 * L.smoother.size() + 1) * a_bytes + 2 * L.smoother.size() * 48.0 * n * k - fused_steps * 16.0 * n +
             L.r->bytes_per_apply(k) + L.p->bytes_per_apply(k);
  }
  bytes += 8.0 * coarse_rows_ * coarse_rows_ + 16.0 * coarse_rows_ * k;
  return bytes;
}

// The launches of cycle() and apply_polynomial() in order, each with the bytes it moves (k columns): the copy of
// b into res (16 B a row; none where the level's operator reads b in place), a product with beta = 1 (its bytes
// and res, or b, read: 8 B a row), Chebyshev's first step (scale and res read, d and x written: 32 B a row; 40
// with x read after the coarse correction), a later step apart (its product, then 48 B a row) or fused (its
// product and 40 B a row in one launch), R, P with beta = 1, and the coarsest level's dense product.
std::vector<double> AmgPreconditioner::bytes_per_launch(int k) const {
  std::vector<double> launches;
  std::function<void(size_t)> level = [&](size_t l) {
    if (l + 1 == levels_.size()) {
      launches.push_back(8.0 * coarse_rows_ * coarse_rows_ + 16.0 * coarse_rows_ * k);
      return;
    }
    const Level& L = levels_[l];
    const double a = L.op->bytes_per_apply(k), nk = double(L.a->rows) * k;
    const bool steps_fused = k == 1 && runs_fused(L);
    const bool in_place = k == 1 && reads_residual_in_place(*L.op);  // (res = b - A x in one launch, no copy)
    auto smooth = [&](bool x_is_zero) {
      if (!in_place) launches.push_back(16 * nk);            // res = b
      if (!x_is_zero) launches.push_back(a + 8 * nk);        // res -= A x
      launches.push_back((x_is_zero ? 32 : 40) * nk);        // the first step
      for (int i = 1; i < L.smoother.size(); ++i) {
        if (steps_fused) {
          launches.push_back(a + 40 * nk);                   // res -= A d; d' = c1 d + c2 S res; x += d'
        } else {
          launches.push_back(a + 8 * nk);                    // res -= A d
          launches.push_back(48 * nk);                       // d' = c1 d + c2 S res; x += d'
        }
      }
    };
    smooth(true);
    if (!in_place) launches.push_back(16 * nk);                   // res = b
    launches.push_back(a + 8 * nk);                               // res -= A x
    launches.push_back(L.r->bytes_per_apply(k));                  // b_c = R res
    level(l + 1);
    launches.push_back(L.p->bytes_per_apply(k) + 8 * nk);         // x += P x_c
    smooth(false);
  };
  if (!levels_.empty()) level(0);
  return launches;
}

}  // namespace

std::unique_ptr<PreconditionerOp> make_amg(const PreconditionerOptions& options, const PreconditionerInputs& inputs) {
  return std::make_unique<AmgPreconditioner>(options, inputs);
}

std::unique_ptr<PreconditionerOp> update_amg(const PreconditionerOp& kept, const PreconditionerOptions& options,
                                             const PreconditionerInputs& inputs) {
  const auto* amg = dynamic_cast<const AmgPreconditioner*>(&kept);
  if (!amg) throw UsageError("amg: an update needs the hierarchy make_amg set up");
  return std::make_unique<AmgPreconditioner>(options, inputs, amg);
}

}  // namespace spcg
