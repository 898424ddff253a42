// spcg bench: the benchmarks' options, typed into BenchOptions, and the dispatch to the harness
// (solver/bench: spmv, spmm, cg, block-cg, vcycle) or to the reader's benchmark (apps/bench_read.cpp).
#include <boost/program_options.hpp>
#include <charconv>
#include <cstdio>

#include "solver/bench/bench_common.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "sparse/parallel.hpp"
#include "spcg/spcg.hpp"

namespace po = boost::program_options;

namespace spcg {

namespace {
// "0,4,8": thread counts for bench read, 0 meaning every core.
std::vector<int> read_thread_counts(const std::string& list) {
  std::vector<int> counts;
  for (const std::string& item : split(list)) {
    int t = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), t);
    if (ec != std::errc() || end != item.data() + item.size() || t < 0)
      throw UsageError("--threads: '" + item + "' is not a thread count");
    counts.push_back(t == 0 ? hardware_threads() : t);
  }
  return counts;
}
}  // namespace

int run_bench(const std::vector<std::string>& args) {
  po::options_description opts("spcg bench spmv|spmm|cg|block-cg|vcycle [options]\n       spcg bench read FILE... [--runs N]\noptions");
  opts.add_options()("help,h", "show this help")("list", "list the registry kernels and exit")
      ("what", po::value<std::string>(), "spmv | spmm | cg | block-cg | vcycle | read")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "read: the Matrix Market files")
      ("matrices", po::value<std::string>()->default_value(""), "comma-separated files or generator specs (default: the issue's set)")
      ("matrix-dir", po::value<std::string>()->default_value(default_matrix_dir()), "directory of SPD .mtx files added to the set (block-cg: block-cg vs multi-cg iterations on those below 50000 rows)")
      ("no-files", "do not add the files of --matrix-dir")
      ("kernels", po::value<std::string>()->default_value(""), "comma-separated registry names (default: all of the family, cuSPARSE, auto)")
      ("k", po::value<std::string>()->default_value("1,2,4,8,16,32"), "block widths (spmm), or the k of block-cg")
      ("runs", po::value<int>()->default_value(50), "timed runs per kernel (median reported)")
      ("threads", po::value<std::string>()->default_value("0"), "read: comma-separated thread counts beside one (0: every core)")
      ("kernel", po::value<std::string>()->default_value("auto"), "cg: kernel for our CG; vcycle: level 0's kernel")
      ("tol", po::value<double>()->default_value(1e-8), "cg/block-cg: relative tolerance")
      ("maxit", po::value<int>()->default_value(20000), "cg/block-cg: iteration limit")
      ("output", po::value<std::string>(), "write results as JSON (.json) or CSV (.csv)");
  po::positional_options_description pos;
  pos.add("what", 1).add("files", -1);
  po::variables_map vm;
  if (!parse_command_line(args, opts, pos, vm)) return 0;
  if (vm.count("list")) {
    for (const KernelListing& e : registry_listing())
      std::printf("%-14s %-8s %s\n", e.name.c_str(), e.family.c_str(), e.description.c_str());
    return 0;
  }
  if (!vm.count("what")) throw UsageError("missing benchmark: spmv, spmm, cg, block-cg, vcycle or read");
  if (vm["runs"].as<int>() < 1) throw UsageError("--runs must be >= 1");
  if (vm["what"].as<std::string>() == "read")  // the host reader: no device, few runs (each reads the whole file)
    return bench_read(vm.count("files") ? vm["files"].as<std::vector<std::string>>() : std::vector<std::string>{},
                      vm["runs"].defaulted() ? 5 : vm["runs"].as<int>(), read_thread_counts(vm["threads"].as<std::string>()));
  const std::string what = vm["what"].as<std::string>();
  if (what != "spmv" && what != "spmm" && what != "cg" && what != "block-cg" && what != "vcycle")
    throw UsageError("unknown benchmark '" + what + "': expected spmv, spmm, cg, block-cg, vcycle or read");
  if (vm.count("files")) throw UsageError("unexpected arguments after '" + what + "'");
  BenchOptions o;
  o.matrices = split(vm["matrices"].as<std::string>());
  o.kernels = split(vm["kernels"].as<std::string>());
  o.ks.clear();
  for (const std::string& item : split(vm["k"].as<std::string>())) {
    int k = 0;
    const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), k);
    if (ec != std::errc() || end != item.data() + item.size() || k < 1) throw UsageError("--k: '" + item + "' is not a block width");
    o.ks.push_back(k);
  }
  o.runs = vm["runs"].as<int>();
  o.kernel = vm["kernel"].as<std::string>();
  o.rtol = vm["tol"].as<double>();
  o.max_iterations = vm["maxit"].as<int>();
  if (!vm.count("no-files")) o.matrix_dir = vm["matrix-dir"].as<std::string>();
  if (vm.count("output")) o.output = vm["output"].as<std::string>();
  mtx_files(o.matrix_dir);  // a bad directory is named before the device is asked
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("benchmarks need a CUDA device: " + why);
  if (what == "spmv") return bench_spmv_spmm(false, o);
  if (what == "spmm") return bench_spmv_spmm(true, o);
  if (what == "cg") return bench_cg(o);
  if (what == "vcycle") return bench_vcycle(o);
  return bench_block_cg(o);
}

}  // namespace spcg
