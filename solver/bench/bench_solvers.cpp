// spcg bench cg|block-cg|vcycle: our CG against the fused floor and a cuSPARSE + cuBLAS reference CG; block CG
// against k single CG solves and multi-cg, on generated systems and the SPD files; one AMG V-cycle against its
// bytes model.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "solver/bench/bench_common.hpp"
#include "sparse/eigen_bridge.hpp"
#include "spcg/error.hpp"
#include "solver/bench/reference_cg.hpp"
#include "kernels/device_array.hpp"
#include "kernels/linear_operator.hpp"
#include "kernels/registry.hpp"
#include "solver/preconditioner.hpp"
#include "solver/solver.hpp"

namespace spcg {
namespace {

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
void bench_block_cg_files(const BenchOptions& bo, int k, double rtol, BenchOutput& out) {
  const std::vector<std::string> files = spd_files(bo.matrix_dir, 50000);
  if (files.empty()) return;
  std::printf("\n== SPD files of %s (n < 50000), k = %d random right-hand sides, rtol %.0e: iterations of the slowest column\n",
              bo.matrix_dir.c_str(), k, rtol);
  std::printf("%-22s %8s %-7s %9s %9s %7s %10s %10s %-9s %s\n", "matrix", "rows", "precond", "block-cg", "multi-cg", "ratio",
              "block ms", "multi ms", "converged", "block-cg fallback");
  int solves = 0, fallbacks = 0, slower = 0, slower_time = 0, both_converged = 0;
  long long block_sum = 0, multi_sum = 0;
  double block_ms = 0, multi_ms = 0;
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
      const std::unique_ptr<PreconditionerOp> jacobi_m = jacobi ? make_jacobi(dinv_host) : nullptr;
      SolveOptions o;
      o.stop = {rtol, 0, bo.max_iterations};
      o.time_kernels = false;
      const char* precond = name_of(jacobi ? Preconditioner::jacobi : Preconditioner::none);
      auto run = [&](SolverKind solver) {
        X.values.upload(std::vector<double>(X.size(), 0.0));
        return solve(solver, *op, jacobi_m.get(), B, X, o);
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
      Record& row = out.add("files");
      row.kv("matrix", p.name).kv("rows", a.rows).kv("precond", precond);
      row.kv("block_cg_iterations", bi).kv("multi_cg_iterations", mi).kv("block_cg_converged", block.all_converged());
      row.kv("block_cg_ms", block.solve_ms).kv("multi_cg_ms", multi.solve_ms);
      row.kv("multi_cg_converged", multi.all_converged()).kv("fallback_columns", block.fallback_columns);
      row.kv("fallback_reason", block.fallback_reason);
    }
  }
  std::printf("block-cg kept its block to the end in %d of %d solves; where both converged (%d), %lld iterations vs "
              "multi-cg's %lld (%.2fx), more than multi-cg in %d; %.1f ms vs %.1f ms (%.2fx), slower in %d\n",
              solves - fallbacks, solves, both_converged, block_sum, multi_sum,
              static_cast<double>(block_sum) / std::max(1LL, multi_sum), slower, block_ms, multi_ms,
              block_ms / std::max(1e-9, multi_ms), slower_time);
  Record& sum = out.summary();
  sum.kv("files_solves", solves).kv("files_fallbacks", fallbacks).kv("files_block_iterations", block_sum);
  sum.kv("files_multi_iterations", multi_sum).kv("files_block_slower", slower);
  sum.kv("files_block_ms", block_ms).kv("files_multi_ms", multi_ms).kv("files_block_slower_time", slower_time);
}

}  // namespace

int bench_cg(const BenchOptions& bo) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = bo.matrices;
  if (matrices.empty()) matrices = {"poisson3d:128"};
  for (const auto& f : spd_files(bo.matrix_dir, 50000)) matrices.push_back(f);
  const double rtol = bo.rtol;
  BenchOutput out;
  out.header().kv("device", dev).kv("copy_bandwidth_gbs", copy_gbs).kv("rtol", rtol);
  // Three floors an iteration: at the copy bandwidth, the CSR model's bytes (12 B an entry, 84 B a row: the
  // product's x, y and offsets, 20 B, and the fused iteration's vector passes, 64 B) and the kernel's own bytes
  // (DIA's stripes, SELL's padding: bytes_per_apply) with the same 64 B a row of vector passes; and, measured, the
  // iteration's three passes (the product, update-xr's 48 B a row, update-p's 24 B) as three device copies of as
  // many bytes back to back -- what moving those bytes in three launches takes at this size, their ramps and
  // tails included.
  std::printf("\n%-22s %8s %6s %6s %10s %10s %8s %10s %8s %10s %8s %10s %8s %7s %7s %s\n", "matrix", "rows", "iters",
              "eigen", "us/iter", "floor us", "x floor", "own us", "x own", "copies us", "x copies", "ref us/it", "vs ref",
              "ref it", "true r", "kernel");
  for (const auto& m : matrices) {
    Problem p;
    if (!load_or_skip(m, p)) continue;
    const CsrMatrix& a = p.a;
    OperatorOptions oo;
    auto op = make_operator(bo.kernel, a, oo);
    SolveOptions o;
    o.stop = {rtol, 0, bo.max_iterations};
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
    const double own_floor_us = (op->bytes_per_apply(1) + 64.0 * a.rows) / (copy_gbs * 1e3);
    const double copies_us = 1e3 * copies_ms({op->bytes_per_apply(1), 48.0 * a.rows, 24.0 * a.rows});
    int eigen_it = -1;
    if (a.rows < 50000) {
      DenseBlock b(a.rows, 1, 1.0);
      eigen_it = eigen_cg(a, b, rtol, bo.max_iterations, /*jacobi=*/false).iterations[0];
    }
    reference_cusparse_cublas_cg(a, rtol, 20);  // warm-up
    const ReferenceCgResult ref = reference_cusparse_cublas_cg(a, rtol, bo.max_iterations);
    const double ref_us = 1e3 * ref.ms / std::max(1, ref.iterations);
    const double rel_true = res.columns[0].true_residual / res.columns[0].b_norm;
    std::printf("%-22s %8d %6d %6d %10.2f %10.2f %8.2f %10.2f %8.2f %10.2f %8.2f %10.2f %7.2fx %7d %7.1e %s\n",
                p.name.substr(0, 22).c_str(), a.rows, res.columns[0].iterations, eigen_it, us_iter, floor_us,
                us_iter / floor_us, own_floor_us, us_iter / own_floor_us, copies_us, us_iter / copies_us, ref_us,
                ref_us / us_iter, ref.iterations, rel_true,
                (auto_choice(*op, 1) + (res.used_persistent ? " (persistent)" : "")).c_str());
    Record& row = out.add("results");
    row.kv("matrix", p.name).kv("rows", a.rows).kv("nnz", static_cast<long long>(a.nnz()));
    row.kv("iterations", res.columns[0].iterations).kv("eigen_iterations", eigen_it).kv("us_per_iteration", us_iter);
    row.kv("fused_floor_us", floor_us).kv("ratio_to_floor", us_iter / floor_us);
    row.kv("own_bytes_floor_us", own_floor_us).kv("ratio_to_own_bytes_floor", us_iter / own_floor_us);
    row.kv("passes_as_copies_us", copies_us).kv("ratio_to_passes_as_copies", us_iter / copies_us);
    row.kv("reference_us_per_iteration", ref_us).kv("speedup_vs_reference", ref_us / us_iter);
    row.kv("reference_iterations", ref.iterations).kv("relative_true_residual", rel_true);
    row.kv("status", to_string(res.columns[0].status)).kv("kernel", auto_choice(*op, 1)).kv("cuda_graph", res.used_graph)
        .kv("persistent_kernel", res.used_persistent);
  }
  if (bo.output) out.write(*bo.output);
  return 0;
}

int bench_block_cg(const BenchOptions& bo) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = bo.matrices;
  if (matrices.empty()) matrices = {"poisson3d:128", "poisson3d27:100"};
  const int k = bo.ks.empty() ? 16 : bo.ks.back();
  const double rtol = bo.rtol;
  BenchOutput out;
  out.header().kv("device", dev).kv("copy_bandwidth_gbs", copy_gbs).kv("k", k).kv("rtol", rtol);
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
    o.stop = {rtol, 0, bo.max_iterations};
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
    Record& row = out.add("results");
    row.kv("matrix", p.name).kv("rows", a.rows).kv("single_cg_ms", single.solve_ms);
    row.kv("single_cg_iterations", max_iterations(single)).kv("block_cg_ms", block.solve_ms).kv("block_cg_ratio", block.solve_ms / single.solve_ms);
    row.kv("block_cg_iterations", max_iterations(block)).kv("block_cg_applies", static_cast<long long>(block.operator_applies));
    row.kv("block_cg_converged", block.all_converged()).kv("block_cg_worst_true_residual", worst(block));
    row.kv("multi_cg_ms", multi.solve_ms).kv("multi_cg_ratio", multi.solve_ms / single.solve_ms);
    row.kv("multi_cg_iterations", max_iterations(multi)).kv("multi_cg_applies", static_cast<long long>(multi.operator_applies));
    row.kv("multi_cg_converged", multi.all_converged()).kv("multi_cg_worst_true_residual", worst(multi));
  }
  if (!bo.matrix_dir.empty()) bench_block_cg_files(bo, k, rtol, out);
  if (bo.output) out.write(*bo.output);
  return 0;
}

// One AMG V-cycle (the preconditioner's apply on one column, the default options: degree-3 Chebyshev before and
// after) against its bytes model (the hierarchy's bytes_per_apply: each level's smoother products, its vector
// passes, R and P, and the coarsest level's dense product) at the copy bandwidth; the hierarchy in FP64 and with
// its FP32 levels (the --precision mixed hierarchy), each timed by CUDA events after three warm-up cycles, the
// median of --runs. Level 0 runs --kernel (auto: auto's choice); the coarser levels auto's.
int bench_vcycle(const BenchOptions& bo) {
  const double copy_gbs = measure_copy_bandwidth_gbs();
  const std::string dev = device_name();
  std::printf("device: %s\ncopy bandwidth (D2D memcpy, read+write): %.1f GB/s\n", dev.c_str(), copy_gbs);
  std::vector<std::string> matrices = bo.matrices;
  if (matrices.empty()) matrices = {"poisson3d:200", "poisson3d27:256"};
  if (const KernelEntry* e = find_kernel(bo.kernel); e && e->fp32_values)
    throw UsageError("bench vcycle: --kernel " + bo.kernel + " stores FP32 values; give its FP64 kernel (the FP32 "
                     "hierarchy's row takes the variant)");
  BenchOutput out;
  out.header().kv("device", dev).kv("copy_bandwidth_gbs", copy_gbs).kv("runs", bo.runs);
  // Beside the bytes floor, measured: the cycle's launches as device copies of as many bytes, back to back (what
  // moving its bytes in that many launches at their sizes takes: the coarse levels' small ones are latency), and the
  // same for a whole AMG-PCG iteration (the cycle, then cg's product on level 0's operator as the iteration reads
  // it, update-xr's 48 B a row, r'z's 16 and update-p's 24).
  std::printf("\n%-22s %9s %6s %-7s %-6s %9s %10s %10s %10s %8s %8s %10s %8s %10s  %s\n", "matrix", "rows", "levels",
              "values", "steps", "setup ms", "us/cycle", "model MB", "floor us", "x floor", "launches", "copies us",
              "x copies", "it copies", "level kernels");
  for (const auto& m : matrices) {
    Problem p;
    if (!load_or_skip(m, p)) continue;
    const MatrixSetup setup(p.a);
    const OperatorOptions oo;
    std::unique_ptr<LinearOperator> op;
    try {
      op = make_operator(bo.kernel, setup, oo);  // level 0's (--kernel)
    } catch (const Error& e) {  // a kernel that refuses this matrix: a skipped line, the others go on
      std::printf("%-22s %9d skipped: %s\n", p.name.substr(0, 22).c_str(), p.a.rows, e.what());
      continue;
    }
    const int32_t n = p.a.rows;
    DeviceArray<double> r(std::vector<double>(static_cast<size_t>(n), 1.0), "vcycle r");
    DeviceArray<double> z(static_cast<size_t>(n), "vcycle z");
    for (const Precision precision : {Precision::double_precision, Precision::mixed})
      for (const bool fuse : {false, true}) {  // the smoother's steps apart, then fused into the level products
      const char* values = precision == Precision::mixed ? "fp32" : "fp64";
      const char* steps = fuse ? "fused" : "apart";
      const PreconditionerInputs in{setup, *op, oo, p.name, 1, bo.rtol, 0, precision};
      std::unique_ptr<PreconditionerOp> amg;
      double setup_ms = 0;
      PreconditionerOptions po;
      po.fuse_smoothing = fuse;
      try {
        setup_ms = time_on_stream_ms(0, [&] { amg = make_preconditioner(Preconditioner::amg, po, in); });
      } catch (const Error& e) {  // no level with an FP32 kernel, a stalled coarsening, a non-SPD level, memory
        std::printf("%-22s %9d %6s %-7s %-6s skipped: %s\n", p.name.substr(0, 22).c_str(), n, "-", values, steps, e.what());
        continue;
      }
      const PreconditionerReport& report = amg->report();
      amg->reserve(1);
      for (int warm = 0; warm < 3; ++warm) amg->apply(r.data(), z.data(), 1, 0);
      std::vector<double> ms;
      for (int run = 0; run < bo.runs; ++run)
        ms.push_back(time_on_stream_ms(0, [&] { amg->apply(r.data(), z.data(), 1, 0); }));
      const double us = 1e3 * median(ms), bytes = amg->bytes_per_apply(1);
      const double floor_us = bytes / (copy_gbs * 1e3);
      std::vector<double> launches = amg->bytes_per_launch(1);
      const double copies_us = 1e3 * copies_ms(launches);
      const auto* held = dynamic_cast<const HoldsFp32Copy*>(amg.get());
      const LinearOperator* iterated = held && held->fp32_copy_of_product() ? held->fp32_copy_of_product() : op.get();
      for (const double b : {iterated->bytes_per_apply(1), 48.0 * n, 16.0 * n, 24.0 * n}) launches.push_back(b);
      const double iteration_copies_us = 1e3 * copies_ms(launches);
      std::string kernels;
      for (const AmgLevelReport& level : report.levels) kernels += (kernels.empty() ? "" : ", ") + level.kernel;
      std::printf("%-22s %9d %6zu %-7s %-6s %9.1f %10.1f %10.1f %10.1f %8.2f %8zu %10.1f %8.2f %10.1f  %s\n",
                  p.name.substr(0, 22).c_str(), n, report.levels.size(), values, steps, setup_ms, us, bytes / 1e6,
                  floor_us, us / floor_us, launches.size() - 4, copies_us, us / copies_us, iteration_copies_us,
                  kernels.c_str());
      Record& row = out.add("results");
      row.kv("matrix", p.name).kv("rows", n).kv("nnz", static_cast<long long>(p.a.nnz())).kv("values", values);
      row.kv("smoothing_steps", steps);
      row.kv("levels", static_cast<int>(report.levels.size())).kv("operator_complexity", report.operator_complexity);
      row.kv("setup_ms", setup_ms).kv("us_per_cycle", us).kv("model_bytes", bytes).kv("floor_us", floor_us);
      row.kv("ratio_to_floor", us / floor_us).kv("level_kernels", kernels);
      row.kv("launches", static_cast<int>(launches.size() - 4)).kv("launches_as_copies_us", copies_us);
      row.kv("ratio_to_launches_as_copies", us / copies_us).kv("pcg_iteration_as_copies_us", iteration_copies_us);
    }
  }
  if (bo.output) out.write(*bo.output);
  return 0;
}

}  // namespace spcg
