// spcg's command line: the subcommands (info, solve, bench, generate, version) and the exit codes their errors map to
// (0 ok, 1 bad input or runtime error, 2 usage error, 3 the solve did not converge). main() is apps/main.cpp.
#include <boost/program_options/errors.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "spcg/error.hpp"

namespace {
const char* kUsage =
    "spcg: conjugate gradients on the GPU for sparse symmetric positive definite systems\n"
    "\n"
    "usage: spcg <command> [options]\n"
    "  info  FILE|GENERATOR     matrix statistics (table, or --format json)\n"
    "  solve [FILE] [options]   solve A x = b (default: the built-in inputs/fv1.mtx)\n"
    "  bench spmv|spmm|cg|block-cg|read [options]   benchmarks against cuSPARSE, the copy bandwidth, one thread\n"
    "  generate GENERATOR --output FILE   write a generated matrix as Matrix Market\n"
    "  version                  the version, the commit built, CUDA and the GPU architectures (also --version)\n"
    "\n"
    "Run 'spcg <command> --help' for the options of a command.\n";
}

namespace {
const auto process_start = std::chrono::steady_clock::now();
}

double spcg::ms_since_process_start() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - process_start).count();
}

int spcg::run_cli(std::vector<std::string> args) {
  if (args.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (args[0] == "--version" || args[0] == "version") {
    std::fputs(spcg::version_text().c_str(), stdout);
    return 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "info") return spcg::run_info(args);
    if (cmd == "solve") return spcg::run_solve(args);
    if (cmd == "bench") return spcg::run_bench(args);
    if (cmd == "generate") return spcg::run_generate(args);
    std::fprintf(stderr, "spcg: unknown command '%s' (expected info, solve, bench, generate or version)\n", cmd.c_str());
    return 2;
  } catch (const spcg::UsageError& e) {
    std::fprintf(stderr, "spcg %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const boost::program_options::error& e) {
    std::fprintf(stderr, "spcg %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const spcg::Error& e) {
    std::fprintf(stderr, "spcg %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "spcg %s: error: out of host memory\n", cmd.c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "spcg %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}
