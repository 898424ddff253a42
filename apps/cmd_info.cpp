#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>

#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "spcg/error.hpp"
#include "spcg/generators.hpp"
#include "sparse/json.hpp"
#include "sparse/problem.hpp"

namespace po = boost::program_options;

namespace spcg {

// Stored values an FP32 copy would change: none means mixed precision loses nothing (spcg solve --precision
// auto takes it where the kernel has an FP32 variant).
int64_t values_not_fp32(const CsrMatrix& a) {
  return std::count_if(a.values.begin(), a.values.end(),
                       [](double v) { return static_cast<double>(static_cast<float>(v)) != v; });
}

std::string stats_json(const Problem& p) {
  const MatrixStats& s = p.stats;
  Json j;
  j.begin_object();
  j.kv("source", p.source).kv("name", p.name).kv("kind", p.kind);
  j.kv("rows", s.rows).kv("cols", s.cols).kv("nnz", static_cast<long long>(s.nnz));
  j.kv("symmetric", s.numerically_symmetric).kv("pattern_symmetric", s.pattern_symmetric);
  j.kv("max_asymmetry", s.max_asymmetry);
  j.begin_object("row_length");
  j.kv("min", s.row_min).kv("mean", s.row_mean).kv("max", s.row_max).kv("stddev", s.row_stddev);
  j.begin_array("histogram");
  for (const auto& b : s.histogram)
    j.begin_object().kv("lo", static_cast<long long>(b.lo)).kv("hi", static_cast<long long>(b.hi))
        .kv("rows", static_cast<long long>(b.rows)).end_object();
  j.end_array().end_object();
  j.kv("empty_rows", static_cast<long long>(s.empty_rows)).kv("bandwidth", static_cast<long long>(s.bandwidth));
  j.kv("distinct_diagonals", static_cast<long long>(s.distinct_diagonals));
  j.kv("diagonal_positive", s.diagonal_positive).kv("missing_diagonal", static_cast<long long>(s.missing_diagonal));
  j.kv("nonpositive_diagonal", static_cast<long long>(s.nonpositive_diagonal));
  j.kv("diagonally_dominant_rows", static_cast<long long>(s.diagonally_dominant_rows));
  j.kv("strictly_dominant_rows", static_cast<long long>(s.strictly_dominant_rows));
  j.kv("explicit_zeros", static_cast<long long>(s.explicit_zeros)).kv("duplicates_summed", static_cast<long long>(s.duplicates_summed));
  j.kv("ell_fill", s.ell_fill).kv("dia_fill", s.dia_fill);
  j.kv("values_not_fp32", static_cast<long long>(values_not_fp32(p.a)));
  j.kv("read_ms", p.read_ms).kv("stats_ms", p.stats_ms);
  if (!p.read.access.empty()) {
    const ReadProfile& r = p.read;
    j.begin_object("reader").kv("threads", r.threads).kv("chunks", static_cast<long long>(r.chunks));
    j.kv("access", r.access).kv("method", r.method).kv("file_bytes", static_cast<long long>(r.file_bytes));
    j.kv("text_bytes", static_cast<long long>(r.text_bytes)).kv("load_ms", r.load_ms).kv("parse_ms", r.parse_ms);
    j.kv("build_ms", r.build_ms).end_object();
  }
  j.end_object();
  return j.str();
}

void print_stats_table(const Problem& p) {
  const MatrixStats& s = p.stats;
  std::printf("matrix            %s\n", p.source.c_str());
  if (!p.name.empty()) std::printf("name              %s\n", p.name.c_str());
  if (!p.kind.empty()) std::printf("kind              %s\n", p.kind.c_str());
  std::printf("size              %d x %d, %lld stored entries (%.2f per row)\n", s.rows, s.cols,
              static_cast<long long>(s.nnz), s.row_mean);
  std::printf("row length        min %d, mean %.2f, max %d, stddev %.2f, empty rows %lld\n", s.row_min, s.row_mean,
              s.row_max, s.row_stddev, static_cast<long long>(s.empty_rows));
  std::printf("histogram         ");
  for (const auto& b : s.histogram)
    if (b.rows) std::printf("[%lld-%lld]:%lld ", static_cast<long long>(b.lo), static_cast<long long>(b.hi), static_cast<long long>(b.rows));
  std::printf("\n");
  std::printf("bandwidth         %lld, %lld distinct diagonals (DIA fill %.2f, ELL fill %.2f)\n",
              static_cast<long long>(s.bandwidth), static_cast<long long>(s.distinct_diagonals), s.dia_fill, s.ell_fill);
  std::printf("symmetry          pattern %s, numerical %s (max relative asymmetry %.2e)\n",
              s.pattern_symmetric ? "yes" : "no", s.numerically_symmetric ? "yes" : "no", s.max_asymmetry);
  std::printf("diagonal          %s; %lld missing, %lld non-positive\n",
              s.diagonal_positive ? "all positive" : "NOT all positive", static_cast<long long>(s.missing_diagonal),
              static_cast<long long>(s.nonpositive_diagonal));
  std::printf("dominance         %lld of %d rows diagonally dominant (%lld strictly)\n",
              static_cast<long long>(s.diagonally_dominant_rows), s.rows, static_cast<long long>(s.strictly_dominant_rows));
  std::printf("explicit zeros    %lld; duplicates summed %lld\n", static_cast<long long>(s.explicit_zeros),
              static_cast<long long>(s.duplicates_summed));
  const int64_t not_fp32 = values_not_fp32(p.a);
  if (not_fp32 == 0) std::printf("values            all FP32 numbers (mixed precision loses nothing)\n");
  else std::printf("values            %lld of %lld are not FP32 numbers\n", static_cast<long long>(not_fp32),
                   static_cast<long long>(s.nnz));
}

int run_info(const std::vector<std::string>& args) {
  po::options_description opts("spcg info FILE|GENERATOR [options]\n  generators: " + generator_help() + "\noptions");
  opts.add_options()("help,h", "show this help")("format", po::value<std::string>()->default_value("table"),
                                                  "table | json")("input", po::value<std::string>(), "matrix file or generator spec")(
      "threads", po::value<int>()->default_value(0), "threads reading the file and computing the statistics (0: all cores)");
  po::positional_options_description pos;
  pos.add("input", 1);
  po::variables_map vm;
  if (!parse_command_line(args, opts, pos, vm)) return 0;
  if (!vm.count("input")) throw UsageError("missing matrix file or generator spec (see spcg info --help)");
  const std::string format = vm["format"].as<std::string>();
  if (format != "table" && format != "json") throw UsageError("--format must be table or json, got '" + format + "'");
  if (vm["threads"].as<int>() < 0) throw UsageError("--threads must be >= 0");
  ReadOptions ro;
  ro.threads = vm["threads"].as<int>();
  const Problem p = load_problem(vm["input"].as<std::string>(), ro);
  if (format == "json") std::printf("%s\n", stats_json(p).c_str());
  else print_stats_table(p);
  return 0;
}

}  // namespace spcg
