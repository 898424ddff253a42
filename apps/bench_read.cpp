// spcg bench read FILE...: the Matrix Market reader on one thread and on every core (the read a user gets, and
// the one-pass read forced beside it), whole reads timed on the host clock (median of several), with the split
// into load (open / read / inflate), parse and build (CSR by row), as MB/s of file text and entries/s. No GPU
// needed.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "apps/commands.hpp"
#include "spcg/error.hpp"
#include "spcg/matrix_market.hpp"
#include "sparse/parallel.hpp"

namespace spcg {

int bench_read(const std::vector<std::string>& files, int runs, const std::vector<int>& thread_counts) {
  if (files.empty()) throw UsageError("bench read: give one or more Matrix Market files");
  std::printf("%-28s %8s %10s %7s %9s %9s %8s %8s %8s %8s %20s %8s\n", "file", "MB", "entries", "threads", "ms", "MB/s",
              "Ment/s", "load", "parse", "build", "(count/alloc/scatter)", "speedup");
  for (const std::string& f : files) {
    double one_ms = 0;
    struct Variant {
      int threads;
      ReadPasses passes;
    };
    std::vector<Variant> variants{{1, ReadPasses::one}};
    for (const int t : thread_counts)
      if (t > 1) variants.push_back({t, ReadPasses::two}), variants.push_back({t, ReadPasses::one});
    for (const Variant variant : variants) {
      const int threads = variant.threads;
      std::vector<double> total, load, parse, build, count, alloc, scatter;
      MatrixMarketInfo info;
      for (int r = 0; r < runs; ++r) {
        ReadOptions o;
        o.threads = threads, o.passes = variant.passes;
        const auto t0 = std::chrono::steady_clock::now();
        const MatrixFile m = read_matrix_market(f, o);
        total.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        load.push_back(m.info.read.load_ms), parse.push_back(m.info.read.parse_ms), build.push_back(m.info.read.build_ms);
        count.push_back(m.info.read.count_ms), alloc.push_back(m.info.read.allocate_ms);
        scatter.push_back(m.info.read.scatter_ms);
        info = m.info;
      }
      auto median = [](std::vector<double> v) {
        std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
        return v[v.size() / 2];
      };
      const double ms = median(total);
      if (threads == 1) one_ms = ms;
      const double mb = double(info.read.text_bytes) / 1e6;
      std::string name = f.substr(f.find_last_of('/') + 1);
      if (name.size() > 28) name = name.substr(0, 25) + "...";
      char split[64];
      std::snprintf(split, sizeof split, "(%.1f/%.1f/%.1f)", median(count), median(alloc), median(scatter));
      std::printf("%-28s %8.1f %10lld %7d %9.1f %9.0f %8.1f %8.1f %8.1f %8.1f %20s %7.2fx  (%s, %s)\n", name.c_str(),
                  mb, static_cast<long long>(info.declared_entries), threads, ms, mb / (ms / 1e3),
                  double(info.declared_entries) / (ms * 1e3), median(load), median(parse), median(build), split,
                  one_ms / ms, info.read.access.c_str(), info.read.method.c_str());
    }
  }
  return 0;
}

}  // namespace spcg
