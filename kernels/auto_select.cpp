// auto: a short list from the matrix statistics, then (autotune) one timed trial of each candidate at setup;
// the winner is kept and the reason printed. Block widths k > 1 get their own short list of SpMM kernels plus
// "repeated SpMV" with the SpMV winner, timed at the expected k.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>

#include "kernels/solver_ops/blas1.hpp"
#include "kernels/solver_ops/cg_persistent.hpp"
#include "kernels/device_formats.hpp"
#include "sparse/formats.hpp"
#include "kernels/registry.hpp"
#include "spcg/stats.hpp"

namespace spcg {
namespace {

struct AutoTuning {
  static constexpr int trial_runs = 9;  // at most; fewer when the budget below is spent sooner (3 at least)
  // GPU time of the timed runs, all candidates together: the trial is part of every solve's setup (issue #22:
  // setup <= 30 ms at 128^3), and its medians settle within a few runs on matrices larger than L2.
  static constexpr double trial_budget_ms = 4.0;
  static constexpr double latency_bound_trial_budget_ms = 2.0;  // small files: the whole setup is ~20 ms
  static constexpr int min_trial_runs = 3;
  // Matrices whose CSR bytes fit well inside L2 are launch-latency bound: formats barely matter there, the
  // plainest kernels often win by a microsecond, and trial timings need more repeats to rank them.
  static constexpr double latency_bound_bytes = 32.0 * (1 << 20);
  static constexpr int latency_bound_trial_runs = 15;
  static constexpr int latency_bound_batch = 10;   // applies per timed run
  // Latency-bound: GPU time of untimed rounds before the trial, so it runs at speed. 10 ms fixed an idle-clock
  // mis-pick (sell-sorted over csr-vector on bcsstk04; docs/perf-notes.md, "Auto's trial after an idle gap") but was 2/3 of a small file's setup
  // (H100: analysis 14-17 ms of 16-19, issue #22's floor + 40 ms). With 4 ms, five runs on bcsstk04 (H100)
  // took csr-vector four times and csr-adaptive once (4.7 vs 4.9 us), never sell-sorted (8.8 us).
  static constexpr double warmup_busy_ms = 4.0;
  static constexpr double large_warmup_busy_ms = 1.0;  // larger matrices: each apply is long enough to raise the clocks
  static constexpr int warmup_max_rounds = 400;
  static constexpr double banded_dia_fill = 1.2;   // DIA when the diagonals are this full
  static constexpr double skew_cv = 1.0;           // row-length stddev / mean above this: load balancing
  static constexpr double skew_max_over_mean = 16;
  static constexpr double regular_ell_fill = 1.5;
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

class AutoOperator final : public LinearOperator,
                           public FusedDotProduct,
                           public FusedSmoothing,
                           public PersistentCgLayout,
                           public KeptChoice {
 public:
  // New values on kept's pattern (remake_operator): kept's kernels remade from `a`, its persistent-CG layout
  // when it had one; no short list, no trial, the same reason.
  AutoOperator(const AutoOperator& kept, const MatrixSetup& a, const OperatorOptions& o)
      : LinearOperator(a), expected_k_(kept.expected_k_), latency_bound_(kept.latency_bound_) {
    const auto t0 = std::chrono::steady_clock::now();
    spmv_ = remake_operator(*kept.spmv_, a, o);
    if (kept.spmm_) spmm_ = kept.spmm_.get() == kept.spmv_.get() ? spmv_ : remake_operator(*kept.spmm_, a, o);
    info_ = spmv_->setup_info();
    info_.analysis_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() -
                         spmv_->setup_info().convert_ms - spmv_->setup_info().upload_ms;
    info_.reason = kept.info_.reason;
    if (kept.persistent_) persistent_ = PersistentCgMatrix::make(a);
    if (persistent_) info_.device_bytes += persistent_->device_bytes();
    if (spmm_ && spmm_.get() != spmv_.get()) info_.device_bytes += spmm_->setup_info().device_bytes;
  }
  std::unique_ptr<LinearOperator> remade(const MatrixSetup& a, const OperatorOptions& o) const override {
    return std::make_unique<AutoOperator>(*this, a, o);
  }

  AutoOperator(const MatrixSetup& a, const OperatorOptions& o) : LinearOperator(a) {
    const MatrixStats& st = a.stats();  // on the device
    const double cv = st.row_mean > 0 ? st.row_stddev / st.row_mean : 0;
    std::vector<std::string> spmv, spmm;
    std::string why;
    if (st.nnz > 0 && st.dia_fill <= AutoTuning::banded_dia_fill && st.distinct_diagonals <= 64) {
      spmv = {"dia", "sell"};
      why = "banded: " + std::to_string(st.distinct_diagonals) + " diagonals, DIA fill " + fmt("%.2f", st.dia_fill);
    } else if (cv > AutoTuning::skew_cv || st.row_max > AutoTuning::skew_max_over_mean * std::max(1.0, st.row_mean)) {
      spmv = {"csr-adaptive", "csr-merge", "hyb"};
      why = "skewed rows: cv " + fmt("%.2f", cv) + ", max " + std::to_string(st.row_max) + " vs mean " +
            fmt("%.1f", st.row_mean);
    } else if (st.ell_fill <= AutoTuning::regular_ell_fill) {
      spmv = {"sell", "csr-vector"};
      why = "regular rows: ELL fill " + fmt("%.2f", st.ell_fill);
    } else {
      spmv = {"sell-sorted", "csr-stream", "csr-vector", "csr-adaptive"};
      why = "moderate skew: ELL fill " + fmt("%.2f", st.ell_fill);
    }
    latency_bound_ = csr_bytes_model(a.rows(), a.nnz()) < AutoTuning::latency_bound_bytes;
    // Banded and larger than L2: DIA streams 8 bytes per stored entry against CSR's and SELL's 12, and has
    // won every such trial (docs/perf-notes.md, SpMV table: 7-pt 200^3 dia 148.5% of copy, sell 94.2%), so
    // the statistics decide and no trial is run.
    const bool clearly_dia = spmv.front() == "dia" && !latency_bound_;
    if (clearly_dia) {
      spmv = {"dia"};
      why += "; DIA's 8 bytes per entry against SELL's 12 decide, no trial";
    }
    if (latency_bound_) {
      for (const char* plain : {"csr-vector", "ell"})
        if (std::find(spmv.begin(), spmv.end(), plain) == spmv.end()) spmv.push_back(plain);
      why += "; fits in L2 (latency-bound): plain kernels short-listed too";
      // Untimed, csr-vector first: its warp a row keeps the GPU busy where SELL's warp per 32 rows leaves it idle
      // (AMG's 9962-row level of poisson3d:200, 63 entries a row: sell-f32 39.7 us a product, csr-vector 8-9 us)
      if (!o.autotune && spmv.front() != "dia") {
        spmv.erase(std::find(spmv.begin(), spmv.end(), "csr-vector"));
        spmv.insert(spmv.begin(), "csr-vector");
        why += "; untimed: csr-vector first";
      }
    }
    // a kernel for short rows only (its entry's max_row) leaves the list where rows are longer
    spmv.erase(std::remove_if(spmv.begin(), spmv.end(), [&](const std::string& n) {
                 const int max_row = find_kernel(n)->max_row;
                 return max_row > 0 && st.row_max > max_row;
               }), spmv.end());
    if (cv > AutoTuning::skew_cv) spmm = {"spmm-split", "spmm-swizzle", "spmm-cwm"};
    else if (clearly_dia) spmm = {"spmm-dia-runs", "spmm-dia"};  // both DIA: the block width decides, timed
    else if (spmv.front() == "dia") spmm = {"spmm-dia-runs", "spmm-dia", "spmm-cwm"};
    else spmm = {"spmm-cwm", "spmm-crc"};
    expected_k_ = std::max(1, o.expected_k);
    // Lanes over entries wins on long or skewed rows at small k and loses on short regular ones: timed, up to
    // the width its entry allows.
    if (spmv.front() != "dia" && expected_k_ <= find_kernel("spmm-vector")->auto_max_k) spmm.push_back("spmm-vector");
    if (o.device_layouts_only) {
      auto keep = [&](std::vector<std::string>& list) {
        list.erase(std::remove_if(list.begin(), list.end(), [&](const std::string& n) {
                     return find_kernel(n)->layout != LayoutBuilt::on_device;
                   }), list.end());
      };
      keep(spmv), keep(spmm);
      if (spmv.empty()) spmv = {"csr-vector"};
      if (spmm.empty()) spmm = {"spmm-cwm"};
      why += "; layouts built on the device only";
    }
    const auto t0 = std::chrono::steady_clock::now();
    spmv_ = pick(spmv, a, o, 1, why, o.autotune);
    if (expected_k_ > 1 && o.columnwise) {
      why += "; k=" + std::to_string(expected_k_) + ": the SpMV column by column (columnwise: each column's bits those of a single apply)";
    } else if (expected_k_ > 1) {
      std::string why_k;
      spmm_ = pick(spmm, a, o, expected_k_, why_k, o.autotune, clearly_dia ? nullptr : spmv_.get());
      why += "; k=" + std::to_string(expected_k_) + ": " + why_k;
    }
    info_ = spmv_->setup_info();
    info_.analysis_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() -
                         spmv_->setup_info().convert_ms - spmv_->setup_info().upload_ms;
    if (!spmv_->setup_info().reason.empty()) why += " (" + spmv_->setup_info().reason + ")";  // what its setup chose
    info_.reason = why;
    // Small systems: the persistent (one-launch) CG's layout, on the setup's shared CSR.
    if (!o.device_layouts_only) persistent_ = PersistentCgMatrix::make(a);
    if (persistent_) info_.device_bytes += persistent_->device_bytes();
    if (spmm_ && spmm_.get() != spmv_.get()) info_.device_bytes += spmm_->setup_info().device_bytes;
  }
  std::string name() const override { return "auto"; }
  const PersistentCgMatrix* persistent_cg_matrix() const override { return persistent_.get(); }
  std::string chosen(int k) const override { return (k > 1 && spmm_ ? spmm_ : spmv_)->name(); }
  double bytes_per_apply(int k) const override { return op_for(k).bytes_per_apply(k); }
  bool deterministic() const override { return spmv_->deterministic() && (!spmm_ || spmm_->deterministic()); }
  bool apply_with_dot(const double* x, double* y, const DotSink& sink, cudaStream_t s) const override {
    return ::spcg::apply_with_dot(*spmv_, x, y, sink, s);
  }
  bool smoothing_step(const double* d_in, double* d_out, double* res, const double* res_in, double* x,
                      const double* scale, double c1, double c2, cudaStream_t s, const uint8_t* rows_apart) const override {
    return ::spcg::smoothing_step(*spmv_, d_in, d_out, res, res_in, x, scale, c1, c2, s, rows_apart);
  }
  bool offers_smoothing_step() const override { return ::spcg::offers_smoothing_step(*spmv_); }
  bool reads_residual_in_place() const override { return ::spcg::reads_residual_in_place(*spmv_); }
  bool residual_step(const double* b, const double* x, double* res, cudaStream_t s) const override {
    return ::spcg::residual_step(*spmv_, b, x, res, s);
  }

 protected:
  void apply_impl(double alpha, const double* x, double beta, double* y, int k, cudaStream_t s) const override {
    op_for(k).apply(alpha, x, beta, y, k, s);
  }

 private:
  const LinearOperator& op_for(int k) const { return k > 1 && spmm_ ? *spmm_ : *spmv_; }

  // Builds the candidates (skipping formats that refuse the matrix), times them at width k, keeps the fastest.
  // `repeated` (k > 1): the SpMV winner applied column by column is a candidate too.
  std::shared_ptr<LinearOperator> pick(const std::vector<std::string>& names, const MatrixSetup& a,
                                       const OperatorOptions& o, int k, std::string& why, bool autotune,
                                       LinearOperator* repeated = nullptr) {
    std::vector<std::shared_ptr<LinearOperator>> ops;
    std::string refused;
    for (const auto& n : names) {
      try {
        ops.emplace_back(make_operator(n, a, o));
      } catch (const FormatRefused& e) {
        refused += std::string(refused.empty() ? "" : "; ") + e.what();
      } catch (const DeviceMemoryError&) {  // a layout that does not fit beside the shared CSR: the next candidate
        release_idle_device_memory();
        refused += std::string(refused.empty() ? "" : "; ") + n + ": its layout does not fit in the device's memory";
      }
      if (!autotune && !ops.empty()) break;  // untimed: the first candidate that takes the matrix, the others unbuilt
    }
    if (repeated) ops.emplace_back(std::shared_ptr<LinearOperator>(std::shared_ptr<LinearOperator>{}, repeated));
    if (ops.empty()) ops.emplace_back(make_operator("csr-vector", a, o));
    if (!refused.empty()) why += " (" + refused + ")";
    if (!autotune || ops.size() == 1 || a.nnz() == 0 || a.rows() == 0) {
      why += " -> " + ops.front()->name() + (repeated && ops.front().get() == repeated ? " (repeated SpMV)" : "");
      return ops.front();
    }
    // Random input made on the device: drawing 2M x 16 values on the host took 0.9 s (128^3, k = 16).
    DeviceBlock x(a.cols(), k, "auto-tuning input"), y(a.rows(), k, "auto-tuning output");
    launch_fill_splitmix_uniform(7, x.data(), x.size(), 0);
    size_t best = 0;
    double best_ms = 1e300;
    why += why.empty() ? "timed" : "; timed";
    // Candidates take turns run by run, so a drift in clocks or launch latency during the trial falls on all of
    // them alike (one after the other, a latency-bound file once ranked csr-vector at 9.1 us that ran 7.0).
    const int max_runs = latency_bound_ ? AutoTuning::latency_bound_trial_runs : AutoTuning::trial_runs;
    const int batch = latency_bound_ ? AutoTuning::latency_bound_batch : 1;  // back-to-back, as a solver runs them
    // Warm-up (module loading, lazy plans), then until the GPU has been busy for a while: after the host-side
    // setup the clocks may still be idle, and a trial at idle clocks once ranked sell-sorted (8.3 us at speed)
    // over csr-vector (4.1 us) on bcsstk04, every candidate timed at 21-28 us.
    for (auto& op : ops)
      for (int w = 0; w < 2; ++w) op->apply(1.0, x, 0.0, y);
    double busy_ms = 0, round_ms = 0;
    const double warmup_ms = latency_bound_ ? AutoTuning::warmup_busy_ms : AutoTuning::large_warmup_busy_ms;
    for (int round = 0; round < AutoTuning::warmup_max_rounds && busy_ms < warmup_ms; ++round)
      busy_ms += round_ms = time_on_stream_ms(0, [&] {
        for (auto& op : ops)
          for (int b = 0; b < batch; ++b) op->apply(1.0, x, 0.0, y);
      });
    // As many runs as the budget buys (a round of every candidate took round_ms), within [3, max_runs].
    const double budget = latency_bound_ ? AutoTuning::latency_bound_trial_budget_ms : AutoTuning::trial_budget_ms;
    const int runs = std::clamp(static_cast<int>(budget / std::max(round_ms, 1e-6)), AutoTuning::min_trial_runs, max_runs);
    std::vector<std::vector<double>> ms(ops.size());
    for (int r = 0; r < runs; ++r)
      for (size_t c = 0; c < ops.size(); ++c)
        ms[c].push_back(time_on_stream_ms(0, [&] {
                          for (int b = 0; b < batch; ++b) ops[c]->apply(1.0, x, 0.0, y);
                        }) /
                        batch);
    for (size_t c = 0; c < ops.size(); ++c) {
      std::nth_element(ms[c].begin(), ms[c].begin() + ms[c].size() / 2, ms[c].end());
      const double med = ms[c][ms[c].size() / 2];
      const bool is_repeated = repeated && ops[c].get() == repeated;
      why += " " + (is_repeated ? std::string("repeated-spmv") : ops[c]->name()) + " " + fmt("%.1fus", med * 1e3);
      if (med < best_ms) best_ms = med, best = c;
    }
    const bool is_repeated = repeated && ops[best].get() == repeated;
    why += " -> " + (is_repeated ? std::string("repeated SpMV (") + repeated->name() + ")" : ops[best]->name()) +
           " (cached)";
    return ops[best];
  }

  std::shared_ptr<LinearOperator> spmv_, spmm_;
  std::unique_ptr<PersistentCgMatrix> persistent_;
  int expected_k_ = 1;
  bool latency_bound_ = false;
};

}  // namespace

std::unique_ptr<LinearOperator> make_auto_operator(const MatrixSetup& a, const OperatorOptions& o) {
  return std::make_unique<AutoOperator>(a, o);
}

std::string auto_choice(const LinearOperator& op, int k) { return op.chosen(k); }

}  // namespace spcg
