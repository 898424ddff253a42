// The solve report (apps/report.cpp) in-process, with every section a GPU solve fills (preconditioner and AMG
// levels, ranks, the kernel table, block-cg's fallback, checksum, verify): the table, JSON (parsed back by a
// strict checker) and CSV. Host only: the report is plain data.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "apps/report.hpp"

namespace {

// A strict JSON checker (RFC 8259 values; no trailing commas, strings with escapes, numbers): true when `s`
// is exactly one value.
class JsonChecker {
 public:
  explicit JsonChecker(const std::string& s) : s_(s) {}
  bool ok() {
    skip();
    if (!value()) return false;
    skip();
    return i_ == s_.size();
  }

 private:
  void skip() {
    while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
  }
  bool literal(const char* w) {
    const size_t n = std::strlen(w);
    if (s_.compare(i_, n, w) != 0) return false;
    i_ += n;
    return true;
  }
  bool string() {
    if (i_ >= s_.size() || s_[i_] != '"') return false;
    for (++i_; i_ < s_.size(); ++i_) {
      const char c = s_[i_];
      if (c == '"') return ++i_, true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c == '\\') {
        if (++i_ >= s_.size()) return false;
        if (s_[i_] == 'u') {
          for (int k = 0; k < 4; ++k)
            if (++i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
        } else if (!std::strchr("\"\\/bfnrt", s_[i_])) {
          return false;
        }
      }
    }
    return false;
  }
  bool number() {
    const size_t start = i_;
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    auto digits = [&] {
      const size_t d = i_;
      while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_]))) ++i_;
      return i_ > d;
    };
    if (!digits()) return false;
    if (i_ < s_.size() && s_[i_] == '.' && (++i_, !digits())) return false;
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!digits()) return false;
    }
    return i_ > start;
  }
  template <class Item>
  bool sequence(char close, Item item) {
    skip();
    if (i_ < s_.size() && s_[i_] == close) return ++i_, true;
    while (true) {
      skip();
      if (!item()) return false;
      skip();
      if (i_ >= s_.size()) return false;
      if (s_[i_] == close) return ++i_, true;
      if (s_[i_++] != ',') return false;
    }
  }
  bool value() {
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{':
        ++i_;
        return sequence('}', [&] {
          if (!string()) return false;
          skip();
          if (i_ >= s_.size() || s_[i_++] != ':') return false;
          skip();
          return value();
        });
      case '[': ++i_; return sequence(']', [&] { return value(); });
      case '"': return string();
      case 't': return literal("true");
      case 'f': return literal("false");
      case 'n': return literal("null");
      default: return number();
    }
  }
  const std::string& s_;
  size_t i_ = 0;
};

bool valid_json(const std::string& s) { return JsonChecker(s).ok(); }

// What a 2-rank block-cg solve with AMG, timed kernels and a fallback reports.
spcg::SolveReport full_report() {
  spcg::SolveReport r;
  r.matrix = "poisson3d:64", r.name = "poisson3d:64", r.kernel = "rank 0: dia", r.kernel_reason = "banded: \"DIA\" wins";
  r.backend = "gpu x 2 (NCCL, spcg --gpus)", r.solver = "block-cg", r.precond = "auto -> amg", r.vector_ops = "fused";
  r.reader.access = "read", r.reader.method = "two passes", r.reader.threads = 4, r.reader.text_bytes = 2500000;
  r.reader.load_ms = 1.5, r.reader.parse_ms = 2.5, r.reader.build_ms = 3.5;
  r.rows = 262144, r.nnz = 1810432, r.nrhs = 3, r.rtol = 1e-8, r.atol = 0;
  r.phases = {{"start (CUDA + NCCL, overlapped)", 400.0}, {"solve", 12.5}};
  spcg::PreconditionerReport& pc = r.preconditioner;
  pc.kind = spcg::Preconditioner::amg, pc.reason = "262144 rows >= 100000", pc.detail = "3 levels";
  pc.phases = {{"aggregate", 1.25}, {"galerkin", 2.5}}, pc.setup_ms = 4.0;
  pc.levels = {{262144, 1810432, "dia", 1.9}, {9709, 250000, "csr-vector", 1.7}, {120, 14400, "dense", 0}};
  pc.operator_complexity = 1.146, pc.grid_complexity = 1.037;
  spcg::SolveResult& s = r.result;
  s.solver = "block-cg", s.solve_ms = 12.5, s.timing_overhead_ms = 0.25, s.operator_applies = 40, s.operator_columns = 110;
  s.used_graph = true, s.fallback_columns = 2, s.fallback_reason = "no progress in 200 iterations; finished by multi-cg";
  s.kernels = {{"spmm dia", 40, 10.0, 1e6, 4e7}, {"allreduce", 80, 0.0, 0, 0}};
  s.columns = {{spcg::ColumnStatus::converged, 30, 512.0, 1e-6, 2e-6},
               {spcg::ColumnStatus::max_iterations, 200, 0.0, 3.0, std::numeric_limits<double>::infinity()},
               {spcg::ColumnStatus::converged, 31, 4.0, 1e-8, 1e-8}};
  spcg::RankLine a, b;
  a.rank = 0, a.rows = 131072, a.nnz = 905216, a.halo_in = 4096, a.halo_out = 4096, a.problem_ms = 20, a.nccl_ms = 500;
  a.setup_ms = 30, a.solve_ms = 12, a.sums = 90, a.sum_ms = 0.5, a.exchanges = 40, a.sent_bytes = 1.3e6, a.exchange_ms = 0.75;
  a.memory_bytes = 2.0 * (1 << 30);
  b = a, b.rank = 1, b.sums = 91, b.sum_ms = 0.25, b.exchange_ms = 1.0, b.sent_bytes = 1.2e6;
  r.ranks = {a, b};
  r.checksum = "0123456789abcdef", r.verify_relative_residual = 2e-6, r.eigen_iterations = 33, r.eigen_solution_difference = 1e-9;
  r.precision = "mixed", r.precision_reason = "every value is an FP32 number";
  s.used_one_reduction = true, s.residual_replacements = 2;
  spcg::StepLine step;
  step.matrix = "poisson3d:64 (step 2)", step.read_ms = 5, step.update_phases = {{"upload", 1.5}, {"update (total)", 3.0}};
  step.solve_ms = 7, step.iterations = 29, step.relative_true_residual = 5e-9, step.converged = true;
  step.precision = "double", step.precision_reason = "12 of the 1810432 values are not FP32 numbers";
  r.steps = {step};
  return r;
}

TEST(Report, TableHasEverySection) {
  testing::internal::CaptureStdout();
  spcg::print_report(full_report());
  const std::string out = testing::internal::GetCapturedStdout();
  for (const char* text : {
           "== spcg solve: poisson3d:64 (poisson3d:64)", "system      262144 rows, 1810432 nonzeros, 3 right-hand side(s)",
           "solver      block-cg, precond auto -> amg, vector ops fused, backend gpu x 2 (NCCL, spcg --gpus), one-reduction "
           "recurrence, 2 residual replacement(s), CUDA graph",
           "precision   mixed: every value is an FP32 number",
           "        precision: double: 12 of the 1810432 values are not FP32 numbers",
           "kernel      rank 0: dia: banded: \"DIA\" wins", "precond     amg: 3 levels, setup 4.0 ms (aggregate 1.2, galerkin 2.5 ms)",
           "            auto: 262144 rows >= 100000", "            level        rows          nnz   kernel",
           "                2         120        14400   dense", "operator complexity 1.146, grid complexity 1.037",
           "reader      2.5 MB on 4 thread(s), read, two passes: load 1.5, parse 2.5, build 3.5 ms",
           "fallback    2 column(s): no progress in 200 iterations; finished by multi-cg", "phase (rank 0)",
           "  start (CUDA + NCCL, overlapped)", "rank        rows          nnz", "     1     131072       905216",
           "communication: 40 halo exchanges, 2.500 MB sent by all ranks, 1.000 ms on the slowest rank's exchange stream",
           "; 91 sums over ranks, 0.500 ms on the slowest rank", "  spmm dia                  40     10.000     80.0%     250.00      4.0",
           "  allreduce                 80   (phase timing only)", "timing overhead: ~0.250 ms of events (2.00% of the solve)",
           "     1  max-iterations         200", "solve 12.500 ms, 40 operator applies (110 columns)",
           "checksum of x (FNV-1a over the bits): 0123456789abcdef", "verify (Eigen, host): max ||b - A x|| / ||b|| = 2.000e-06",
           "verify (Eigen ConjugateGradient): 33 iterations, max |x - x_eigen| / |x_eigen| = 1.000e-09", "status: NOT converged"})
    EXPECT_NE(out.find(text), std::string::npos) << text << "\n" << out;
}

// A plain host solve's report: no preconditioner, rank, kernel, fallback, checksum or verify lines.
TEST(Report, PlainReportLeavesOutWhatDidNotHappen) {
  spcg::SolveReport r;
  r.matrix = r.name = "poisson2d:8", r.backend = "host", r.solver = "cg", r.precond = "none", r.vector_ops = "fused";
  r.result.columns = {{spcg::ColumnStatus::converged, 9, 8.0, 1e-9, 1e-9}};
  testing::internal::CaptureStdout();
  spcg::print_report(r);
  const std::string out = testing::internal::GetCapturedStdout();
  for (const char* absent : {"precond     ", "reader      ", "fallback", "rank        rows", "kernel                 calls",
                             "checksum", "verify", "persistent kernel", "CUDA graph"})
    EXPECT_EQ(out.find(absent), std::string::npos) << absent << "\n" << out;
  EXPECT_NE(out.find("status: converged"), std::string::npos) << out;
  const std::string json = spcg::report_json(r);
  EXPECT_TRUE(valid_json(json)) << json;
  for (const char* absent : {"\"preconditioner\"", "\"ranks\"", "\"reader\"", "\"fallback_reason\"", "\"checksum\"", "\"verify_",
                             "\"eigen_"})
    EXPECT_EQ(json.find(absent), std::string::npos) << absent << "\n" << json;
  EXPECT_NE(json.find("\"converged\":true"), std::string::npos) << json;
  r.result.used_persistent = true;
  testing::internal::CaptureStdout();
  spcg::print_report(r);
  EXPECT_NE(testing::internal::GetCapturedStdout().find("backend host, persistent kernel"), std::string::npos);
}

TEST(Report, JsonIsValidAndHasEveryField) {
  const std::string json = spcg::report_json(full_report());
  ASSERT_TRUE(valid_json(json)) << json;
  for (const char* text : {
           "\"matrix\":\"poisson3d:64\"", "\"rows\":262144", "\"nrhs\":3", "\"kernel_reason\":\"banded: \\\"DIA\\\" wins\"",
           "\"cuda_graph\":true", "\"persistent_kernel\":false", "\"fallback_columns\":2",
           "\"fallback_reason\":\"no progress in 200 iterations; finished by multi-cg\"",
           "\"reader\":{\"threads\":4,\"access\":\"read\",\"method\":\"two passes\",\"text_bytes\":2500000",
           "\"preconditioner\":{\"kind\":\"amg\",\"detail\":\"3 levels\",\"reason\":\"262144 rows >= 100000\",\"setup_ms\":4",
           "\"phases\":[{\"name\":\"aggregate\",\"ms\":1.25},{\"name\":\"galerkin\",\"ms\":2.5}]",
           "\"operator_complexity\":1.1459999999999999", "{\"rows\":120,\"nnz\":14400,\"kernel\":\"dense\",\"smoother_lambda_max\":0}",
           "\"ranks\":[{\"rank\":0,\"rows\":131072,\"nnz\":905216,\"halo_in\":4096,\"halo_out\":4096",
           "{\"rank\":1,", "\"gpu_memory_bytes\":2147483648",
           "{\"name\":\"spmm dia\",\"calls\":40,\"total_ms\":10,\"percent_of_solve\":80,\"mean_us\":250,\"bytes_per_call\":1000000,\"gbs\":4}",
           "{\"name\":\"allreduce\",\"calls\":80,\"total_ms\":0,\"percent_of_solve\":0,\"mean_us\":0,",
           "\"operator_applies\":40", "\"operator_columns\":110",
           "{\"status\":\"converged\",\"iterations\":30,\"b_norm\":512,\"recursive_residual\":9.9999999999999995e-07,"
           "\"true_residual\":1.9999999999999999e-06,\"relative_true_residual\":3.9062499999999998e-09}",
           // a zero right-hand side: the residual itself; a non-finite one: null
           "{\"status\":\"max-iterations\",\"iterations\":200,\"b_norm\":0,\"recursive_residual\":3,\"true_residual\":null,"
           "\"relative_true_residual\":null}",
           "\"converged\":false", "\"checksum\":\"0123456789abcdef\"", "\"verify_relative_residual\":1.9999999999999999e-06",
           "\"eigen_iterations\":33", "\"eigen_solution_difference\":1.0000000000000001e-09",
           "\"precision\":\"mixed\",\"precision_reason\":\"every value is an FP32 number\"",
           "\"recurrence\":\"one-reduction\",\"residual_replacements\":2",
           "\"converged\":true,\"precision\":\"double\",\"precision_reason\":\"12 of the 1810432 values are not FP32 numbers\""})
    EXPECT_NE(json.find(text), std::string::npos) << text << "\n" << json;
}

// CSV: one header, a row per phase, kernel, column and a sequence step's phase and solve, ten fields each; a name
// with a comma or a quote is quoted.
TEST(Report, CsvRowsAndQuoting) {
  spcg::SolveReport r = full_report();
  r.result.kernels.push_back({"pack \"halo\", send", 2, 0.5, 100, 200});
  const std::string csv = spcg::report_csv(r);
  std::vector<std::string> lines;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 2 + 3 + 3 + 3);
  EXPECT_EQ(lines[0], "section,name,calls,total_ms,mean_us,bytes_per_call,status,iterations,recursive_residual,true_residual");
  EXPECT_EQ(lines[1], "phase,\"start (CUDA + NCCL, overlapped)\",,400.000000,,,,,,");
  EXPECT_EQ(lines[2], "phase,solve,,12.500000,,,,,,");  // nothing to quote
  EXPECT_EQ(lines[3], "kernel,spmm dia,40,10.000000,250.000000,1000000,,,,");
  EXPECT_EQ(lines[4], "kernel,allreduce,80,0.000000,0.000000,0,,,,");
  EXPECT_EQ(lines[5], "kernel,\"pack \"\"halo\"\", send\",2,0.500000,250.000000,100,,,,");
  EXPECT_EQ(lines[6], "column,0,,,,,converged,30,9.9999999999999995e-07,1.9999999999999999e-06");
  EXPECT_EQ(lines[7], "column,1,,,,,max-iterations,200,3,inf");
  // a sequence's later matrix: its update phases, then its solve
  EXPECT_EQ(lines[9], "update,step 1: upload,,1.500000,,,,,,");
  EXPECT_EQ(lines[11], "step,step 1: poisson3d:64 (step 2),,7.000000,,,converged,29,,5.0000000000000001e-09");
}

// A rank's figures through the ranks x fields block rank 0 gets: each field back, whatever the other slots hold
// (each rank fills its own slot; the block is summed over ranks).
TEST(Report, RankFiguresTravelWhole) {
  const spcg::SolveReport r = full_report();
  std::vector<double> block(2 * spcg::kRankFigures, 0.0), mine(block.size(), 0.0);
  spcg::pack_rank_figures(r.ranks[0], mine.data());
  spcg::pack_rank_figures(r.ranks[1], block.data() + spcg::kRankFigures);
  for (size_t i = 0; i < block.size(); ++i) block[i] += mine[i];  // the sum over ranks
  for (int rank = 0; rank < 2; ++rank) {
    const spcg::RankLine& want = r.ranks[static_cast<size_t>(rank)];
    const spcg::RankLine got = spcg::unpack_rank_figures(block.data() + rank * spcg::kRankFigures, rank);
    EXPECT_EQ(got.rank, rank);
    EXPECT_EQ(got.rows, want.rows);
    EXPECT_EQ(got.nnz, want.nnz);
    EXPECT_EQ(got.halo_in, want.halo_in);
    EXPECT_EQ(got.halo_out, want.halo_out);
    EXPECT_EQ(got.problem_ms, want.problem_ms);
    EXPECT_EQ(got.nccl_ms, want.nccl_ms);
    EXPECT_EQ(got.setup_ms, want.setup_ms);
    EXPECT_EQ(got.solve_ms, want.solve_ms);
    EXPECT_EQ(got.sums, want.sums);
    EXPECT_EQ(got.sum_ms, want.sum_ms);
    EXPECT_EQ(got.exchanges, want.exchanges);
    EXPECT_EQ(got.sent_bytes, want.sent_bytes);
    EXPECT_EQ(got.exchange_ms, want.exchange_ms);
    EXPECT_EQ(got.memory_bytes, want.memory_bytes);
  }
  spcg::RankLine big;
  big.nnz = (int64_t{1} << 53) - 1;  // nonzeros of a huge share: exact up to 2^53
  std::vector<double> slot(spcg::kRankFigures);
  spcg::pack_rank_figures(big, slot.data());
  EXPECT_EQ(spcg::unpack_rank_figures(slot.data(), 0).nnz, big.nnz);
}

// FNV-1a (64-bit) over each double's 8 bytes in memory order: the offset basis for no data, and a value
// computed here byte by byte.
TEST(Report, ChecksumIsFnv1aOverTheBits) {
  EXPECT_EQ(spcg::fnv1a_checksum({}), "cbf29ce484222325");
  spcg::HostVector<double> v = {1.0, -0.0, 3.5};
  uint64_t h = 0xcbf29ce484222325ULL;
  for (double d : v) {
    unsigned char b[8];
    std::memcpy(b, &d, 8);
    for (unsigned char c : b) h = (h ^ c) * 0x100000001b3ULL;
  }
  char want[20];
  std::snprintf(want, sizeof want, "%016llx", static_cast<unsigned long long>(h));
  EXPECT_EQ(spcg::fnv1a_checksum(v), want);
  spcg::HostVector<double> w = {1.0, 0.0, 3.5};  // +0 and -0 differ in their bits
  EXPECT_NE(spcg::fnv1a_checksum(w), spcg::fnv1a_checksum(v));
}

}  // namespace

namespace {
size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}
}  // namespace

// --plot's picture: one polyline per column (its points inside the plot area, iterations left to right, a smaller
// residual higher up never), the stop target dashed, a grid line per decade, the ranks' bars (four phases each),
// names escaped; a 4096-column block draws its first 64 and says so; no history says why.
TEST(Report, PlotDrawsEveryColumnAndEachRanksPhases) {
  spcg::SolveReport r;
  r.name = "a<b>&c", r.solver = "block-cg", r.precond = "jacobi", r.backend = "gpu x 2", r.rtol = 1e-8;
  for (int j = 0; j < 3; ++j) {
    r.result.columns.push_back({spcg::ColumnStatus::converged, 40, 2.0, 1e-8, 1e-8});
    std::vector<std::pair<int, double>> h;
    for (int it = 0; it <= 40; it += 4) h.emplace_back(it, 2.0 * std::pow(10.0, -0.2 * it - j));
    r.result.history.push_back(h);
  }
  r.ranks = {spcg::RankLine{}, spcg::RankLine{}};
  r.ranks[1].rank = 1, r.ranks[0].solve_ms = 5, r.ranks[1].solve_ms = 7, r.ranks[1].setup_ms = 2;
  const std::string svg = spcg::residual_svg(r);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(count_of(svg, "<polyline class=\"column\""), 3u);
  EXPECT_EQ(count_of(svg, "<rect x="), 8u) << "two ranks, four phases each";
  EXPECT_EQ(count_of(svg, "stroke-dasharray"), 1u) << "the target";
  EXPECT_EQ(count_of(svg, ">1e"), 11u) << "a grid line per decade, 1e-10 (column 2 at iteration 40) .. 1e0";
  EXPECT_NE(svg.find("a&lt;b&gt;&amp;c"), std::string::npos);
  EXPECT_EQ(svg.find("a<b>"), std::string::npos);
  // column 0's points: x increasing, y decreasing upward (residuals fall), all inside the plot area
  const size_t p0 = svg.find("points=\"", svg.find("<polyline")) + 8;
  std::istringstream points(svg.substr(p0, svg.find('"', p0) - p0));
  double last_x = -1, last_y = -1;
  for (std::string xy; points >> xy;) {
    const double x = std::stod(xy.substr(0, xy.find(','))), y = std::stod(xy.substr(xy.find(',') + 1));
    EXPECT_GT(x, last_x);
    EXPECT_GT(y, last_y) << "a falling residual is drawn lower on the page's y axis (SVG's y grows downward)";
    EXPECT_TRUE(x >= 70.0 && x <= 740.0 && y >= 40.0 && y <= 410.0) << x << "," << y;
    last_x = x, last_y = y;
  }
  EXPECT_GT(last_x, 0);

  spcg::SolveReport wide;
  wide.result.history.assign(4096, {{0, 1.0}, {1, 0.5}});
  const std::string many = spcg::residual_svg(wide);
  EXPECT_EQ(count_of(many, "<polyline class=\"column\""), 64u);
  EXPECT_NE(many.find("the first 64 of 4096 columns"), std::string::npos);
  EXPECT_NE(spcg::residual_svg(spcg::SolveReport{}).find("no residual history"), std::string::npos);

  // ratios that underflow to 0 or overflow to inf are left out; the axes stay finite and few
  spcg::SolveReport extreme;
  extreme.rtol = 1e-8;
  extreme.result.columns.push_back({spcg::ColumnStatus::non_finite, 3, 1e10, 0, 0});
  extreme.result.columns.push_back({spcg::ColumnStatus::non_finite, 3, 1e-300, 0, 0});
  extreme.result.history = {{{0, 1e10}, {1, 1e-320}, {2, 1.0}}, {{0, 1e-300}, {1, 1e300}, {2, 1e-301}}};
  const std::string odd = spcg::residual_svg(extreme);
  EXPECT_EQ(odd.find("inf"), std::string::npos);
  EXPECT_EQ(odd.find("nan"), std::string::npos);
  EXPECT_LE(count_of(odd, ">1e"), 700u);
  EXPECT_EQ(count_of(odd, "<polyline class=\"column\""), 2u);
}
