#pragma once
// The monitor owns the stopping rules and the per-column status of a solve: ||r_j|| <= max(rtol ||b_j||, atol),
// an iteration limit, and what happened to each column (converged, deflated, breakdown, ...), plus the
// residual history and the --monitor progress lines.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "spcg/solve_types.hpp"

namespace spcg {

class Monitor {
 public:
  Monitor(const StopRule& rule, const std::vector<double>& b_norms, int print_every = 0, bool keep_history = false);
  double tolerance(int j) const { return tol_[j]; }
  // Records column j's residual norm at `iteration`; returns true if the column is (now) finished.
  bool observe(int j, int iteration, double residual_norm);
  void finish(int j, ColumnStatus status, int iteration);  // breakdown, deflated, ...
  void mark_deflated(int j) { deflated_[j] = true; }
  bool all_done() const;
  int columns() const { return static_cast<int>(tol_.size()); }
  ColumnStatus status(int j) const { return status_[j]; }
  int iterations(int j) const { return iterations_[j]; }
  double residual(int j) const { return residual_[j]; }
  bool was_deflated(int j) const { return deflated_[j]; }
  const std::vector<std::vector<std::pair<int, double>>>& history() const { return history_; }
  const StopRule& rule() const { return rule_; }
  // Where progress lines go (SolveOptions::progress; empty: nowhere).
  std::function<void(const std::string&)> print = nullptr;
  // SolveOptions::interrupted: asked in observe (at most every kInterruptPollMs); true finishes every running
  // column as interrupted, so that each solver's loop ends by its usual test.
  std::function<bool()> interrupted = nullptr;
  static constexpr double kInterruptPollMs = 50;

 private:
  StopRule rule_;
  std::vector<double> tol_, residual_;
  std::vector<int> iterations_;
  std::vector<ColumnStatus> status_;
  std::vector<bool> deflated_;
  int print_every_;
  std::vector<int> printed_;  // the iteration of each column's last progress line (-1: none yet)
  bool keep_history_;
  std::vector<std::vector<std::pair<int, double>>> history_;
  std::chrono::steady_clock::time_point last_poll_ = std::chrono::steady_clock::now();
};

}  // namespace spcg
