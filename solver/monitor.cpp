#include "solver/monitor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace spcg {

const char* to_string(ColumnStatus s) {
  switch (s) {
    case ColumnStatus::running: return "running";
    case ColumnStatus::converged: return "converged";
    case ColumnStatus::deflated: return "deflated";
    case ColumnStatus::max_iterations: return "max-iterations";
    case ColumnStatus::breakdown: return "breakdown";
    case ColumnStatus::non_finite: return "non-finite";
    case ColumnStatus::precond_not_positive: return "preconditioner-not-positive";
    case ColumnStatus::interrupted: return "interrupted";
    case ColumnStatus::stagnated: return "stagnated";
  }
  return "?";
}

Monitor::Monitor(const StopRule& rule, const std::vector<double>& b_norms, int print_every, bool keep_history)
    : rule_(rule),
      residual_(b_norms.size(), 0),
      iterations_(b_norms.size(), 0),
      status_(b_norms.size(), ColumnStatus::running),
      deflated_(b_norms.size(), false),
      print_every_(print_every),
      printed_(b_norms.size(), -1),
      keep_history_(keep_history),
      history_(b_norms.size()) {
  for (double bn : b_norms) tol_.push_back(std::max(rule.rtol * bn, rule.atol));
}

bool Monitor::observe(int j, int iteration, double rnorm) {
  if (status_[j] != ColumnStatus::running) return true;
  residual_[j] = rnorm;
  iterations_[j] = iteration;
  if (keep_history_) history_[j].emplace_back(iteration, rnorm);
  // A line at the first observation at or past each multiple of print_every: the solvers observe every few
  // iterations (a check interval, a persistent launch), not necessarily on the multiples themselves.
  if (print_every_ > 0 && print && (printed_[j] < 0 || iteration / print_every_ > printed_[j] / print_every_)) {
    printed_[j] = iteration;
    char line[128];
    std::snprintf(line, sizeof line, "  iter %6d  col %3d  ||r|| %.6e  (target %.3e)", iteration, j, rnorm, tol_[j]);
    print(line);
  }
  if (!std::isfinite(rnorm)) status_[j] = ColumnStatus::non_finite;
  else if (rnorm <= tol_[j]) status_[j] = deflated_[j] ? ColumnStatus::deflated : ColumnStatus::converged;
  else if (iteration >= rule_.max_iterations) status_[j] = ColumnStatus::max_iterations;
  if (interrupted && status_[j] == ColumnStatus::running) {
    const auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double, std::milli>(now - last_poll_).count() >= kInterruptPollMs) {
      last_poll_ = now;
      if (interrupted())  // each column keeps the iteration and residual it was last observed at (0: never started)
        for (size_t c = 0; c < status_.size(); ++c)
          if (status_[c] == ColumnStatus::running) status_[c] = ColumnStatus::interrupted;
    }
  }
  return status_[j] != ColumnStatus::running;
}

void Monitor::finish(int j, ColumnStatus s, int iteration) {
  if (status_[j] != ColumnStatus::running) return;
  status_[j] = s;
  iterations_[j] = iteration;
}

bool Monitor::all_done() const {
  return std::none_of(status_.begin(), status_.end(), [](ColumnStatus s) { return s == ColumnStatus::running; });
}

}  // namespace spcg
