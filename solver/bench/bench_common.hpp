#pragma once
// The benchmark harness (an internal library, spcg_bench: not installed) that `spcg bench` drives: its options,
// the benchmarks (bench_kernels.cpp: spmv, spmm; bench_solvers.cpp: cg, block-cg, vcycle) and what they share: the
// device header line, the copy bandwidth, medians, the matrix sets, and the output writer (JSON or CSV by the
// file's extension). It sits above the solvers and the kernels and times them directly; it prints its tables.
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "sparse/problem.hpp"

namespace spcg {

std::vector<std::string> split(const std::string& comma_separated);
double median(std::vector<double> v);
// Device-to-device memcpy bandwidth (read + write), GB/s: the floor every figure is printed against.
double measure_copy_bandwidth_gbs();
// The median time (ms) of device copies of each pass's bytes (half read, half written), back to back on one stream,
// each on memory of its own: what moving those bytes in as many launches takes at their size, ramps and tails
// included -- the floor of a kernel (or of an iteration's passes) at its own size.
double copies_ms(const std::vector<double>& pass_bytes);
std::string device_name();  // with its SM count and L2 size
int l2_bytes();
std::vector<std::string> mtx_files(const std::string& dir);
std::vector<std::string> spd_files(const std::string& dir, int64_t max_rows);  // the SPD files below max_rows
std::string default_matrix_dir();
// Loads a matrix of a table's set; a file the reader refuses becomes a "skipped" line instead of ending the bench.
bool load_or_skip(const std::string& m, Problem& p);

// One result row: fields in order, each kept as JSON text and as CSV text.
class Record {
 public:
  Record& kv(const char* key, const std::string& v);
  Record& kv(const char* key, const char* v) { return kv(key, std::string(v)); }
  Record& kv(const char* key, bool v);
  Record& kv(const char* key, int v) { return kv(key, static_cast<long long>(v)); }
  Record& kv(const char* key, long long v);
  Record& kv(const char* key, double v);
  struct Field {
    std::string key, json, csv;
  };
  const std::vector<Field>& fields() const { return fields_; }

 private:
  std::vector<Field> fields_;
};

// A benchmark's output: header fields (device, bandwidth, options), named tables of rows and summary fields.
// .json: one object; .csv: the rows of every table, a `table` column first, the union of their fields as columns.
class BenchOutput {
 public:
  Record& header() { return header_; }
  Record& summary() { return summary_; }
  Record& add(const std::string& table);
  void write(const std::string& path) const;

 private:
  Record header_, summary_;
  std::vector<std::pair<std::string, std::vector<Record>>> tables_;
};

// What a benchmark is asked (spcg bench's options, typed).
struct BenchOptions {
  std::vector<std::string> matrices;  // files or generator specs (empty: the benchmark's own set)
  std::vector<std::string> kernels;   // registry names (empty: the family, cuSPARSE and auto)
  std::vector<int> ks{1, 2, 4, 8, 16, 32};  // block widths (spmm); block-cg takes the last
  int runs = 50;                      // timed runs per kernel (median reported)
  std::string kernel = "auto";        // cg: our CG's kernel; vcycle: level 0's
  double rtol = 1e-8;                 // cg, block-cg
  int max_iterations = 20000;         // cg, block-cg
  std::string matrix_dir;             // SPD files added to the set (empty: none)
  std::optional<std::string> output;  // .json or .csv
};

// The benchmarks: each prints its table and writes the output when asked. They need a CUDA device.
int bench_spmv_spmm(bool spmm, const BenchOptions& o);
int bench_cg(const BenchOptions& o);
int bench_block_cg(const BenchOptions& o);
int bench_vcycle(const BenchOptions& o);

// The registry as `spcg bench --list` prints it: name, family (spmv | spmm | baseline), description.
struct KernelListing {
  std::string name, family, description;
};
std::vector<KernelListing> registry_listing();

}  // namespace spcg
