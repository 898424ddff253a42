// The benchmarks' shared part (bench_common.hpp).
#include "solver/bench/bench_common.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "kernels/cuda_check.hpp"
#include "kernels/device_array.hpp"
#include "spcg/error.hpp"
#include "sparse/json.hpp"
#include "kernels/linear_operator.hpp"
#include "spcg/matrix_market.hpp"
#include "kernels/registry.hpp"

namespace fs = std::filesystem;

namespace spcg {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string t;
  while (std::getline(ss, t, ','))
    if (!t.empty()) out.push_back(t);
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Device-to-device copy of 2 x 1 GiB, counting bytes read plus written.
double measure_copy_bandwidth_gbs() {
  const size_t bytes = size_t{1} << 30;
  DeviceArray<char> a(bytes, "copy-bandwidth probe"), b(bytes, "copy-bandwidth probe");
  CHECK_CUDA(cudaMemset(a.data(), 1, bytes));
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t = time_on_stream_ms(0, [&] { CHECK_CUDA(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, 0)); });
    if (i >= 3) ms.push_back(t);
  }
  return 2.0 * bytes / (median(ms) * 1e6);
}

// The median time of device copies of each pass's bytes (half read, half written), back to back on one stream,
// each pass on memory of its own (no pass reads what the last left in L2).
double copies_ms(const std::vector<double>& pass_bytes) {
  std::vector<size_t> at{0};
  for (double b : pass_bytes) at.push_back(at.back() + static_cast<size_t>(b / 2) / 256 * 256 + 256);
  DeviceArray<char> from(at.back(), "copy floor"), to(at.back(), "copy floor");
  CHECK_CUDA(cudaMemset(from.data(), 1, at.back()));
  std::vector<double> ms;
  for (int i = 0; i < 23; ++i) {
    const double t = time_on_stream_ms(0, [&] {
      for (size_t p = 0; p < pass_bytes.size(); ++p)
        CHECK_CUDA(cudaMemcpyAsync(to.data() + at[p], from.data() + at[p], static_cast<size_t>(pass_bytes[p] / 2),
                                   cudaMemcpyDeviceToDevice, 0));
    });
    if (i >= 3) ms.push_back(t);
  }
  return median(ms);
}

// The .mtx / .mtx.gz files of dir, sorted; none for an empty dir (no default directory was found). A directory
// without any (../shared/matrices rather than its spd/) is a usage error: it would silently bench nothing.
std::vector<std::string> mtx_files(const std::string& dir) {
  std::vector<std::string> out;
  if (dir.empty()) return out;
  if (!fs::is_directory(dir)) throw UsageError("--matrix-dir " + dir + ": not a directory");
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string p = e.path().string();
    if (p.size() > 4 && (p.substr(p.size() - 4) == ".mtx" || p.substr(p.size() - 7) == ".mtx.gz")) out.push_back(p);
  }
  if (out.empty()) throw UsageError("--matrix-dir " + dir + ": no .mtx or .mtx.gz files there (use --no-files to bench generated matrices only)");
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> spd_files(const std::string& dir, int64_t max_rows) {
  std::vector<std::string> out = mtx_files(dir);
  if (max_rows > 0) {
    std::vector<std::string> small;
    for (const auto& p : out) {
      try {
        if (load_problem(p).a.rows < max_rows) small.push_back(p);
      } catch (const Error&) {
      }
    }
    return small;
  }
  return out;
}

std::string default_matrix_dir() {
  for (const char* d : {"../shared/matrices/spd", "shared/matrices/spd", ".devdata/matrices/spd"})
    if (fs::is_directory(d)) return d;
  return "";
}

std::string device_name() {
  cudaDeviceProp p{};
  int d = 0;
  CHECK_CUDA(cudaGetDevice(&d));
  CHECK_CUDA(cudaGetDeviceProperties(&p, d));
  char s[sizeof(cudaDeviceProp::name) + 64];  // the name plus the SM and L2 figures
  std::snprintf(s, sizeof s, "%s (%d SMs, %.0f MB L2)", p.name, p.multiProcessorCount, p.l2CacheSize / 1e6);
  return s;
}

int l2_bytes() {
  int d = 0, v = 0;
  CHECK_CUDA(cudaGetDevice(&d));
  CHECK_CUDA(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, d));
  return v;
}

std::vector<KernelListing> registry_listing() {
  std::vector<KernelListing> out;
  for (const auto& e : kernel_registry())
    out.push_back({e.name, e.family == KernelFamily::spmv ? "spmv" : e.family == KernelFamily::spmm ? "spmm" : "baseline",
                   e.description});
  return out;
}

bool load_or_skip(const std::string& m, Problem& p) {
  try {
    p = load_problem(m);
    return true;
  } catch (const InputError& e) {
    std::printf("%-22s skipped: %s\n", m.c_str(), e.what());
    return false;
  }
}

namespace {
std::string csv_quote(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string r = "\"";
  for (char c : s) r += c == '"' ? std::string("\"\"") : std::string(1, c);
  return r + "\"";
}
}  // namespace

Record& Record::kv(const char* key, const std::string& v) {
  fields_.push_back({key, Json::quote(v), csv_quote(v)});
  return *this;
}
Record& Record::kv(const char* key, bool v) {
  fields_.push_back({key, v ? "true" : "false", v ? "1" : "0"});
  return *this;
}
Record& Record::kv(const char* key, long long v) {
  fields_.push_back({key, std::to_string(v), std::to_string(v)});
  return *this;
}
Record& Record::kv(const char* key, double v) {
  const std::string n = Json::number(v);
  fields_.push_back({key, n, n == "null" ? "" : n});
  return *this;
}

Record& BenchOutput::add(const std::string& table) {
  auto it = std::find_if(tables_.begin(), tables_.end(), [&](const auto& t) { return t.first == table; });
  if (it == tables_.end()) it = tables_.insert(tables_.end(), {table, {}});
  return it->second.emplace_back();
}

void BenchOutput::write(const std::string& path) const {
  std::ofstream f(path);
  if (!f) throw InputError(path, 0, "cannot open for writing");
  const bool csv = path.size() > 4 && path.substr(path.size() - 4) == ".csv";
  if (csv) {
    std::vector<std::string> columns;
    for (const auto& [name, rows] : tables_)
      for (const Record& r : rows)
        for (const auto& fld : r.fields())
          if (std::find(columns.begin(), columns.end(), fld.key) == columns.end()) columns.push_back(fld.key);
    f << "table";
    for (const auto& c : columns) f << ',' << csv_quote(c);
    f << '\n';
    for (const auto& [name, rows] : tables_)
      for (const Record& r : rows) {
        f << csv_quote(name);
        for (const auto& c : columns) {
          f << ',';
          for (const auto& fld : r.fields())
            if (fld.key == c) {
              f << fld.csv;
              break;
            }
        }
        f << '\n';
      }
  } else {
    auto fields = [](std::string& out, const Record& r) {
      for (const auto& fld : r.fields()) out += (out.back() == '{' ? "" : ",") + Json::quote(fld.key) + ":" + fld.json;
    };
    std::string out = "{";
    fields(out, header_);
    for (const auto& [name, rows] : tables_) {
      out += (out.back() == '{' ? "" : ",") + Json::quote(name) + ":[";
      for (size_t i = 0; i < rows.size(); ++i) {
        out += i ? ",{" : "{";
        fields(out, rows[i]);
        out += "}";
      }
      out += "]";
    }
    fields(out, summary_);
    f << out << "}\n";
  }
  if (!f) throw InputError(path, 0, "write failed");
}

}  // namespace spcg
