#include "solver/iteration_engine.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "kernels/communicator.hpp"
#include "solver/solver.hpp"

namespace spcg {

// ---- the reduction policy ----

double* ReductionPolicy::step_totals(int k) {
  if (!ranks_) return nullptr;
  if (totals_.size() < static_cast<size_t>(2 * k)) totals_ = DeviceArray<double>(static_cast<size_t>(2 * k), "rank totals");
  return totals_.data();
}

void ReductionPolicy::finish_step(KernelTimer& t, MultiCgStep step, int k, CgScalars* scalars, cudaStream_t s) {
  if (!ranks_) return;
  const int values = rank_totals_per_column(step) * k;  // p'q or the PCG's r'z; or rr and rz
  t.run("sum over ranks", 0.0, [&] {
    ranks_->allreduce_sum(step_totals(k), static_cast<size_t>(values), s);
    launch_multi_cg_finish(step, k, step_totals(k), scalars, s);
  });
}

void ReductionPolicy::sum_step(KernelTimer& t, double* totals, size_t count, cudaStream_t s) {
  if (ranks_) t.run("sum over ranks", 0.0, [&] { ranks_->allreduce_sum(totals, count, s); });
}

void ReductionPolicy::sum(double* values, size_t count, cudaStream_t s) {
  if (ranks_) ranks_->allreduce_sum(values, count, s);
}

void ReductionPolicy::wait(cudaStream_t s) const { wait_for_stream(s, ranks_); }

std::vector<double> column_norms(const DeviceBlock& B, cudaStream_t s, ReductionPolicy& sums) {
  const int k = B.cols;
  std::vector<double> out(k, 0.0);
  // a rank with no rows still joins the sum (every rank calls it)
  if (k == 0 || (B.rows == 0 && !sums.over_ranks())) return out;
  ReductionWorkspace ws(reduction_blocks(int64_t{B.rows} * k), k);
  DeviceArray<double> d(k, "column norms");
  launch_column_dots(B.rows, k, B.data(), B.data(), ws, d.data(), s);
  sums.sum(d.data(), static_cast<size_t>(k), s);
  CHECK_CUDA(cudaMemcpyAsync(out.data(), d.data(), k * sizeof(double), cudaMemcpyDeviceToHost, s));
  sums.wait(s);
  for (double& v : out) v = std::sqrt(v);
  return out;
}

// ---- batches replayed from a CUDA graph ----

namespace {

// Runs a batch of iterations as plain launches (per-kernel events possible), or captured once into a CUDA graph
// and replayed, which removes the launch overhead of small matrices: one iteration's graph, and for iterations of
// a few nodes the engine's full batch as one graph (run() says why). The kernel counts of a replayed graph are
// credited to the timer per replay, and its sums and exchanges to the communicator.
class GraphReplay {
 public:
  GraphReplay(cudaStream_t s, bool use_graph, KernelTimer& timer, Communicator* ranks)
      : s_(s), graph_(use_graph), timer_(timer), ranks_(ranks) {}
  ~GraphReplay() {
    for (auto& [length, c] : captured_) {
      if (c.exec) cudaGraphExecDestroy(c.exec);
      if (c.g) cudaGraphDestroy(c.g);
    }
  }
  GraphReplay(const GraphReplay&) = delete;
  GraphReplay& operator=(const GraphReplay&) = delete;

  // `length` iterations, each of which `iteration` puts on the stream, from graphs: one iteration's graph launched
  // `length` times, or, for a full batch of iterations of a few nodes each, the batch's own graph (one launch).
  // Capturing and instantiating costs by the node: on an H100 (2026-11-26), AMG-PCG solves (four levels: ~43
  // kernels an iteration) took, batch graph / one iteration's graph / no graph, poisson3d:50 4.02 / 2.32 / 2.50 ms,
  // poisson3d:100 10.7 / 8.2 / 8.4, jump3d:128 30.3 / 27.8 / 29.3, poisson3d:200 54.0 / 51.2 / 51.9, the 27-point
  // 256^3 113.4 / 110.1 / 110.4; Jacobi-CG (a few nodes) gains from the batch's graph: poisson2d:512 26.0 / 27.0 /
  // 28.8, jump3d:128 140.0 / 141.7 / 144.3.
  void run(int length, int full, const std::function<void(KernelTimer&)>& iteration) {
    if (!graph_) {
      for (int i = 0; i < length; ++i) iteration(timer_);
      return;
    }
    int done = 0;
    auto one = captured_.find(1);
    if (one == captured_.end()) {  // the first iteration captures one iteration's graph, whose nodes decide below
      replay(1, iteration);
      one = captured_.find(1), done = 1;
    }
    if (done == 0 && length == full && one->second.nodes <= GraphTuning::batch_graph_max_nodes) {
      replay(full, [&](KernelTimer& t) {
        for (int i = 0; i < full; ++i) iteration(t);
      });
      return;
    }
    for (; done < length; ++done) replay(1, iteration);
  }

 private:
  struct GraphTuning {
    // an iteration of at most this many nodes runs a full batch as one graph (Jacobi-CG's fused iteration has a
    // handful; AMG-PCG's V-cycle dozens): measured above
    static constexpr size_t batch_graph_max_nodes = 16;
  };
  // the graph of `length` iterations, captured on first use (the capture counts its first launch's calls), launched
  void replay(int length, const std::function<void(KernelTimer&)>& enqueue) {
    Captured& c = captured_[length];
    if (!c.exec) {
      const CommunicationStats before = ranks_ ? ranks_->stats() : CommunicationStats{};
      KernelTimer capture_counts(false, s_);
      CHECK_CUDA(cudaStreamBeginCapture(s_, cudaStreamCaptureModeThreadLocal));
      try {
        enqueue(capture_counts);
      } catch (...) {
        cudaGraph_t broken = nullptr;
        cudaStreamEndCapture(s_, &broken);
        if (broken) cudaGraphDestroy(broken);
        throw;
      }
      CHECK_CUDA(cudaStreamEndCapture(s_, &c.g));
      CHECK_CUDA(cudaGraphGetNodes(c.g, nullptr, &c.nodes));
      CHECK_CUDA(cudaGraphInstantiate(&c.exec, c.g, 0));
      c.per_batch = capture_counts.stats();
      if (ranks_) {  // the capture counted one batch's calls: the first launch's
        const CommunicationStats after = ranks_->stats();
        c.calls.sums = after.sums - before.sums, c.calls.sum_bytes = after.sum_bytes - before.sum_bytes;
        c.calls.exchanges = after.exchanges - before.exchanges;
        c.calls.exchange_bytes_sent = after.exchange_bytes_sent - before.exchange_bytes_sent;
        c.calls.exchange_bytes_received = after.exchange_bytes_received - before.exchange_bytes_received;
      }
    } else if (ranks_) {
      ranks_->count_replayed(c.calls);
    }
    CHECK_CUDA(cudaGraphLaunch(c.exec, s_));
    for (const auto& k : c.per_batch) timer_.count(k.name.c_str(), k.bytes_per_call, k.calls);
  }

  struct Captured {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    size_t nodes = 0;
    std::vector<KernelStat> per_batch;
    CommunicationStats calls;  // a batch's sums and exchanges
  };
  cudaStream_t s_;
  bool graph_;
  KernelTimer& timer_;
  std::map<int, Captured> captured_;
  Communicator* ranks_;
};

// The next batch of a running column (IterationEngine::BatchRule): a share of the iterations it still needs by its
// rate since its last read, log(||r|| / tol) / log(1 / rate), at least 1; `cap` where none is known (no earlier
// read, no progress since it).
int next_batch_for(double norm, int iteration, double earlier_norm, int earlier_iteration, double tol, int cap) {
  if (!(earlier_iteration >= 0 && iteration > earlier_iteration && norm > tol && norm < earlier_norm)) return cap;
  const double log_rate = std::log(norm / earlier_norm) / (iteration - earlier_iteration);  // < 0
  const double share = std::ceil(IterationEngine::BatchRule::share_of_needed * std::log(tol / norm) / log_rate);
  return std::isfinite(share) ? static_cast<int>(std::clamp(share, 1.0, double(cap))) : cap;
}

}  // namespace

void take_history(const std::vector<double>& squared, int iterations, Monitor& mon, int column, int first) {
  if (squared.empty() || iterations < 0) return;
  auto& hist = const_cast<std::vector<std::vector<std::pair<int, double>>>&>(mon.history());
  auto& h = hist[column];
  h.erase(std::remove_if(h.begin(), h.end(), [first](const std::pair<int, double>& e) { return e.first >= first; }), h.end());
  for (int i = first; i <= std::min<int>(iterations, static_cast<int>(squared.size()) - 1); ++i)
    h.emplace_back(i, std::sqrt(squared[i]));
}

// ---- the engine ----

IterationEngine::IterationEngine(const char* solver, const DeviceBlock& B, const SolveOptions& o, Communicator* ranks)
    : IterationEngine(solver, std::vector<double>{}, o, ranks) {
  b_norms_ = column_norms(B, stream_, reductions_);
  monitor_ = Monitor(o.stop, b_norms_, o.monitor_every, o.keep_history);
  monitor_.print = o.progress, monitor_.interrupted = o.interrupted;
  start_clock();
}

IterationEngine::IterationEngine(const char* solver, const std::vector<double>& b_norms, const SolveOptions& o,
                                 Communicator* ranks)
    : options_(o),
      reductions_(ranks),
      b_norms_(b_norms),
      monitor_(o.stop, b_norms_, o.monitor_every, o.keep_history),
      timer_(o.time_kernels, stream_),
      start_(std::chrono::steady_clock::now()) {
  monitor_.print = o.progress, monitor_.interrupted = o.interrupted;
  result_.solver = solver;
}

int IterationEngine::batch() const {
  const SolveOptions& o = options_;
  return std::max(1, o.monitor_every > 0 ? std::min(o.check_every, o.monitor_every) : o.check_every);
}

bool IterationEngine::graphs() const {
  // across ranks where the communicator's calls can be captured (NCCL's; the in-process stand-in's sums wait on
  // the host) and are not timed (its events would be captured): a batch's launches and collectives then leave the
  // host as one graph launch. The sums and exchanges never grow their buffers inside a batch: each solver's start
  // makes its largest sum and its first product before the first batch, and a preconditioner's reserve(k) sizes
  // its own exchanges (the general PCG's first M^-1 r is inside the first batch).
  const Communicator* ranks = reductions_.communicator();
  return (!ranks || (ranks->capturable() && !ranks->timing() && !timer_.enabled())) &&
         (options_.graph == Switch::on || (options_.graph == Switch::automatic && !timer_.enabled()));
}

IterationEngine::Recurrences IterationEngine::recurrences(int k, int first_column, int first_iteration) {
  Recurrences rec;
  rec.k = k, rec.first_column = first_column, rec.first_iteration = first_iteration;
  const bool history = options_.keep_history && k == 1 && !reductions_.over_ranks();
  rec.history = DeviceArray<double>(history ? static_cast<size_t>(options_.stop.max_iterations) + 1 : 0, "residual history");
  std::vector<CgScalars> h(static_cast<size_t>(k));
  for (int j = 0; j < k; ++j) {
    const double tol = monitor_.tolerance(first_column + j);
    h[j].tol2 = tol * tol;
    h[j].max_iterations = options_.stop.max_iterations;
    h[j].iteration = first_iteration;
  }
  if (history) h[0].history = rec.history.data(), h[0].history_capacity = static_cast<int>(rec.history.size());
  rec.scalars = DeviceArray<CgScalars>(static_cast<size_t>(k), "recurrence scalars");
  rec.scalars.upload(h);
  return rec;
}

bool IterationEngine::one_reduction_cg() const {
  return options_.recurrence == CgRecurrence::one_reduction ||
         (options_.recurrence == CgRecurrence::automatic && reductions_.over_ranks());
}

void IterationEngine::run(Recurrences& rec, const std::function<void(KernelTimer&)>& iteration,
                          const ConfirmConverged& confirm) {
  const int k = rec.k, batch_size = batch();
  const bool use_graph = graphs();
  result_.used_graph = use_graph;
  GraphReplay replay(stream_, use_graph, timer_, reductions_.communicator());
  std::vector<CgScalars> h(static_cast<size_t>(k));
  std::vector<int> last(static_cast<size_t>(k), -1);
  // the iteration of each column's last (re)start: there the recursive residual is b - A x itself (every
  // recurrence starts from it), so a claim made there needs no confirming, and a breakdown there is final
  std::vector<int> started_at(static_cast<size_t>(k), rec.first_iteration);
  // each column's true residual at its last restart, and its restarts in a row that did not shrink it
  std::vector<double> restarted_from(static_cast<size_t>(k), std::numeric_limits<double>::infinity());
  std::vector<int> unproductive(static_cast<size_t>(k), 0);
  // each column's norm at its last read, for the next batch's length (next_batch_for)
  std::vector<double> last_norm(static_cast<size_t>(k), std::numeric_limits<double>::infinity());
  while (true) {
    // The next batch: what the slowest running column's rate asks for (next_batch_for), at most batch_size, so
    // that a batch seldom runs past convergence, whose iterations run as no-ops at full cost (aniso3d:128's
    // AMG-PCG: 36 iterations needed, 40 run in batches of 8). Every rank reads the same summed norms, so every
    // rank runs the same batch (its collectives match).
    int next = 0;
    CHECK_CUDA(cudaMemcpyAsync(h.data(), rec.scalars.data(), k * sizeof(CgScalars), cudaMemcpyDeviceToHost, stream_));
    reductions_.wait(stream_);
    timer_.collect();
    bool all_done = true;
    for (int j = 0; j < k; ++j) {
      const int column = rec.first_column + j;
      if (h[j].iteration != last[j]) {
        double norm = std::sqrt(h[j].rr);
        // a recurrence taking a column over starts from b - A x: that is its first restart's residual
        if (last[j] < 0 && rec.first_iteration > 0) restarted_from[j] = norm;
        // a claim to confirm: converged by the recursive residual, or a breakdown, which a rounded copy of A or a
        // recurred p'Ap may meet where A would not (a breakdown right at a restart is A's own, and final)
        const bool claim = h[j].status == kConverged || h[j].status == kBreakdown;
        if (confirm && claim && h[j].iteration != started_at[j]) {
          const Confirmation c = confirm(column);
          norm = c.true_norm;
          if (c.restarted) {
            // a restart that left the true residual where the last one did: past RestartRule::unproductive_limit
            // of them in a row the column ends, never converged and without running to the limit: broken down
            // where the claim was a breakdown (A or M met it again from the true residual), else stagnated (the
            // tolerance lies below what this system's rounding reaches; the true residual its last)
            unproductive[j] = norm > RestartRule::progress * restarted_from[j] ? unproductive[j] + 1 : 0;
            restarted_from[j] = std::min(restarted_from[j], norm);
            if (unproductive[j] >= RestartRule::unproductive_limit) {
              monitor_.observe(column, h[j].iteration, norm), last[j] = h[j].iteration;
              monitor_.finish(column, h[j].status == kBreakdown ? ColumnStatus::breakdown : ColumnStatus::stagnated,
                              h[j].iteration);
              continue;
            }
            started_at[j] = h[j].iteration;  // observed at the next read (the restart keeps the iteration count)
            all_done = false;
            continue;
          }
        }
        if (h[j].done == 0)
          next = std::max(next, next_batch_for(norm, h[j].iteration, last_norm[j], last[j], monitor_.tolerance(column),
                                               batch_size));
        monitor_.observe(column, h[j].iteration, norm), last[j] = h[j].iteration, last_norm[j] = norm;
      } else if (h[j].done == 0) {
        next = batch_size;  // (a column with no new iteration: nothing to judge its rate by)
      }
      all_done &= h[j].done != 0;
    }
    if (all_done || monitor_.all_done()) break;  // (the monitor's: an interrupt)
    const int length = next > 0 ? next : batch_size;
    replay.run(length, batch_size, iteration);
    // (the applies of a batch's iterations after convergence ran too, as no-op iterations)
    result_.operator_applies += length, result_.operator_columns += int64_t{length} * k;
  }
  for (int j = 0; j < k; ++j)
    if (monitor_.status(rec.first_column + j) == ColumnStatus::running)
      monitor_.finish(rec.first_column + j, from_device_status(h[j].status), h[j].iteration);
  if (rec.history.size())
    take_history(rec.history.download(), h[0].iteration, monitor_, rec.first_column, rec.first_iteration);
}

IterationEngine::Confirmation IterationEngine::confirmation_after_restart(const CgScalars* scalars) {
  CgScalars h;
  CHECK_CUDA(cudaMemcpyAsync(&h, scalars, sizeof h, cudaMemcpyDeviceToHost, stream_));
  reductions_.wait(stream_);
  const bool restarted = h.status != kConverged;
  result_.residual_replacements += restarted;
  return Confirmation{std::sqrt(h.rr), restarted};
}

SolveResult IterationEngine::finish() {
  CHECK_CUDA(cudaStreamSynchronize(stream_));
  timer_.collect();
  result_.solve_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
  result_.kernels = timer_.stats();
  if (timer_.enabled()) result_.timing_overhead_ms = timer_.events_recorded() * event_overhead_ms();
  for (int j = 0; j < monitor_.columns(); ++j)
    result_.columns.push_back({monitor_.status(j), monitor_.iterations(j), b_norms_[j], monitor_.residual(j), 0});
  result_.history = monitor_.history();
  return std::move(result_);
}

}  // namespace spcg
