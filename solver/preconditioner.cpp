// The preconditioners behind PreconditionerOp (solver/preconditioner.hpp): Jacobi, block-Jacobi, Chebyshev
// and the factory (AMG is solver/amg.cpp), the polynomial steps they and AMG's smoothers share, and auto.
#include "solver/preconditioner.hpp"

#include <algorithm>
#include <utility>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>

#include "solver/amg.hpp"
#include "kernels/precond/amg_kernels.hpp"
#include "kernels/matrix_setup.hpp"
#include "kernels/precond/precond_ops.hpp"
#include "kernels/registry.hpp"
#include "solver/solver.hpp"
#include "solver/spectrum.hpp"
#include "kernels/solver_ops/thrust_ops.hpp"
#include "kernels/solver_ops/cg_ops.hpp"
#include "sparse/timing.hpp"

namespace spcg {
namespace {

std::string format(const char* fmt, double a, double b = 0) {
  char buf[160];
  std::snprintf(buf, sizeof buf, fmt, a, b);
  return buf;
}

// M = D^-1; the fused solver kernels take the diagonal itself, apply() serves the general paths.
class JacobiPreconditioner final : public PreconditionerOp {
 public:
  JacobiPreconditioner(DeviceArray<double> dinv, double setup_ms)
      : PreconditionerOp(static_cast<int64_t>(dinv.size())), dinv_(std::move(dinv)) {
    report_.kind = Preconditioner::jacobi;
    report_.phases = {{"inverse diagonal", setup_ms}};
    report_.setup_ms = setup_ms;
  }
  void apply(const double* R, double* Z, int k, cudaStream_t s) const override {
    launch_row_scale(rows_, k, dinv_.data(), R, Z, s);
  }
  const double* inverse_diagonal() const override { return dinv_.data(); }
  double bytes_per_apply(int k) const override { return 8.0 * rows_ + 16.0 * rows_ * k; }

 private:
  DeviceArray<double> dinv_;
};

// z = q(D^-1 A) D^-1 r: `degree` Chebyshev steps from zero on [lambda_max / ratio, lambda_max] of D^-1 A
// (degree - 1 SpMVs). q(lambda) > 0 on the spectrum, so M^-1 is SPD; the interval's top comes from a few
// Lanczos steps times a safety factor (Ritz values lie below the true lambda_max). On several GPUs the products
// are the distributed operator's (collective: every rank applies the polynomial together) and D^-1 the rank's
// rows of the whole diagonal, so M is one GPU's M; the Lanczos estimate runs over the ranks with its dot
// products summed in rank order, so every rank fits the polynomial to the same interval, bit for bit.
class ChebyshevPreconditioner final : public PreconditionerOp {
 public:
  ChebyshevPreconditioner(const PreconditionerOptions& o, const PreconditionerInputs& in)
      : PreconditionerOp(in.product.rows()), a_(&in.product) {
    if (o.chebyshev_degree < 1 || o.chebyshev_degree > 64) throw UsageError("chebyshev: the degree must be 1..64");
    if (!(o.chebyshev_ratio > 1)) throw UsageError("chebyshev: the eigenvalue ratio must be > 1");
    if (o.eigen_steps < 1) throw UsageError("chebyshev: the eigenvalue estimate needs at least one Lanczos step");
    // --deterministic: k columns as k SpMVs, so that a k-column apply equals k single applies bitwise. The
    // columnwise twin is made from the matrix, so only where the product is the matrix's own (one GPU): a
    // rank's product also reads its peers' rows, and across ranks --deterministic promises repeats for a rank
    // count, which the distributed product keeps at any width.
    if (in.operator_options.deterministic && in.expected_columns > 1 && rows_ > 0 && !ranks_of(in.product)) {
      OperatorOptions columnwise = in.operator_options;
      columnwise.columnwise = true;
      columnwise.autotune = false;
      columnwise.expected_k = in.expected_columns;
      owned_ = make_operator("auto", in.matrix, columnwise);
      a_ = owned_.get();
    }
    const auto t0 = std::chrono::steady_clock::now();
    // a rank's non-positive diagonal reaches every rank before the Lanczos estimate's sums
    agree_over_ranks(ranks_of(in.product), [&] {
      dinv_ = checked_inverse_diagonal(*in.matrix.device_csr(), in.matrix_name, "chebyshev", 0, in.first_row);
    });
    const double diagonal_ms = ms_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    const SpectrumEstimate est = estimate_spectrum(*a_, dinv_.data(), o.eigen_steps, 1, 0, in.first_row);
    if (est.rows > 0 && (!est.finite || !(est.lambda_max > 0)))  // (the whole system's verdict: every rank's alike)
      throw InputError(in.matrix_name, 0, "chebyshev: the eigenvalue estimate of D^-1 A failed (" +
                                              std::string(est.finite ? "lambda_max <= 0" : "NaN or Inf met") + ")");
    lambda_max_ = o.lambda_max_safety * est.lambda_max;
    lambda_min_ = lambda_max_ / o.chebyshev_ratio;
    steps_ = PolynomialSteps::chebyshev(lambda_min_, lambda_max_, o.chebyshev_degree);
    fuse_ = o.fuse_smoothing && offers_smoothing_step(*a_);
    report_.kind = Preconditioner::chebyshev;
    report_.lambda_min = lambda_min_, report_.lambda_max = lambda_max_;
    report_.detail = "degree " + std::to_string(o.chebyshev_degree) + format(" on [%.4g, %.4g] of D^-1 A", lambda_min_, lambda_max_) +
                     " (Lanczos " + std::to_string(est.steps) + " steps)";
    report_.phases = {{"inverse diagonal", diagonal_ms}, {"eigenvalue estimate", ms_since(t1)}};
    report_.setup_ms = ms_since(t0);
  }
  void reserve(int k) const override {
    // a saving, not a need: only with room for it and the solver's vectors (made after this), else the steps run
    // apart (the same bits)
    const size_t bytes = sizeof(double) * static_cast<size_t>(rows_);
    if (fuse_ && d_next_.size() == 0 && rows_ > 0 && device_memory_info().free_bytes > bytes * (1 + 6 * static_cast<size_t>(k)))
      d_next_ = DeviceArray<double>(rows_, "chebyshev step (fused)");
    if (static_cast<int64_t>(res_.size()) >= rows_ * k) return;
    res_ = DeviceArray<double>(rows_ * k, "chebyshev residual");
    d_ = DeviceArray<double>(rows_ * k, "chebyshev step");
  }
  void apply(const double* R, double* Z, int k, cudaStream_t s) const override {
    apply_polynomial(*a_, dinv_.data(), steps_, R, Z, true, res_.data(), d_.data(), k, s,
                     d_next_.size() ? d_next_.data() : nullptr);
  }
  double bytes_per_apply(int k) const override {  // a fused step (k = 1) reads res and d once less
    const double fused_steps = k == 1 && fuse_ ? steps_.size() - 1.0 : 0.0;
    return (steps_.size() - 1) * a_->bytes_per_apply(k) + steps_.size() * 48.0 * rows_ * k - fused_steps * 16.0 * rows_;
  }
  double lambda_max() const { return lambda_max_; }

 private:
  const LinearOperator* a_;                  // the solver's product (distributed on several GPUs), or owned_
  std::unique_ptr<LinearOperator> owned_;    // --deterministic with k > 1 on one GPU: a columnwise one
  DeviceArray<double> dinv_;                 // this GPU's rows of D^-1
  double lambda_min_ = 0, lambda_max_ = 0;
  PolynomialSteps steps_;
  bool fuse_ = false;  // the steps fused into a_'s product (PreconditionerOptions::fuse_smoothing, a kernel that can)
  mutable DeviceArray<double> res_, d_, d_next_;
};

// b x b diagonal blocks, inverted at setup by a Cholesky per block (one thread each), applied by one kernel. The
// blocks are A's node blocks (rows [m b, m b + b) of A) and come from this GPU's diagonal block: on several GPUs
// each rank inverts the blocks of its own rows, and a node block that straddles two ranks is cut at the
// boundary, each rank inverting its part (kernels/precond/precond_ops.hpp), so the apply needs no exchange. A
// partition whose boundaries are multiples of b keeps one GPU's M; any other differs from it in the cut blocks.
// The detected block size is the whole system's: every rank's rows checked, the verdicts summed over the ranks.
class BlockJacobiPreconditioner final : public PreconditionerOp {
 public:
  // kept_block: an update's, the first setup's block size (its detection read the pattern only)
  BlockJacobiPreconditioner(const PreconditionerOptions& o, const PreconditionerInputs& in, int kept_block = 0)
      : PreconditionerOp(in.product.rows()) {
    const auto t0 = std::chrono::steady_clock::now();
    const DeviceCsr& a = *in.matrix.device_csr();
    std::string how = kept_block ? " (kept from the first setup)" : "";
    b_ = kept_block ? kept_block : o.block_size;
    if (b_ < 0 || b_ > kBlockJacobiMaxSize)
      throw UsageError("block-jacobi: --block-size must be 0 (detect) or 1.." + std::to_string(kBlockJacobiMaxSize));
    if (b_ == 0) {
      b_ = detect_node_blocks(a, in);
      how = b_ ? " (detected: every row's columns come in aligned runs of " + std::to_string(b_) + ")"
               : " (no node block structure found: contiguous rows)";
      if (!b_) b_ = kDefaultBlock;
    }
    offset_ = static_cast<int>(in.first_row % b_);
    const double detect_ms = ms_since(t0);
    const auto t1 = std::chrono::steady_clock::now();
    const int64_t blocks = block_jacobi_blocks(rows_, b_, offset_);
    inverses_ = DeviceArray<double>(static_cast<size_t>(blocks) * b_ * b_, "block-Jacobi inverses");
    DeviceArray<int32_t> bad(1, "block-Jacobi failure");
    const int32_t none = INT32_MAX;
    CHECK_CUDA(cudaMemcpy(bad.data(), &none, sizeof none, cudaMemcpyHostToDevice));
    launch_block_jacobi_setup(a, b_, offset_, inverses_.data(), bad.data(), 0);
    int32_t first_bad = none;
    CHECK_CUDA(cudaMemcpy(&first_bad, bad.data(), sizeof first_bad, cudaMemcpyDeviceToHost));
    if (first_bad != none) {  // the block's rows of A: [lo, hi) of this GPU's, shifted by its first row
      const int64_t lo = std::max<int64_t>(int64_t{first_bad} * b_ - offset_, 0);
      const int64_t hi = std::min<int64_t>(int64_t{first_bad} * b_ + b_ - offset_, rows_);
      throw InputError(in.matrix_name, 0, "block-jacobi: diagonal block " + std::to_string((in.first_row + lo) / b_ + 1) +
                                              " (rows " + std::to_string(in.first_row + lo + 1) + ".." +
                                              std::to_string(in.first_row + hi) +
                                              ") is not positive definite, so the matrix is not SPD");
    }
    report_.kind = Preconditioner::block_jacobi;
    report_.block_size = b_;
    report_.detail = "blocks " + std::to_string(b_) + " x " + std::to_string(b_) + how;
    if (ranks_of(in.product)) report_.detail += "; rank-local: a block across a rank boundary is cut there";
    report_.phases = {{"block size", detect_ms}, {"invert blocks", ms_since(t1)}};
    report_.setup_ms = ms_since(t0);
  }
  void apply(const double* R, double* Z, int k, cudaStream_t s) const override {
    launch_block_jacobi_apply(rows_, b_, offset_, inverses_.data(), R, Z, k, s);
  }
  double bytes_per_apply(int k) const override { return 8.0 * b_ * rows_ + 16.0 * rows_ * k; }
  int block_size() const { return b_; }

 private:
  static constexpr int kDefaultBlock = 4;
  static constexpr int kCandidates[] = {6, 5, 4, 3, 2};  // the largest node block that fits is taken
  // The largest candidate b whose node blocks every row of A follows (0: none): each GPU checks its rows (a rank
  // its diagonal block, aligned to A's rows), and the failures and the row count are summed over the ranks, so
  // that every rank takes the same b, and A's row count must be a multiple of it.
  static int detect_node_blocks(const DeviceCsr& a, const PreconditionerInputs& in) {
    constexpr int count = static_cast<int>(std::size(kCandidates));
    DeviceArray<double> failed(count, "node block check");
    failed.zero();
    for (int c = 0; c < count; ++c)
      launch_node_block_check(a, kCandidates[c], static_cast<int>(in.first_row % kCandidates[c]), failed.data() + c, 0);
    std::vector<double> mine = failed.download();
    mine.insert(mine.begin(), static_cast<double>(a.rows));
    const std::vector<double> all = sum_over_ranks(in.product, mine, 0);  // [rows, failures per candidate]
    const int64_t rows = static_cast<int64_t>(all[0]);
    for (int c = 0; c < count; ++c)
      if (rows > 0 && all[static_cast<size_t>(c) + 1] == 0 && rows % kCandidates[c] == 0) return kCandidates[c];
    return 0;
  }
  int b_ = 0;
  int offset_ = 0;  // this GPU's first row's place in its node block: (first row of A) mod b
  DeviceArray<double> inverses_;
};

// auto's "none", kept only to carry its reason into the report: the solvers treat it as no preconditioner.
class NoPreconditioner final : public PreconditionerOp {
 public:
  NoPreconditioner(int64_t rows, const std::string& reason) : PreconditionerOp(rows) {
    report_.kind = Preconditioner::none;
    report_.reason = reason;
  }
  void apply(const double* R, double* Z, int k, cudaStream_t s) const override {
    if (rows_ > 0 && k > 0) CHECK_CUDA(cudaMemcpyAsync(Z, R, sizeof(double) * rows_ * k, cudaMemcpyDeviceToDevice, s));
  }
  double bytes_per_apply(int k) const override { return 16.0 * rows_ * k; }
};

}  // namespace

std::unique_ptr<PreconditionerOp> make_jacobi(const std::vector<double>& inverse_diagonal) {
  return std::make_unique<JacobiPreconditioner>(DeviceArray<double>(inverse_diagonal, "Jacobi inverse diagonal"), 0.0);
}

PolynomialSteps PolynomialSteps::chebyshev(double lambda_min, double lambda_max, int degree) {
  // Saad, Alg. 12.1: theta the interval's centre, delta its half width, sigma = theta / delta
  PolynomialSteps p;
  const double theta = 0.5 * (lambda_max + lambda_min), delta = 0.5 * (lambda_max - lambda_min);
  const double sigma = theta / delta;
  double rho = 1.0 / sigma;
  p.c1.push_back(0.0), p.c2.push_back(1.0 / theta);  // d_0 = S r / theta
  for (int i = 1; i < degree; ++i) {
    const double rho_next = 1.0 / (2.0 * sigma - rho);
    p.c1.push_back(rho_next * rho);   // d_i = rho_i rho_{i-1} d_{i-1} + (2 rho_i / delta) S r_i
    p.c2.push_back(2.0 * rho_next / delta);
    rho = rho_next;
  }
  return p;
}

PolynomialSteps PolynomialSteps::jacobi_sweeps(int sweeps) {
  PolynomialSteps p;
  p.c1.assign(static_cast<size_t>(sweeps), 0.0);
  p.c2.assign(static_cast<size_t>(sweeps), 1.0);
  return p;
}

void apply_polynomial(const LinearOperator& A, const double* scale, const PolynomialSteps& steps, const double* b,
                      double* x, bool x_is_zero, double* res, double* d, int k, cudaStream_t s, double* d_next) {
  const int64_t n = A.rows();
  if (k == 0) return;  // (a rank without rows goes on: A's applies are collective)
  // res = b - A x. Where A reads the residual in place (one column), b is not copied into res: from x = 0 the
  // first step reads b itself and the next one's product writes res = b - A d; else res = b - A x is one launch.
  // The same arithmetic either way, so the same bits.
  const bool in_place = k == 1 && reads_residual_in_place(A);
  const double* res_now = res;  // the residual the next step reads
  if (in_place && x_is_zero) {
    res_now = b;
  } else if (!(in_place && residual_step(A, b, x, res, s))) {
    if (n) CHECK_CUDA(cudaMemcpyAsync(res, b, sizeof(double) * n * k, cudaMemcpyDeviceToDevice, s));
    if (!x_is_zero) A.apply(-1.0, x, 1.0, res, k, s);
  }
  double* d_now = d;  // d_{i-1}
  for (int i = 0; i < steps.size(); ++i) {
    // res -= A d_{i-1};  d_i = c1 d_{i-1} + c2 S res;  x += d_i  (one launch where A fuses the step)
    const double* res_in = res_now == res ? nullptr : res_now;  // (b, before the first product from x = 0)
    if (i > 0 && k == 1 && d_next &&
        smoothing_step(A, d_now, d_next, res, res_in, x, scale, steps.c1[i], steps.c2[i], s)) {
      std::swap(d_now, d_next);
      res_now = res;
      continue;
    }
    if (i > 0 && res_in) {
      if (!residual_step(A, res_in, d_now, res, s)) throw Error("apply_polynomial: the operator declined a residual it offers");
      res_now = res;
    } else if (i > 0) {
      A.apply(-1.0, d_now, 1.0, res, k, s);
    }
    launch_chebyshev_step(n, k, scale, res_now, d_now, x, steps.c1[i], steps.c2[i], i == 0, x_is_zero && i == 0, s);
  }
}

DeviceArray<double> checked_inverse_diagonal(const DeviceCsr& a, const std::string& matrix_name, const char* who,
                                             cudaStream_t s, int64_t first_row, double* diagonal) {
  DeviceArray<double> d(static_cast<size_t>(a.rows), "inverse diagonal");
  const DiagonalSummary sum = inverse_diagonal(a, d.data(), s, diagonal);
  if (sum.first_nonpositive != INT32_MAX) {
    const double value = sum.first_value;
    throw InputError(matrix_name, 0, std::string(who) + " needs a positive diagonal, but row " +
                                         std::to_string(first_row + sum.first_nonpositive + 1) + " has diagonal " +
                                         (value == 0 ? std::string("0 (zero or missing)") : format("%.6g", value)));
  }
  return d;
}

namespace {

// Jacobi-CG for `iterations` steps on a random right-hand side (deterministic seed; the whole system's draws at
// this GPU's rows), in two batches on the iteration engine (no host round trip inside a batch), over the ranks
// where A's rows are a share; returns ||r||^2 by iteration: every iteration's from the residual history the fused
// kernels keep on the device (one GPU), else at least those the engine read between its batches (0, the
// middle and the end), which are all the rule below reads. Fewer when it converged or broke down.
std::map<int, double> jacobi_cg_trial(const PreconditionerInputs& in, const double* dinv, int iterations) {
  const LinearOperator& op = in.product;
  const int64_t n = op.rows();
  SolveOptions o;
  o.stop.rtol = 0, o.stop.atol = 0, o.stop.max_iterations = iterations;  // every step runs
  o.check_every = std::max(1, iterations / 2), o.graph = Switch::off, o.time_kernels = false, o.keep_history = true;
  IterationEngine e("auto trial", std::vector<double>{1.0}, o, ranks_of(op));
  DeviceArray<double> b(n, "auto trial b"), x(n, "auto trial x");
  launch_fill_splitmix_uniform(AutoPreconditionerRule::trial_seed, b.data(), static_cast<size_t>(n), e.stream(),
                               static_cast<uint64_t>(in.first_row));
  launch_fill(0.0, x.data(), static_cast<size_t>(n), e.stream());
  cg_recurrences(e, op, dinv, b.data(), x.data(), 1, 0);
  const SolveResult r = e.finish();
  std::map<int, double> rr;
  for (const auto& [iteration, norm] : r.history.at(0)) rr[iteration] = norm * norm;
  return rr;
}

// The whole diagonal's span, from every GPU's summary (a rank's rows only): gathered over the ranks, so that
// every rank decides from the same numbers.
struct DiagonalSpan {
  int64_t rows = 0;
  bool positive = false;  // every a_ii > 0
  double min = 0, max = 0;
};
DiagonalSpan diagonal_over_ranks(const PreconditionerInputs& in, const DiagonalSummary& mine) {
  const int32_t n = in.matrix.rows();
  const bool positive = mine.first_nonpositive == INT32_MAX;
  const std::vector<double> all =
      gather_over_ranks(in.product, {double(n), positive ? 1.0 : 0.0, mine.min, mine.max}, 0);  // ranks x 4
  DiagonalSpan span;
  span.positive = true;
  span.min = std::numeric_limits<double>::infinity(), span.max = 0;
  for (size_t r = 0; r < all.size(); r += 4) {
    if (all[r] == 0) continue;  // a rank without rows has no diagonal
    span.rows += static_cast<int64_t>(all[r]);
    span.positive &= all[r + 1] == 1.0;
    span.min = std::min(span.min, all[r + 2]), span.max = std::max(span.max, all[r + 3]);
  }
  span.positive &= span.rows > 0;
  return span;
}

}  // namespace

PreconditionerChoice choose_preconditioner(const PreconditionerInputs& in) {
  using Rule = AutoPreconditionerRule;
  PreconditionerChoice c;
  DeviceArray<double> d(static_cast<size_t>(in.matrix.rows()), "auto: inverse diagonal");
  const DiagonalSpan diagonal = diagonal_over_ranks(in, inverse_diagonal(*in.matrix.device_csr(), d.data(), 0));
  const int64_t n = diagonal.rows;
  const double lo = diagonal.min, hi = diagonal.max;
  const bool positive = diagonal.positive;
  const bool constant = positive && hi / lo - 1 <= Rule::constant_diagonal;
  // between none and Jacobi: Jacobi, unless it would change no iterate
  auto none_or_jacobi = [&](const std::string& why) {
    if (constant) {
      c.kind = Preconditioner::none;
      c.reason = why + format("; constant diagonal (%.6g): Jacobi would only scale, and change no iterate", lo);
    } else {
      c.kind = positive ? Preconditioner::jacobi : Preconditioner::none;
      c.reason = why + (positive ? "" : "; the diagonal is not positive");
    }
    return c;
  };
  // where Jacobi-CG would take long: AMG (on one GPU or several: AutoPreconditionerRule's comment)
  auto amg_because = [&](const std::string& why) {
    c.kind = Preconditioner::amg;
    c.reason = why;
    return c;
  };
  if (n < Rule::min_rows_for_amg || !positive)
    return none_or_jacobi(std::to_string(n) + " rows < " + std::to_string(Rule::min_rows_for_amg) +
                          ": latency-bound iterations, where no hierarchy's setup pays back");
  // A diagonal spanning decades: coefficient jumps, whose few small eigenvalues (one per low-coefficient region)
  // Jacobi-CG meets only late: on jump3d:128 the trial below predicted 332 iterations, it took 1206
  if (hi / lo >= Rule::coefficient_contrast)
    return amg_because(format("the diagonal spans %.2g (%.3g", hi / lo, lo) +
                            format(" .. %.3g): coefficient jumps, where Jacobi-CG stalls on the low-coefficient regions", hi));
  // The short trial: Jacobi-CG's iterations to rtol, from the rate of the trial's second half (past CG's first
  // transient) on a random right-hand side (all modes excited: no easier than a user's). A Lanczos estimate of
  // kappa cannot tell these apart: after 20 steps it saw kappa >= ~160 on every 3D problem, from
  // poisson3d:128's 319 iterations to jump3d:128's 1206.
  const auto t0 = std::chrono::steady_clock::now();
  const std::map<int, double> rr = jacobi_cg_trial(in, constant ? nullptr : d.data(), Rule::trial_iterations);
  const int done = rr.empty() ? 0 : rr.rbegin()->first, half = done / 2;
  const double trial_ms = ms_since(t0);
  if (done < Rule::trial_iterations || !rr.count(0) || !rr.count(half) || !(rr.at(done) > 0) || !std::isfinite(rr.at(done)))
    return none_or_jacobi(format("a %.0f-iteration Jacobi-CG trial converged or stopped", double(Rule::trial_iterations)));
  const double still = std::sqrt(rr.at(done) / rr.at(0));  // ||r|| / ||b|| after the trial
  if (still <= in.rtol)
    return none_or_jacobi(format("a %.0f-iteration Jacobi-CG trial reached rtol", double(Rule::trial_iterations)));
  // per iteration, the factor of ||r|| over the second half
  const double rate = std::pow(rr.at(done) / rr.at(half), 0.5 / (done - half));
  const double predicted = rate < 1 ? done + std::log(in.rtol / still) / std::log(rate) : 1e30;
  const std::string measured = format("Jacobi-CG trial (%.0f iterations", double(Rule::trial_iterations)) +
                               format(", %.1f ms): ~%.0f iterations to rtol", trial_ms, predicted);
  if (predicted >= Rule::amg_min_jacobi_iterations)
    return amg_because(measured + format(" >= %.0f, where AMG's setup pays back", Rule::amg_min_jacobi_iterations));
  return none_or_jacobi(measured + format(" < %.0f, too few for AMG's setup to pay back", Rule::amg_min_jacobi_iterations));
}

std::unique_ptr<PreconditionerOp> update_preconditioner(const PreconditionerOp& kept, const PreconditionerOptions& o,
                                                        const PreconditionerInputs& in) {
  const PreconditionerReport& was = kept.report();
  std::unique_ptr<PreconditionerOp> m;
  switch (was.kind) {
    case Preconditioner::none:  // auto's none (no preconditioner at all has nothing to update)
    case Preconditioner::automatic: m = std::make_unique<NoPreconditioner>(in.product.rows(), was.reason); break;
    case Preconditioner::jacobi: m = make_preconditioner(Preconditioner::jacobi, o, in); break;
    case Preconditioner::block_jacobi: m = std::make_unique<BlockJacobiPreconditioner>(o, in, was.block_size); break;
    case Preconditioner::chebyshev: m = std::make_unique<ChebyshevPreconditioner>(o, in); break;
    case Preconditioner::amg: m = update_amg(kept, o, in); break;
  }
  if (!was.reason.empty()) m->set_reason(was.reason);
  return m;
}

std::unique_ptr<PreconditionerOp> make_preconditioner(Preconditioner kind, const PreconditionerOptions& o,
                                                      const PreconditionerInputs& in) {
  std::string reason;
  if (kind == Preconditioner::automatic) {
    const PreconditionerChoice choice = choose_preconditioner(in);
    kind = choice.kind, reason = choice.reason;
  }
  std::unique_ptr<PreconditionerOp> m;
  switch (kind) {
    case Preconditioner::none:
    case Preconditioner::automatic: break;
    case Preconditioner::jacobi: {
      const auto t0 = std::chrono::steady_clock::now();
      DeviceArray<double> dinv = checked_inverse_diagonal(*in.matrix.device_csr(), in.matrix_name, "Jacobi preconditioner", 0,
                                                          in.first_row);
      m = std::make_unique<JacobiPreconditioner>(std::move(dinv), ms_since(t0));
      break;
    }
    case Preconditioner::block_jacobi: m = std::make_unique<BlockJacobiPreconditioner>(o, in); break;
    case Preconditioner::chebyshev: m = std::make_unique<ChebyshevPreconditioner>(o, in); break;
    case Preconditioner::amg: m = make_amg(o, in); break;
  }
  if (!m && !reason.empty()) m = std::make_unique<NoPreconditioner>(in.product.rows(), reason);  // auto chose none: say why
  if (m && !reason.empty()) m->set_reason(reason);
  return m;
}

}  // namespace spcg
