#include "apps/report.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "sparse/json.hpp"

namespace spcg {

std::string fnv1a_checksum(const HostVector<double>& v) {
  uint64_t h = 14695981039346656037ULL;  // FNV-1a 64-bit offset basis (0xcbf29ce484222325)
  for (double d : v) {
    unsigned char b[8];
    std::memcpy(b, &d, 8);
    for (unsigned char c : b) h = (h ^ c) * 1099511628211ULL;
  }
  char s[20];
  std::snprintf(s, sizeof s, "%016llx", static_cast<unsigned long long>(h));
  return s;
}

void pack_rank_figures(const RankLine& l, double* f) {
  const double figures[kRankFigures] = {double(l.rows), double(l.nnz), double(l.halo_in), double(l.halo_out), l.problem_ms,
                                        l.nccl_ms, l.setup_ms, l.solve_ms, double(l.sums), l.sum_ms, double(l.exchanges),
                                        l.sent_bytes, l.exchange_ms, l.memory_bytes};
  std::copy(figures, figures + kRankFigures, f);
}

RankLine unpack_rank_figures(const double* f, int rank) {
  RankLine l;
  l.rank = rank, l.rows = int64_t(f[0]), l.nnz = int64_t(f[1]), l.halo_in = int64_t(f[2]), l.halo_out = int64_t(f[3]);
  l.problem_ms = f[4], l.nccl_ms = f[5], l.setup_ms = f[6], l.solve_ms = f[7], l.sums = int64_t(f[8]), l.sum_ms = f[9];
  l.exchanges = int64_t(f[10]), l.sent_bytes = f[11], l.exchange_ms = f[12], l.memory_bytes = f[13];
  return l;
}

void print_report(const SolveReport& r) {
  const SolveResult& s = r.result;
  std::printf("\n== spcg solve: %s (%s)\n", r.name.c_str(), r.matrix.c_str());
  std::printf("system      %lld rows, %lld nonzeros, %d right-hand side(s)\n", static_cast<long long>(r.rows),
              static_cast<long long>(r.nnz), r.nrhs);
  std::string recurrence = s.used_one_reduction ? ", one-reduction recurrence" : "";
  if (s.residual_replacements)
    recurrence += ", " + std::to_string(s.residual_replacements) + " residual replacement(s)";
  std::printf("solver      %s, precond %s, vector ops %s, backend %s%s%s\n", r.solver.c_str(), r.precond.c_str(),
              r.vector_ops.c_str(), r.backend.c_str(), recurrence.c_str(),
              s.used_persistent ? ", persistent kernel" : s.used_graph ? ", CUDA graph" : "");
  std::printf("kernel      %s%s%s\n", r.kernel.c_str(), r.kernel_reason.empty() ? "" : ": ", r.kernel_reason.c_str());
  std::printf("precision   %s%s%s\n", r.precision.c_str(), r.precision_reason.empty() ? "" : ": ", r.precision_reason.c_str());
  const PreconditionerReport& pc = r.preconditioner;
  if (pc.kind != Preconditioner::none || !pc.reason.empty()) {
    std::printf("precond     %s%s%s, setup %.1f ms", name_of(pc.kind), pc.detail.empty() ? "" : ": ", pc.detail.c_str(), pc.setup_ms);
    for (const Phase& p : pc.phases) std::printf("%s%s %.1f", &p == &pc.phases.front() ? " (" : ", ", p.name.c_str(), p.ms);
    std::printf("%s\n", pc.phases.empty() ? "" : " ms)");
    if (!pc.reason.empty()) std::printf("            auto: %s\n", pc.reason.c_str());
    if (!pc.levels.empty()) {
      const bool over_ranks = pc.levels[0].global_rows > 0;
      std::printf("            level        rows          nnz   %skernel\n",
                  over_ranks ? " all ranks' rows  this rank's halo  held      " : "");
      for (size_t l = 0; l < pc.levels.size(); ++l) {
        const AmgLevelReport& lv = pc.levels[l];
        std::printf("            %5zu %11d %12lld   ", l, lv.rows, static_cast<long long>(lv.nnz));
        if (over_ranks)
          std::printf("%16lld %17lld  %-9s ", static_cast<long long>(lv.global_rows), static_cast<long long>(lv.halo),
                      lv.held_whole ? "whole" : "split");
        std::printf("%s\n", lv.kernel.c_str());
      }
      std::printf("            operator complexity %.3f, grid complexity %.3f\n", pc.operator_complexity, pc.grid_complexity);
    }
  }
  if (!r.reader.access.empty())
    std::printf("reader      %.1f MB on %d thread(s), %s, %s: load %.1f, parse %.1f, build %.1f ms\n",
                double(r.reader.text_bytes) / 1e6, r.reader.threads, r.reader.access.c_str(), r.reader.method.c_str(),
                r.reader.load_ms, r.reader.parse_ms, r.reader.build_ms);
  if (s.fallback_columns > 0)
    std::printf("fallback    %d column(s): %s\n", s.fallback_columns, s.fallback_reason.c_str());
  std::printf("\nphase%s                       ms\n", r.ranks.empty() ? "" : " (rank 0)");
  for (const auto& p : r.phases) std::printf("  %-24s %10.3f\n", p.name.c_str(), p.ms);
  if (!r.ranks.empty()) {
    // GPU memory: the whole process's on its device (CUDA's context and NCCL's buffers included), and per row
    std::printf("\nrank        rows          nnz    halo in   halo out  problem ms  NCCL ms  setup ms  solve ms  GPU GiB  GPU B/row\n");
    for (const RankLine& l : r.ranks)
      std::printf("  %4d %10lld %12lld %10lld %10lld %11.1f %8.1f %9.1f %9.1f %8.2f %10.1f\n", l.rank, static_cast<long long>(l.rows),
                  static_cast<long long>(l.nnz), static_cast<long long>(l.halo_in), static_cast<long long>(l.halo_out),
                  l.problem_ms, l.nccl_ms, l.setup_ms, l.solve_ms, l.memory_bytes / double(1 << 30),
                  l.rows > 0 ? l.memory_bytes / double(l.rows) : 0.0);
    int64_t exchanges = 0, sums = 0;
    double sent = 0, exchange_ms = 0, sum_ms = 0;
    for (const RankLine& l : r.ranks) {
      exchanges = std::max(exchanges, l.exchanges), sums = std::max(sums, l.sums), sent += l.sent_bytes;
      exchange_ms = std::max(exchange_ms, l.exchange_ms), sum_ms = std::max(sum_ms, l.sum_ms);
    }
    std::printf("communication: %lld halo exchanges, %.3f MB sent by all ranks", static_cast<long long>(exchanges), sent / 1e6);
    if (exchange_ms > 0) std::printf(", %.3f ms on the slowest rank's exchange stream (overlaps the local product)", exchange_ms);
    std::printf("; %lld sums over ranks", static_cast<long long>(sums));
    if (sum_ms > 0) std::printf(", %.3f ms on the slowest rank", sum_ms);
    std::printf("\n");
  }
  if (!r.steps.empty()) {
    std::printf("\nupdate steps (new values on the first matrix's pattern; the setup's choices kept)\n");
    std::printf("  step  %-32s  read ms  update ms   solve ms  iterations  ||b-Ax||/||b||  status\n", "matrix");
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const StepLine& st = r.steps[i];
      const double update_ms = st.update_phases.empty() ? 0 : st.update_phases.back().ms;
      std::printf("  %4zu  %-32s %8.1f %10.1f %10.1f %11d %15.3e  %s\n", i + 1, st.matrix.c_str(), st.read_ms, update_ms,
                  st.solve_ms, st.iterations, st.relative_true_residual, st.converged ? "converged" : "NOT converged");
      std::printf("        update:");
      for (const Phase& p : st.update_phases)
        if (&p != &st.update_phases.back()) std::printf("%s %s %.1f", &p == &st.update_phases.front() ? "" : ",", p.name.c_str(), p.ms);
      std::printf(" ms\n");
      const PreconditionerReport& pc = st.preconditioner;
      if (!pc.phases.empty()) {
        std::printf("        %s:", name_of(pc.kind));
        for (const Phase& p : pc.phases) std::printf("%s %s %.1f", &p == &pc.phases.front() ? "" : ",", p.name.c_str(), p.ms);
        std::printf(" ms\n");
      }
      if (st.precision != r.precision || st.precision_reason != r.precision_reason)
        std::printf("        precision: %s%s%s\n", st.precision.c_str(), st.precision_reason.empty() ? "" : ": ",
                    st.precision_reason.c_str());
      if (!st.checksum.empty()) std::printf("        checksum of x: %s\n", st.checksum.c_str());
    }
  }
  if (!s.kernels.empty()) {
    double total = 0;
    for (const auto& k : s.kernels) total += k.total_ms;
    std::printf("\nkernel                 calls   total ms   %% solve    mean us     GB/s\n");
    for (const auto& k : s.kernels) {
      const double mean_us = k.calls ? 1e3 * k.total_ms / k.calls : 0;
      const double gbs = k.total_ms > 0 ? k.total_bytes / (k.total_ms * 1e6) : 0;
      if (k.total_ms > 0)
        std::printf("  %-19s %8lld %10.3f %8.1f%% %10.2f %8.1f\n", k.name.c_str(), static_cast<long long>(k.calls),
                    k.total_ms, s.solve_ms > 0 ? 100.0 * k.total_ms / s.solve_ms : 0, mean_us, gbs);
      else
        std::printf("  %-19s %8lld   (phase timing only)\n", k.name.c_str(), static_cast<long long>(k.calls));
    }
    if (total > 0)
      std::printf("  timing overhead: ~%.3f ms of events (%.2f%% of the solve)\n", s.timing_overhead_ms,
                  s.solve_ms > 0 ? 100.0 * s.timing_overhead_ms / s.solve_ms : 0);
  }
  std::printf("\ncolumn  status          iterations   ||r||/||b|| (recursive)   ||b-Ax||/||b|| (true)\n");
  for (size_t j = 0; j < s.columns.size(); ++j) {
    const auto& c = s.columns[j];
    const double bn = c.b_norm > 0 ? c.b_norm : 1;
    std::printf("  %4zu  %-15s %10d   %22.3e   %22.3e\n", j, to_string(c.status), c.iterations,
                c.recursive_residual / bn, c.true_residual / bn);
  }
  std::printf("\nsolve %.3f ms, %lld operator applies (%lld columns)\n", s.solve_ms,
              static_cast<long long>(s.operator_applies), static_cast<long long>(s.operator_columns));
  if (!r.checksum.empty()) std::printf("checksum of x (FNV-1a over the bits): %s\n", r.checksum.c_str());
  if (r.verify_relative_residual >= 0)
    std::printf("verify (Eigen, host): max ||b - A x|| / ||b|| = %.3e\n", r.verify_relative_residual);
  if (r.eigen_iterations >= 0)
    std::printf("verify (Eigen ConjugateGradient): %d iterations, max |x - x_eigen| / |x_eigen| = %.3e\n",
                r.eigen_iterations, r.eigen_solution_difference);
  std::printf("status: %s\n", s.all_converged() ? "converged" : "NOT converged");
}

std::string report_json(const SolveReport& r) {
  const SolveResult& s = r.result;
  Json j;
  j.begin_object();
  j.kv("matrix", r.matrix).kv("name", r.name).kv("rows", static_cast<long long>(r.rows))
      .kv("nnz", static_cast<long long>(r.nnz)).kv("nrhs", r.nrhs);
  j.kv("solver", r.solver).kv("precond", r.precond).kv("vector_ops", r.vector_ops).kv("backend", r.backend);
  j.kv("kernel", r.kernel).kv("kernel_reason", r.kernel_reason).kv("rtol", r.rtol).kv("atol", r.atol);
  j.kv("precision", r.precision).kv("precision_reason", r.precision_reason);
  j.kv("cuda_graph", s.used_graph).kv("persistent_kernel", s.used_persistent).kv("fallback_columns", s.fallback_columns);
  j.kv("recurrence", s.used_one_reduction ? "one-reduction" : "classic").kv("residual_replacements", s.residual_replacements);
  if (s.fallback_columns > 0) j.kv("fallback_reason", s.fallback_reason);
  if (!r.reader.access.empty()) {
    j.begin_object("reader").kv("threads", r.reader.threads).kv("access", r.reader.access).kv("method", r.reader.method);
    j.kv("text_bytes", static_cast<long long>(r.reader.text_bytes)).kv("load_ms", r.reader.load_ms);
    j.kv("parse_ms", r.reader.parse_ms).kv("build_ms", r.reader.build_ms).end_object();
  }
  const PreconditionerReport& pc = r.preconditioner;
  if (pc.kind != Preconditioner::none || !pc.reason.empty()) {
    j.begin_object("preconditioner").kv("kind", name_of(pc.kind)).kv("detail", pc.detail).kv("reason", pc.reason);
    j.kv("setup_ms", pc.setup_ms);
    j.begin_array("phases");
    for (const auto& p : pc.phases) j.begin_object().kv("name", p.name).kv("ms", p.ms).end_object();
    j.end_array();
    if (!pc.levels.empty()) {
      j.kv("operator_complexity", pc.operator_complexity).kv("grid_complexity", pc.grid_complexity);
      j.begin_array("levels");
      for (const auto& l : pc.levels) {
        j.begin_object().kv("rows", l.rows).kv("nnz", static_cast<long long>(l.nnz)).kv("kernel", l.kernel)
            .kv("smoother_lambda_max", l.smoother_lambda_max);
        if (l.global_rows > 0)  // several GPUs: the level over the ranks
          j.kv("global_rows", static_cast<long long>(l.global_rows)).kv("halo", static_cast<long long>(l.halo))
              .kv("held_whole", l.held_whole);
        j.end_object();
      }
      j.end_array();
    }
    j.end_object();
  }
  if (!r.ranks.empty()) {
    j.begin_array("ranks");
    for (const RankLine& l : r.ranks)
      j.begin_object().kv("rank", l.rank).kv("rows", static_cast<long long>(l.rows)).kv("nnz", static_cast<long long>(l.nnz))
          .kv("halo_in", static_cast<long long>(l.halo_in)).kv("halo_out", static_cast<long long>(l.halo_out))
          .kv("problem_ms", l.problem_ms).kv("nccl_ms", l.nccl_ms).kv("setup_ms", l.setup_ms).kv("solve_ms", l.solve_ms)
          .kv("sums", static_cast<long long>(l.sums)).kv("sum_ms", l.sum_ms).kv("exchanges", static_cast<long long>(l.exchanges))
          .kv("sent_bytes", l.sent_bytes).kv("exchange_ms", l.exchange_ms).kv("gpu_memory_bytes", l.memory_bytes).end_object();
    j.end_array();
  }
  j.begin_array("phases");
  for (const auto& p : r.phases) j.begin_object().kv("name", p.name).kv("ms", p.ms).end_object();
  j.end_array();
  j.begin_array("kernels");
  for (const auto& k : s.kernels) {
    j.begin_object().kv("name", k.name).kv("calls", static_cast<long long>(k.calls)).kv("total_ms", k.total_ms);
    j.kv("percent_of_solve", s.solve_ms > 0 ? 100.0 * k.total_ms / s.solve_ms : 0.0);
    j.kv("mean_us", k.calls ? 1e3 * k.total_ms / k.calls : 0.0).kv("bytes_per_call", k.bytes_per_call);
    j.kv("gbs", k.total_ms > 0 ? k.total_bytes / (k.total_ms * 1e6) : 0.0).end_object();
  }
  j.end_array();
  j.kv("solve_ms", s.solve_ms).kv("timing_overhead_ms", s.timing_overhead_ms);
  j.kv("operator_applies", static_cast<long long>(s.operator_applies));
  j.kv("operator_columns", static_cast<long long>(s.operator_columns));
  j.begin_array("columns");
  for (const auto& c : s.columns) {
    j.begin_object().kv("status", to_string(c.status)).kv("iterations", c.iterations).kv("b_norm", c.b_norm);
    j.kv("recursive_residual", c.recursive_residual).kv("true_residual", c.true_residual);
    j.kv("relative_true_residual", c.b_norm > 0 ? c.true_residual / c.b_norm : c.true_residual).end_object();
  }
  j.end_array();
  j.kv("converged", s.all_converged());
  if (!r.checksum.empty()) j.kv("checksum", r.checksum);
  if (!r.steps.empty()) {
    j.begin_array("steps");
    for (const StepLine& st : r.steps) {
      j.begin_object().kv("matrix", st.matrix).kv("read_ms", st.read_ms);
      j.begin_array("update_phases");
      for (const auto& p : st.update_phases) j.begin_object().kv("name", p.name).kv("ms", p.ms).end_object();
      j.end_array();
      j.begin_array("preconditioner_phases");
      for (const auto& p : st.preconditioner.phases) j.begin_object().kv("name", p.name).kv("ms", p.ms).end_object();
      j.end_array();
      j.kv("solve_ms", st.solve_ms).kv("iterations", st.iterations).kv("relative_true_residual", st.relative_true_residual);
      j.kv("converged", st.converged).kv("precision", st.precision).kv("precision_reason", st.precision_reason);
      if (!st.checksum.empty()) j.kv("checksum", st.checksum);
      j.end_object();
    }
    j.end_array();
  }
  if (r.verify_relative_residual >= 0) j.kv("verify_relative_residual", r.verify_relative_residual);
  if (r.eigen_iterations >= 0) j.kv("eigen_iterations", r.eigen_iterations).kv("eigen_solution_difference", r.eigen_solution_difference);
  j.end_object();
  return j.str();
}

namespace {
// A CSV field: quoted (quotes doubled) when it holds a comma, a quote or a line end ("start (CUDA, overlapped)").
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::string report_csv(const SolveReport& r) {
  std::string out = "section,name,calls,total_ms,mean_us,bytes_per_call,status,iterations,recursive_residual,true_residual\n";
  char line[512];
  for (const auto& p : r.phases) {
    std::snprintf(line, sizeof line, "phase,%s,,%.6f,,,,,,\n", csv_field(p.name).c_str(), p.ms);
    out += line;
  }
  for (const auto& k : r.result.kernels) {
    std::snprintf(line, sizeof line, "kernel,%s,%lld,%.6f,%.6f,%.0f,,,,\n", csv_field(k.name).c_str(), static_cast<long long>(k.calls),
                  k.total_ms, k.calls ? 1e3 * k.total_ms / k.calls : 0.0, k.bytes_per_call);
    out += line;
  }
  for (size_t j = 0; j < r.result.columns.size(); ++j) {
    const auto& c = r.result.columns[j];
    std::snprintf(line, sizeof line, "column,%zu,,,,,%s,%d,%.17g,%.17g\n", j, to_string(c.status), c.iterations,
                  c.recursive_residual, c.true_residual);
    out += line;
  }
  // a sequence's later matrices: each update phase ("step N: name"), then the step's solve with its verdict
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const StepLine& st = r.steps[i];
    const std::string step = "step " + std::to_string(i + 1);
    for (const auto& p : st.update_phases) {
      std::snprintf(line, sizeof line, "update,%s,,%.6f,,,,,,\n", csv_field(step + ": " + p.name).c_str(), p.ms);
      out += line;
    }
    std::snprintf(line, sizeof line, "step,%s,,%.6f,,,%s,%d,,%.17g\n", csv_field(step + ": " + st.matrix).c_str(),
                  st.solve_ms, st.converged ? "converged" : "not-converged", st.iterations, st.relative_true_residual);
    out += line;
  }
  return out;
}

}  // namespace spcg
