// spcg bench spmv|spmm|cg|block-cg: CUDA events, warm-up, medians of many runs, cuSPARSE and the device copy
// bandwidth measured in the same process, each figure printed beside its bytes model.
#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "bench_probes.hpp"
#include "commands.hpp"
#include "options.hpp"
#include "parallel.hpp"
#include "cuda_check.hpp"
#include "device_formats.hpp"
#include "eigen_bridge.hpp"
#include "error.hpp"
#include "formats.hpp"
#include "generators.hpp"
#include "json.hpp"
#include "problem.hpp"
#include "reference_cg.hpp"
#include "registry.hpp"
#include "solver.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace spcg {
namespace {

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

struct Row {
  std::string matrix, kernel, status;
  int k = 1;
  int64_t rows = 0, nnz = 0;
  double setup_ms = 0, apply_ms = 0, csr_gbs = 0, own_gbs = 0, gflops = 0, copy_fraction = 0, vs_cusparse = 0,
         max_rel_diff = 0, per_rhs_ms = 0, vs_spmv_per_rhs = 0;
  bool latency_bound = false;
  std::string note;
};

void write_rows(const std::string& path, const std::vector<Row>& rows, double copy_gbs, const std::string& device) {
  std::ofstream f(path);
  if (!f) throw InputError(path, 0, "cannot open for writing");
  const bool csv = path.size() > 4 && path.substr(path.size() - 4) == ".csv";
  if (csv) {
    f << "matrix,kernel,k,rows,nnz,status,setup_ms,apply_ms,csr_gbs,own_gbs,gflops,copy_fraction,speedup_vs_best_cusparse,"
         "per_rhs_ms,max_rel_diff,latency_bound,note\n";
    for (const auto& r : rows)
      f << r.matrix << ',' << r.kernel << ',' << r.k << ',' << r.rows << ',' << r.nnz << ',' << r.status << ','
        << r.setup_ms << ',' << r.apply_ms << ',' << r.csr_gbs << ',' << r.own_gbs << ',' << r.gflops << ','
        << r.copy_fraction << ',' << r.vs_cusparse << ',' << r.per_rhs_ms << ',' << r.max_rel_diff << ','
        << r.latency_bound << ",\"" << r.note << "\"\n";
    return;
  }
  Json j;
  j.begin_object().kv("device", device).kv("copy_bandwidth_gbs", copy_gbs).begin_array("results");
  for (const auto& r : rows) {
    j.begin_object().kv("matrix", r.matrix).kv("kernel", r.kernel).kv("k", r.k).kv("rows", static_cast<long long>(r.rows));
    j.kv("nnz", static_cast<long long>(r.nnz)).kv("status", r.status).kv("setup_ms", r.setup_ms);
    j.kv("setup_in_applies", r.apply_ms > 0 ? r.setup_ms / r.apply_ms : 0.0).kv("apply_ms", r.apply_ms);
    j.kv("csr_model_gbs", r.csr_gbs).kv("own_model_gbs", r.own_gbs).kv("gflops", r.gflops);
    j.kv("copy_fraction_csr_model", r.copy_fraction).kv("speedup_vs_best_cusparse", r.vs_cusparse);
    j.kv("per_rhs_ms", r.per_rhs_ms).kv("per_rhs_vs_best_spmv", r.vs_spmv_per_rhs).kv("max_rel_diff", r.max_rel_diff);
    j.kv("latency_bound", r.latency_bound).kv("note", r.note).end_object();
  }
  j.end_array().end_object();
  f << j.str() << "\n";
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

// Median time of one apply over `runs` timed runs. A latency-bound matrix (a few us per apply) is timed in
// batches of back-to-back applies, as a solver loop issues them: one apply per event pair measured the host's
// launch jitter and the clocks' idle state (csr-vector on LFAT5: 7.2 us in one run, 9.1 in the next).
template <class F>
double median_apply_ms(int runs, bool latency_bound, F&& apply) {
  constexpr int kBatch = 20;
  const int batch = latency_bound ? kBatch : 1;
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i)
    ms.push_back(time_on_stream_ms(0, [&] {
                   for (int b = 0; b < batch; ++b) apply();
                 }) /
                 batch);
  return median(ms);
}

// Times every kernel at block width k on one matrix. The first kernel's output is the cross-check reference.
void bench_matrix(const std::string& spec, const std::vector<std::string>& kernels, const std::vector<int>& ks, int runs,
                  double copy_gbs, std::vector<Row>& out) {
  Problem p = load_problem(spec);
  const CsrMatrix& a = p.a;
  const bool small = csr_bytes_model(a.rows, a.nnz()) < 2.0 * l2_bytes();
  std::printf("\n== %s: %d rows, %lld nnz%s\n", p.name.c_str(), a.rows, static_cast<long long>(a.nnz()),
              small ? " (fits in L2: latency-bound, reported separately)" : "");
  std::printf("%-14s %4s %9s %8s %10s %8s %8s %7s %7s %9s %9s %s\n", "kernel", "k", "setup ms", "setup/ap", "apply us",
              "CSR GB/s", "own GB/s", "GFLOP/s", "%copy", "vs cuSP", "max diff", "note");
  const int kmax = *std::max_element(ks.begin(), ks.end());
  DeviceBlock X(a.cols, kmax, "bench X"), Y(a.rows, kmax, "bench Y");
  std::vector<double> hx(X.size());
  {
    SplitMix64 rng(11);
    for (auto& v : hx) v = 2 * rng.uniform() - 1;
    X.values.upload(hx);
  }
  std::map<int, std::vector<double>> reference;
  std::map<int, double> best_cusparse, best_spmv_per_rhs;
  std::vector<Row> rows;
  struct Candidate {
    Row base;
    std::unique_ptr<LinearOperator> op;
  };
  auto create = [&](const std::string& name, int expected_k) {
    Candidate c;
    c.base.matrix = p.name, c.base.kernel = name, c.base.rows = a.rows, c.base.nnz = a.nnz(), c.base.latency_bound = small;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      OperatorOptions oo;
      oo.expected_k = expected_k;
      c.op = make_operator(name, a, oo);
      CHECK_CUDA(cudaDeviceSynchronize());
    } catch (const FormatRefused& e) {
      c.base.status = "refused";
      c.base.note = e.what();
      std::printf("%-14s  refused: %s\n", name.c_str(), e.what());
      out.push_back(c.base);
      return c;
    }
    c.base.setup_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (name == "auto") c.base.note = c.op->setup_info().reason;
    return c;
  };
  // One timed row: warm-up, the cross-check against the first kernel's output, then the median time.
  auto measure = [&](const Candidate& c, int k, const DeviceBlock& Xk, DeviceBlock& Yk, double apply_ms) {
    Row r = c.base;
    r.k = k;
    r.status = "ok";
    r.apply_ms = apply_ms;
    c.op->apply(1.0, Xk, 0.0, Yk);
    std::vector<double> y = Yk.values.download();
    auto& ref = reference[k];
    if (ref.empty()) ref = y;
    double num = 0, den = 0;
    for (size_t i = 0; i < y.size(); ++i) num = std::max(num, std::abs(y[i] - ref[i])), den = std::max(den, std::abs(ref[i]));
    r.max_rel_diff = den > 0 ? num / den : num;
    const double csr_bytes = csr_bytes_model(a.rows, a.nnz(), k);
    r.csr_gbs = csr_bytes / (r.apply_ms * 1e6);
    r.own_gbs = c.op->bytes_per_apply(k) / (r.apply_ms * 1e6);
    r.gflops = 2.0 * a.nnz() * k / (r.apply_ms * 1e6);
    r.copy_fraction = r.csr_gbs / copy_gbs;
    r.per_rhs_ms = r.apply_ms / k;
    if (r.kernel.rfind("cusparse", 0) == 0) {
      auto& b = best_cusparse[k];
      b = b == 0 ? r.apply_ms : std::min(b, r.apply_ms);
    }
    if (find_kernel(r.kernel) && find_kernel(r.kernel)->family == KernelFamily::spmv && k == 1) {
      auto& b = best_spmv_per_rhs[1];
      b = b == 0 ? r.apply_ms : std::min(b, r.apply_ms);
    }
    rows.push_back(r);
  };
  auto block_for = [&](int k) {
    DeviceBlock Xk(a.cols, k);
    CHECK_CUDA(cudaMemcpy2D(Xk.data(), k * 8, X.data(), kmax * 8, k * 8, a.cols, cudaMemcpyDeviceToDevice));
    return Xk;
  };
  if (!small) {  // one operator at a time (large formats), each timed on its own
    for (const auto& name : kernels) {
      // auto chooses its SpMM kernel (or repeated SpMV) for the k it is told to expect, as a solver with k
      // right-hand sides tells it: so one auto per k; every other kernel is built once.
      const bool per_k = name == "auto" && kmax > 1;
      Candidate c;
      if (!per_k) c = create(name, 1);
      if (!per_k && !c.op) continue;
      for (int k : ks) {
        if (per_k && !(c = create(name, k)).op) break;
        const DeviceBlock Xk = block_for(k);
        DeviceBlock Yk(a.rows, k);
        for (int w = 0; w < 5; ++w) c.op->apply(1.0, Xk, 0.0, Yk);
        measure(c, k, Xk, Yk, median_apply_ms(runs, false, [&] { c.op->apply(1.0, Xk, 0.0, Yk); }));
      }
    }
  } else {  // latency-bound: every operator built first, then timed in turns, run by run, so drift hits all alike
    std::vector<Candidate> cands;
    for (const auto& name : kernels) {
      Candidate c = create(name, kmax > 1 ? ks.back() : 1);
      if (c.op) cands.push_back(std::move(c));
    }
    for (int k : ks) {
      const DeviceBlock Xk = block_for(k);
      DeviceBlock Yk(a.rows, k);
      for (const auto& c : cands)
        for (int w = 0; w < 5; ++w) c.op->apply(1.0, Xk, 0.0, Yk);
      std::vector<std::vector<double>> ms(cands.size());
      for (int r = 0; r < runs; ++r)
        for (size_t i = 0; i < cands.size(); ++i)
          ms[i].push_back(median_apply_ms(1, true, [&] { cands[i].op->apply(1.0, Xk, 0.0, Yk); }));
      for (size_t i = 0; i < cands.size(); ++i) measure(cands[i], k, Xk, Yk, median(ms[i]));
    }
  }
  // The column-major half of the cuSPARSE SpMM baseline, on its own column-major copies of X and Y, checked
  // against the same reference and counted in the best cuSPARSE time.
  const bool baseline = std::any_of(kernels.begin(), kernels.end(), [](const std::string& n) { return n.rfind("cusparse", 0) == 0; });
  if (baseline && kmax > 1 && a.nnz() > 0) {
    for (int alg = 1; alg <= 3; ++alg) {
      CusparseColumnMajorSpmm probe(a, alg);
      for (int k : ks) {
        if (k == 1) continue;
        Row r;
        r.matrix = p.name, r.kernel = probe.name(), r.k = k, r.rows = a.rows, r.nnz = a.nnz(), r.latency_bound = small;
        std::vector<double> hxc(static_cast<size_t>(a.cols) * k);
        for (int32_t i = 0; i < a.cols; ++i)
          for (int j = 0; j < k; ++j) hxc[static_cast<size_t>(j) * a.cols + i] = hx[static_cast<size_t>(i) * kmax + j];
        DeviceArray<double> xc(hxc), yc(static_cast<size_t>(a.rows) * k);
        std::string why;
        if (!probe.prepare(k, xc.data(), yc.data(), why)) {
          r.status = "refused", r.note = why;
          out.push_back(r);
          std::printf("%-14s %4d refused: %s\n", r.kernel.c_str(), k, why.c_str());
          break;
        }
        for (int w = 0; w < 5; ++w) probe.apply(0);
        r.status = "ok";
        r.apply_ms = median_apply_ms(runs, small, [&] { probe.apply(0); });
        const std::vector<double> y = yc.download();
        const auto& ref = reference[k];
        double num = 0, den = 0;
        for (int32_t i = 0; i < a.rows && !ref.empty(); ++i)
          for (int j = 0; j < k; ++j) {
            const double want = ref[static_cast<size_t>(i) * k + j];
            num = std::max(num, std::abs(y[static_cast<size_t>(j) * a.rows + i] - want)), den = std::max(den, std::abs(want));
          }
        r.max_rel_diff = den > 0 ? num / den : num;
        r.note = "column-major X and Y (baseline probe)";
        r.csr_gbs = r.own_gbs = csr_bytes_model(a.rows, a.nnz(), k) / (r.apply_ms * 1e6);
        r.gflops = 2.0 * a.nnz() * k / (r.apply_ms * 1e6);
        r.copy_fraction = r.csr_gbs / copy_gbs;
        r.per_rhs_ms = r.apply_ms / k;
        auto& b = best_cusparse[k];
        b = b == 0 ? r.apply_ms : std::min(b, r.apply_ms);
        rows.push_back(r);
      }
    }
  }
  if (ks.size() == 1 && ks[0] == 1 && a.nnz() > 0) {  // SpMV: the gather floor of these columns, same run
    Row r;
    r.matrix = p.name, r.kernel = "gather-floor", r.k = 1, r.rows = a.rows, r.nnz = a.nnz(), r.latency_bound = small;
    r.status = "probe";
    r.note = "not a kernel: val * x[col] in storage order, no row work: a floor for kernels streaming this CSR";
    SetupInfo ignored;
    const DeviceCsr c = upload_csr(a, ignored);
    DeviceArray<double> partials(gather_floor_partials(a.nnz()), "gather-floor partials");
    auto launch = [&] { launch_gather_floor(a.nnz(), c.values.data(), c.col_idx.data(), X.data(), partials.data(), 0); };
    for (int w = 0; w < 5; ++w) launch();
    r.apply_ms = median_apply_ms(runs, small, launch);
    r.csr_gbs = r.own_gbs = csr_bytes_model(a.rows, a.nnz(), 1) / (r.apply_ms * 1e6);
    r.gflops = 2.0 * a.nnz() / (r.apply_ms * 1e6);
    r.copy_fraction = r.csr_gbs / copy_gbs;
    r.per_rhs_ms = r.apply_ms;
    rows.push_back(r);
  }
  for (auto& r : rows) {
    if (best_cusparse.count(r.k)) r.vs_cusparse = best_cusparse[r.k] / r.apply_ms;
    if (best_spmv_per_rhs.count(1)) r.vs_spmv_per_rhs = r.per_rhs_ms / best_spmv_per_rhs[1];
    std::printf("%-14s %4d %9.2f %8.1f %10.2f %8.1f %8.1f %7.1f %6.1f%% %8.2fx %9.1e %s\n", r.kernel.c_str(), r.k,
                r.setup_ms, r.setup_ms / r.apply_ms, r.apply_ms * 1e3, r.csr_gbs, r.own_gbs, r.gflops,
                100 * r.copy_fraction, r.vs_cusparse, r.max_rel_diff, r.note.c_str());
    out.push_back(r);
  }
}

int bench_spmv_spmm(bool spmm, const po::variables_map& vm) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = split(vm["matrices"].as<std::string>());
  if (matrices.empty())
    matrices = spmm ? std::vector<std::string>{"poisson3d:128", "poisson3d27:100", "powerlaw:1000000"}
                    : std::vector<std::string>{"poisson3d:128", "poisson3d:200", "poisson3d27:100", "aniso3d:160",
                                               "powerlaw:2000000"};
  if (!vm.count("no-files") && !spmm)
    for (const auto& f : spd_files(vm["matrix-dir"].as<std::string>(), 0)) matrices.push_back(f);
  std::vector<std::string> kernels = split(vm["kernels"].as<std::string>());
  if (kernels.empty()) {
    kernels = {"csr-scalar"};  // the cross-check reference first
    for (const auto& n : kernel_names(spmm ? KernelFamily::spmm : KernelFamily::spmv))
      if (n != "csr-scalar") kernels.push_back(n);
    // SpMV references for the per-RHS ratio: the banded, regular and skewed winners.
    if (spmm) kernels.insert(kernels.begin() + 1, {"sell", "dia", "csr-vector", "csr-adaptive"});
    for (const auto& n : kernel_names(KernelFamily::baseline)) kernels.push_back(n);
    kernels.push_back("auto");
  }
  std::vector<int> ks;
  for (const auto& s : split(vm["k"].as<std::string>())) ks.push_back(std::stoi(s));
  if (ks.empty() || !spmm) ks = {1};
  if (spmm && std::find(ks.begin(), ks.end(), 1) == ks.end()) ks.insert(ks.begin(), 1);
  std::vector<Row> rows;
  for (const auto& m : matrices) {
    try {
      bench_matrix(m, kernels, ks, vm["runs"].as<int>(), copy_gbs, rows);
    } catch (const InputError& e) {
      std::printf("\n== %s: skipped: %s\n", m.c_str(), e.what());
    }
  }
  if (vm.count("output")) write_rows(vm["output"].as<std::string>(), rows, copy_gbs, dev);
  return 0;
}

// Loads a matrix of a table's set; a file the reader refuses becomes a "skipped" row instead of ending the bench.
bool load_or_skip(const std::string& m, Problem& p) {
  try {
    p = load_problem(m);
    return true;
  } catch (const InputError& e) {
    std::printf("%-22s skipped: %s\n", m.c_str(), e.what());
    return false;
  }
}

int bench_cg(const po::variables_map& vm) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = split(vm["matrices"].as<std::string>());
  if (matrices.empty()) matrices = {"poisson3d:128"};
  if (!vm.count("no-files"))
    for (const auto& f : spd_files(vm["matrix-dir"].as<std::string>(), 50000)) matrices.push_back(f);
  const double rtol = vm["tol"].as<double>();
  Json j;
  j.begin_object().kv("device", dev).kv("copy_bandwidth_gbs", copy_gbs).kv("rtol", rtol).begin_array("results");
  std::printf("\n%-22s %8s %6s %6s %10s %10s %8s %10s %8s %7s %7s %s\n", "matrix", "rows", "iters", "eigen", "us/iter",
              "floor us", "x floor", "ref us/it", "vs ref", "ref it", "true r", "kernel");
  for (const auto& m : matrices) {
    Problem p;
    if (!load_or_skip(m, p)) continue;
    const CsrMatrix& a = p.a;
    OperatorOptions oo;
    auto op = make_operator(vm["kernel"].as<std::string>(), a, oo);
    SolveOptions o;
    o.stop = {rtol, 0, vm["maxit"].as<int>()};
    o.time_kernels = false;
    o.check_every = a.rows < 200000 ? 32 : 8;
    DeviceBlock B(a.rows, 1), X(a.rows, 1);
    B.values.upload(std::vector<double>(a.rows, 1.0));
    std::vector<double> per_iter;
    SolveResult res;
    // The first run warms up (graph capture, lazy plans). Short solves (tens of us) are repeated until they add
    // up to 50 ms, so that one host hiccup does not move the median.
    double timed_ms = 0;
    for (int rep = 0; rep < 3 || (timed_ms < 50 && rep < 41); ++rep) {
      X.values.upload(std::vector<double>(a.rows, 0.0));
      res = solve(SolverKind::cg, *op, nullptr, B, X, o);
      if (rep > 0) per_iter.push_back(res.solve_ms / std::max(1, res.columns[0].iterations)), timed_ms += res.solve_ms;
    }
    const double us_iter = 1e3 * median(per_iter);
    const double floor_us = (12.0 * a.nnz() + 84.0 * a.rows) / (copy_gbs * 1e3);
    int eigen_it = -1;
    if (a.rows < 50000) {
      DenseBlock b(a.rows, 1, 1.0);
      eigen_it = eigen_cg(a, b, rtol, vm["maxit"].as<int>(), /*jacobi=*/false).iterations[0];
    }
    reference_cusparse_cublas_cg(a, rtol, 20);  // warm-up
    const ReferenceCgResult ref = reference_cusparse_cublas_cg(a, rtol, vm["maxit"].as<int>());
    const double ref_us = 1e3 * ref.ms / std::max(1, ref.iterations);
    const double rel_true = res.columns[0].true_residual / res.columns[0].b_norm;
    std::printf("%-22s %8d %6d %6d %10.2f %10.2f %8.2f %10.2f %7.2fx %7d %7.1e %s\n", p.name.substr(0, 22).c_str(),
                a.rows, res.columns[0].iterations, eigen_it, us_iter, floor_us, us_iter / floor_us, ref_us,
                ref_us / us_iter, ref.iterations, rel_true,
                (auto_choice(*op, 1) + (res.used_persistent ? " (persistent)" : "")).c_str());
    j.begin_object().kv("matrix", p.name).kv("rows", a.rows).kv("nnz", static_cast<long long>(a.nnz()));
    j.kv("iterations", res.columns[0].iterations).kv("eigen_iterations", eigen_it).kv("us_per_iteration", us_iter);
    j.kv("fused_floor_us", floor_us).kv("ratio_to_floor", us_iter / floor_us);
    j.kv("reference_us_per_iteration", ref_us).kv("speedup_vs_reference", ref_us / us_iter);
    j.kv("reference_iterations", ref.iterations).kv("relative_true_residual", rel_true);
    j.kv("status", to_string(res.columns[0].status)).kv("kernel", auto_choice(*op, 1)).kv("cuda_graph", res.used_graph)
        .kv("persistent_kernel", res.used_persistent).end_object();
  }
  j.end_array().end_object();
  if (vm.count("output")) {
    std::ofstream f(vm["output"].as<std::string>());
    f << j.str() << "\n";
  }
  return 0;
}

int max_iterations(const SolveResult& r) {
  int w = 0;
  for (const auto& c : r.columns) w = std::max(w, c.iterations);
  return w;
}

// Robustness on real matrices: block-cg against multi-cg (k independent CG recurrences) on every SPD file of
// --matrix-dir below 50000 rows, without and with Jacobi. Small files are latency-bound, so the figure is the
// iteration count of the slowest column, plus whether the block recurrence kept its block to the end (or
// handed its columns to multi-cg, and why). Each solve's time is printed beside it (the faster of two runs, the
// solvers taking turns; allocations included, as in a user's solve): on small files an iteration costs its
// launches and host round trips, not bandwidth.
void bench_block_cg_files(const po::variables_map& vm, int k, double rtol, Json& j) {
  const std::vector<std::string> files = spd_files(vm["matrix-dir"].as<std::string>(), 50000);
  if (files.empty()) return;
  std::printf("\n== SPD files of %s (n < 50000), k = %d random right-hand sides, rtol %.0e: iterations of the slowest column\n",
              vm["matrix-dir"].as<std::string>().c_str(), k, rtol);
  std::printf("%-22s %8s %-7s %9s %9s %7s %10s %10s %-9s %s\n", "matrix", "rows", "precond", "block-cg", "multi-cg", "ratio",
              "block ms", "multi ms", "converged", "block-cg fallback");
  int solves = 0, fallbacks = 0, slower = 0, slower_time = 0, both_converged = 0;
  long long block_sum = 0, multi_sum = 0;
  double block_ms = 0, multi_ms = 0;
  j.begin_array("files");
  for (const auto& f : files) {
    Problem p;
    if (!load_or_skip(f, p)) continue;
    const CsrMatrix& a = p.a;
    OperatorOptions ok;
    ok.expected_k = k;
    auto op = make_operator("auto", a, ok);
    const DenseBlock b = make_rhs("random", a.rows, k, 5);
    DeviceBlock B(a.rows, k), X(a.rows, k);
    B.values.upload(b.data);
    for (const bool jacobi : {false, true}) {
      std::vector<double> dinv_host;
      try {
        if (jacobi) dinv_host = jacobi_inverse_diagonal(a);
      } catch (const InputError& e) {
        std::printf("%-22s %8d %-7s skipped: %s\n", p.name.substr(0, 22).c_str(), a.rows, "jacobi", e.what());
        continue;
      }
      DeviceArray<double> dinv(dinv_host);
      SolveOptions o;
      o.stop = {rtol, 0, vm["maxit"].as<int>()};
      o.time_kernels = false;
      const char* precond = name_of(jacobi ? Preconditioner::jacobi : Preconditioner::none);
      auto run = [&](SolverKind solver) {
        X.values.upload(std::vector<double>(X.size(), 0.0));
        return solve(solver, *op, jacobi ? dinv.data() : nullptr, B, X, o);
      };
      SolveResult block = run(SolverKind::block_cg), multi = run(SolverKind::multi_cg);
      const SolveResult block2 = run(SolverKind::block_cg), multi2 = run(SolverKind::multi_cg);
      block.solve_ms = std::min(block.solve_ms, block2.solve_ms), multi.solve_ms = std::min(multi.solve_ms, multi2.solve_ms);
      const int bi = max_iterations(block), mi = max_iterations(multi);
      ++solves;
      fallbacks += block.fallback_columns > 0;
      if (block.all_converged() && multi.all_converged()) {
        ++both_converged, block_sum += bi, multi_sum += mi;
        block_ms += block.solve_ms, multi_ms += multi.solve_ms;
        slower += bi > mi;
        slower_time += block.solve_ms > multi.solve_ms;
      }
      const std::string conv = std::string(block.all_converged() ? "yes" : "NO") + "/" + (multi.all_converged() ? "yes" : "NO");
      const std::string fb = block.fallback_columns > 0
                                 ? std::to_string(block.fallback_columns) + " column(s): " + block.fallback_reason
                                 : "-";
      std::printf("%-22s %8d %-7s %9d %9d %7.2f %10.2f %10.2f %-9s %s\n", p.name.substr(0, 22).c_str(), a.rows,
                  precond, bi, mi, static_cast<double>(bi) / std::max(1, mi), block.solve_ms, multi.solve_ms,
                  conv.c_str(), fb.c_str());
      j.begin_object().kv("matrix", p.name).kv("rows", a.rows).kv("precond", precond);
      j.kv("block_cg_iterations", bi).kv("multi_cg_iterations", mi).kv("block_cg_converged", block.all_converged());
      j.kv("block_cg_ms", block.solve_ms).kv("multi_cg_ms", multi.solve_ms);
      j.kv("multi_cg_converged", multi.all_converged()).kv("fallback_columns", block.fallback_columns);
      j.kv("fallback_reason", block.fallback_reason).end_object();
    }
  }
  j.end_array();
  std::printf("block-cg kept its block to the end in %d of %d solves; where both converged (%d), %lld iterations vs "
              "multi-cg's %lld (%.2fx), more than multi-cg in %d; %.1f ms vs %.1f ms (%.2fx), slower in %d\n",
              solves - fallbacks, solves, both_converged, block_sum, multi_sum,
              static_cast<double>(block_sum) / std::max(1LL, multi_sum), slower, block_ms, multi_ms,
              block_ms / std::max(1e-9, multi_ms), slower_time);
  j.kv("files_solves", solves).kv("files_fallbacks", fallbacks).kv("files_block_iterations", block_sum);
  j.kv("files_multi_iterations", multi_sum).kv("files_block_slower", slower);
  j.kv("files_block_ms", block_ms).kv("files_multi_ms", multi_ms).kv("files_block_slower_time", slower_time);
}

int bench_block_cg(const po::variables_map& vm) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = split(vm["matrices"].as<std::string>());
  if (matrices.empty()) matrices = {"poisson3d:128", "poisson3d27:100"};
  const int k = std::stoi(split(vm["k"].as<std::string>()).back());
  const double rtol = vm["tol"].as<double>();
  Json j;
  j.begin_object().kv("device", dev).kv("copy_bandwidth_gbs", copy_gbs).kv("k", k).kv("rtol", rtol).begin_array("results");
  for (const auto& m : matrices) {
    Problem p = load_problem(m);
    const CsrMatrix& a = p.a;
    OperatorOptions o1, ok;
    ok.expected_k = k;
    auto op1 = make_operator("auto", a, o1);
    auto opk = make_operator("auto", a, ok);
    DenseBlock b = make_rhs("random", a.rows, k, 5);
    DeviceBlock B(a.rows, k), X(a.rows, k), B1(a.rows, 1), X1(a.rows, 1);
    B.values.upload(b.data);
    std::vector<double> b1(a.rows);
    for (int i = 0; i < a.rows; ++i) b1[i] = b.at(i, 0);
    B1.values.upload(b1);
    SolveOptions o;
    o.stop = {rtol, 0, vm["maxit"].as<int>()};
    o.time_kernels = false;
    auto run = [&](SolverKind solver, const LinearOperator& op, DeviceBlock& Bx, DeviceBlock& Xx) {
      SolveResult r;
      std::vector<double> ms;
      for (int rep = 0; rep < 2; ++rep) {
        Xx.values.upload(std::vector<double>(Xx.size(), 0.0));
        r = solve(solver, op, nullptr, Bx, Xx, o);
        ms.push_back(r.solve_ms);
      }
      r.solve_ms = ms.back();
      return r;
    };
    const SolveResult single = run(SolverKind::cg, *op1, B1, X1);
    const SolveResult block = run(SolverKind::block_cg, *opk, B, X);
    const SolveResult multi = run(SolverKind::multi_cg, *opk, B, X);
    auto worst = [](const SolveResult& r) {
      double w = 0;
      for (const auto& c : r.columns) w = std::max(w, c.true_residual / c.b_norm);
      return w;
    };
    std::printf("\n== %s, k = %d, rtol %.0e (single CG with %s; block kernels %s)\n", p.name.c_str(), k, rtol,
                auto_choice(*op1, 1).c_str(), auto_choice(*opk, k).c_str());
    std::printf("%-10s %10s %8s %10s %12s %10s %s\n", "solver", "ms", "x 1 CG", "iters", "applies", "worst r", "converged");
    for (const auto* r : {&single, &block, &multi})
      std::printf("%-10s %10.2f %8.2f %10d %12lld %10.1e %s\n", r->solver.c_str(), r->solve_ms, r->solve_ms / single.solve_ms,
                  max_iterations(*r), static_cast<long long>(r->operator_applies), worst(*r), r->all_converged() ? "yes" : "NO");
    j.begin_object().kv("matrix", p.name).kv("rows", a.rows).kv("single_cg_ms", single.solve_ms);
    j.kv("single_cg_iterations", max_iterations(single)).kv("block_cg_ms", block.solve_ms).kv("block_cg_ratio", block.solve_ms / single.solve_ms);
    j.kv("block_cg_iterations", max_iterations(block)).kv("block_cg_applies", static_cast<long long>(block.operator_applies));
    j.kv("block_cg_converged", block.all_converged()).kv("block_cg_worst_true_residual", worst(block));
    j.kv("multi_cg_ms", multi.solve_ms).kv("multi_cg_ratio", multi.solve_ms / single.solve_ms);
    j.kv("multi_cg_iterations", max_iterations(multi)).kv("multi_cg_applies", static_cast<long long>(multi.operator_applies));
    j.kv("multi_cg_converged", multi.all_converged()).kv("multi_cg_worst_true_residual", worst(multi)).end_object();
  }
  j.end_array();
  if (!vm.count("no-files")) bench_block_cg_files(vm, k, rtol, j);
  j.end_object();
  if (vm.count("output")) {
    std::ofstream f(vm["output"].as<std::string>());
    f << j.str() << "\n";
  }
  return 0;
}

}  // namespace

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
  po::options_description opts("spcg bench spmv|spmm|cg|block-cg [options]\n       spcg bench read FILE... [--runs N]\noptions");
  opts.add_options()("help,h", "show this help")("list", "list the registry kernels and exit")
      ("what", po::value<std::string>(), "spmv | spmm | cg | block-cg | read")
      ("files", po::value<std::vector<std::string>>()->multitoken(), "read: the Matrix Market files")
      ("matrices", po::value<std::string>()->default_value(""), "comma-separated files or generator specs (default: the issue's set)")
      ("matrix-dir", po::value<std::string>()->default_value(default_matrix_dir()), "directory of SPD .mtx files added to the set (block-cg: block-cg vs multi-cg iterations on those below 50000 rows)")
      ("no-files", "do not add the files of --matrix-dir")
      ("kernels", po::value<std::string>()->default_value(""), "comma-separated registry names (default: all of the family, cuSPARSE, auto)")
      ("k", po::value<std::string>()->default_value("1,2,4,8,16,32"), "block widths (spmm), or the k of block-cg")
      ("runs", po::value<int>()->default_value(50), "timed runs per kernel (median reported)")
      ("threads", po::value<std::string>()->default_value("0"), "read: comma-separated thread counts beside one (0: every core)")
      ("kernel", po::value<std::string>()->default_value("auto"), "cg: kernel for our CG")
      ("tol", po::value<double>()->default_value(1e-8), "cg/block-cg: relative tolerance")
      ("maxit", po::value<int>()->default_value(20000), "cg/block-cg: iteration limit")
      ("output", po::value<std::string>(), "write results as JSON (.json) or CSV (.csv)");
  po::positional_options_description pos;
  pos.add("what", 1).add("files", -1);
  po::variables_map vm;
  if (!parse_command_line(args, opts, pos, vm)) return 0;
  if (vm.count("list")) {
    for (const auto& e : kernel_registry())
      std::printf("%-14s %-8s %s\n", e.name.c_str(),
                  e.family == KernelFamily::spmv ? "spmv" : e.family == KernelFamily::spmm ? "spmm" : "baseline",
                  e.description.c_str());
    return 0;
  }
  if (!vm.count("what")) throw UsageError("missing benchmark: spmv, spmm, cg, block-cg or read");
  if (vm["runs"].as<int>() < 1) throw UsageError("--runs must be >= 1");
  if (vm["what"].as<std::string>() == "read")  // the host reader: no device, few runs (each reads the whole file)
    return bench_read(vm.count("files") ? vm["files"].as<std::vector<std::string>>() : std::vector<std::string>{},
                      vm["runs"].defaulted() ? 5 : vm["runs"].as<int>(), read_thread_counts(vm["threads"].as<std::string>()));
  if (vm.count("files")) throw UsageError("unexpected arguments after '" + vm["what"].as<std::string>() + "'");
  if (!vm.count("no-files")) mtx_files(vm["matrix-dir"].as<std::string>());  // arguments before the device
  std::string why;
  if (!cuda_device_available(&why)) throw CudaError("benchmarks need a CUDA device: " + why);
  const std::string what = vm["what"].as<std::string>();
  if (what == "spmv") return bench_spmv_spmm(false, vm);
  if (what == "spmm") return bench_spmv_spmm(true, vm);
  if (what == "cg") return bench_cg(vm);
  if (what == "block-cg") return bench_block_cg(vm);
  throw UsageError("unknown benchmark '" + what + "': expected spmv, spmm, cg, block-cg or read");
}

}  // namespace spcg
