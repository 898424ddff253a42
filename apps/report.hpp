#pragma once
// The solve report: setup phases, per-kernel time table, per-column results; table, JSON and CSV.
#include <string>
#include <vector>

#include "spcg/matrix_market.hpp"
#include "spcg/spcg.hpp"

namespace spcg {

// One rank's figures on several GPUs (gathered by rank 0 for the report).
struct RankLine {
  int rank = 0;
  int64_t rows = 0, nnz = 0, halo_in = 0, halo_out = 0;  // halo: x entries received / sent per column and apply
  double problem_ms = 0, nccl_ms = 0, setup_ms = 0, solve_ms = 0;
  int64_t sums = 0, exchanges = 0;
  double sum_ms = 0, sent_bytes = 0, exchange_ms = 0;  // times: 0 unless kernels are timed
  double memory_bytes = 0;  // GPU memory in use on its device after the solve (process: context and NCCL included)
};

// A later matrix of a sequence (spcg solve --matrix A1.mtx,A2.mtx,...): new values on the first matrix's
// pattern, an update of the setup (Solver::update_values), then a solve.
struct StepLine {
  std::string matrix;
  double read_ms = 0;
  std::vector<Phase> update_phases;  // the Solver's, ending with the update's total
  PreconditionerReport preconditioner;  // the preconditioner's update (its phases)
  double solve_ms = 0;
  int iterations = 0;  // the most of any column
  double relative_true_residual = 0;  // the largest of any column
  bool converged = false;
  std::string checksum;  // --deterministic
  std::string precision, precision_reason;  // as the update resolved them (new values may stop being FP32 numbers)
};

struct SolveReport {
  std::string matrix, name, kernel, kernel_reason, backend, solver, precond, vector_ops;
  std::string precision = "double", precision_reason;  // as the Solver resolved them
  ReadProfile reader;  // files: how the read went (empty access for generated matrices)
  int64_t rows = 0, nnz = 0;
  int nrhs = 1;
  double rtol = 0, atol = 0;
  double copy_bandwidth_gbs = 0;  // when measured
  std::vector<Phase> phases;
  PreconditionerReport preconditioner;  // kind none: no preconditioner
  SolveResult result;
  std::string checksum;  // --deterministic
  double verify_relative_residual = -1;
  int eigen_iterations = -1;
  double eigen_solution_difference = -1;
  std::vector<RankLine> ranks;  // several GPUs
  std::vector<StepLine> steps;  // the later matrices of a sequence (the rest of the report is the first's)
};

// One rank's figures as they travel to rank 0: its slot of kRankFigures doubles in a ranks x kRankFigures block
// that every rank fills at its own slot (zeros elsewhere) and sums over the ranks. Counts up to 2^53 travel exactly.
constexpr int kRankFigures = 14;
void pack_rank_figures(const RankLine& line, double* slot);
RankLine unpack_rank_figures(const double* slot, int rank);

void print_report(const SolveReport& r);
std::string report_json(const SolveReport& r);
std::string report_csv(const SolveReport& r);
std::string fnv1a_checksum(const HostVector<double>& v);
// --plot: each column's residual history on a log scale and, on several GPUs, each rank's phases (apps/plot.cpp).
std::string residual_svg(const SolveReport& r);

}  // namespace spcg
