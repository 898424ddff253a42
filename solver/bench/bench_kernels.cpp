// spcg bench spmv|spmm: every registry kernel (or a list) on each matrix at each block width, CUDA events,
// warm-up, the median of many runs, checked against the first kernel's output; cuSPARSE and the device copy
// bandwidth measured in the same process, each figure printed beside its bytes model.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>

#include "solver/bench/bench_common.hpp"
#include "kernels/bench/bench_probes.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_formats.hpp"
#include "spcg/error.hpp"
#include "sparse/formats.hpp"
#include "spcg/generators.hpp"
#include "sparse/json.hpp"
#include "kernels/registry.hpp"

namespace spcg {
namespace {

struct Row {
  std::string matrix, kernel, status;
  int k = 1;
  int64_t rows = 0, nnz = 0;
  double setup_ms = 0, apply_ms = 0, csr_gbs = 0, own_gbs = 0, gflops = 0, copy_fraction = 0, vs_cusparse = 0,
         own_vs_same_size_copy = 0,
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
    j.kv("own_vs_same_size_copy", r.own_vs_same_size_copy);
    j.kv("copy_fraction_csr_model", r.copy_fraction).kv("speedup_vs_best_cusparse", r.vs_cusparse);
    j.kv("per_rhs_ms", r.per_rhs_ms).kv("per_rhs_vs_best_spmv", r.vs_spmv_per_rhs).kv("max_rel_diff", r.max_rel_diff);
    j.kv("latency_bound", r.latency_bound).kv("note", r.note).end_object();
  }
  j.end_array().end_object();
  f << j.str() << "\n";
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
  // %copy: the CSR model's bytes against the copy bandwidth; own/cp: the kernel's own bytes against a copy of as
  // many bytes (one launch at this size: its ramp and tail are the kernel's floor too)
  std::printf("%-14s %4s %9s %8s %10s %8s %8s %7s %7s %7s %9s %9s %s\n", "kernel", "k", "setup ms", "setup/ap", "apply us",
              "CSR GB/s", "own GB/s", "GFLOP/s", "%copy", "own/cp", "vs cuSP", "max diff", "note");
  std::map<double, double> same_size_copy_gbs;  // by bytes
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
    {
      const double own = c.op->bytes_per_apply(k);
      double& copy = same_size_copy_gbs[own];
      if (copy == 0) copy = own / (copies_ms({own}) * 1e6);
      r.own_vs_same_size_copy = r.own_gbs / copy;
    }
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
    std::printf("%-14s %4d %9.2f %8.1f %10.2f %8.1f %8.1f %7.1f %6.1f%% %6.1f%% %8.2fx %9.1e %s\n", r.kernel.c_str(), r.k,
                r.setup_ms, r.setup_ms / r.apply_ms, r.apply_ms * 1e3, r.csr_gbs, r.own_gbs, r.gflops,
                100 * r.copy_fraction, 100 * r.own_vs_same_size_copy, r.vs_cusparse, r.max_rel_diff, r.note.c_str());
    out.push_back(r);
  }
}

}  // namespace

int bench_spmv_spmm(bool spmm, const BenchOptions& o) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = o.matrices;
  if (matrices.empty())
    matrices = spmm ? std::vector<std::string>{"poisson3d:128", "poisson3d27:100", "powerlaw:1000000"}
                    : std::vector<std::string>{"poisson3d:128", "poisson3d:200", "poisson3d27:100", "aniso3d:160",
                                               "powerlaw:2000000"};
  if (!o.matrix_dir.empty() && !spmm)
    for (const auto& f : spd_files(o.matrix_dir, 0)) matrices.push_back(f);
  std::vector<std::string> kernels = o.kernels;
  if (kernels.empty()) {
    kernels = {"csr-scalar"};  // the cross-check reference first
    for (const auto& n : kernel_names(spmm ? KernelFamily::spmm : KernelFamily::spmv))
      if (n != "csr-scalar") kernels.push_back(n);
    // SpMV references for the per-RHS ratio: the banded, regular and skewed winners.
    if (spmm) kernels.insert(kernels.begin() + 1, {"sell", "dia", "csr-vector", "csr-adaptive"});
    for (const auto& n : kernel_names(KernelFamily::baseline)) kernels.push_back(n);
    kernels.push_back("auto");
  }
  std::vector<int> ks = o.ks;
  if (ks.empty() || !spmm) ks = {1};
  if (spmm && std::find(ks.begin(), ks.end(), 1) == ks.end()) ks.insert(ks.begin(), 1);
  std::vector<Row> rows;
  for (const auto& m : matrices) {
    try {
      bench_matrix(m, kernels, ks, o.runs, copy_gbs, rows);
    } catch (const InputError& e) {
      std::printf("\n== %s: skipped: %s\n", m.c_str(), e.what());
    }
  }
  if (o.output) write_rows(*o.output, rows, copy_gbs, dev);
  return 0;
}


}  // namespace spcg
